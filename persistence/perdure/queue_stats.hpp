#pragma once

// What operators see of a queue (`queues::stats`), as the stores count it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace perdure {

/// A queue's limits as its row stores them (the last registration's).
struct queue_limits {
  std::optional<std::int32_t> concurrency;
  std::optional<std::int32_t> partition_concurrency;
  std::optional<std::int32_t> rate_limit;
  std::int64_t rate_period_ms = 1000;
};

/// One partition's (or the whole queue's) items now.
struct partition_stats {
  std::string partition_key;
  /// Waiting and ready to start.
  std::int64_t ready = 0;
  /// Waiting for their time (a delayed enqueue, a retry's backoff).
  std::int64_t delayed = 0;
  /// Started and not ended (sleeping ones too).
  std::int64_t running = 0;
  /// Ready items the queue's limits hold back now.
  std::int64_t throttled = 0;
};

/// A queue's items: in total and per partition with items waiting or
/// running (by key), its dead letters, its starts within the last rate
/// period (rate-limited queues only), and its stored limits.
struct queue_stats {
  std::string name;
  queue_limits limits;
  partition_stats total;
  std::int64_t dead_letters = 0;
  std::int64_t recent_starts = 0;
  std::vector<partition_stats> partitions;
};

} // namespace perdure
