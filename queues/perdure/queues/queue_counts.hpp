#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace perdure::queues {

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

/// What an operator sees of a queue (see `queues::stats`).
struct queue_stats {
  std::string name;
  partition_stats total;
  std::int64_t dead_letters = 0;
  /// Starts within the last rate period (rate-limited queues only).
  std::int64_t recent_starts = 0;
  /// Partitions with items waiting or running, by key.
  std::vector<partition_stats> partitions;
};

} // namespace perdure::queues
