#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace perdure::queues {

/// At most `limit` items start in any window of `period`, across every
/// process (counted on the database's clock, by when they start).
struct rate_limit {
  std::int32_t limit = 0;
  std::chrono::milliseconds period{1000};
};

/// How a queue retries an item whose workflow failed (threw): the
/// attempt's completed steps stay recorded, the failed step and what
/// followed it run again. An item whose attempts all failed, or that threw
/// a `terminal_error`, ends DEAD_LETTER.
struct item_retry_policy {
  /// Attempts in all (1: never retried).
  std::int32_t max_attempts = 3;
  /// Wait before the second attempt, then `factor` times longer each time,
  /// at most `max_backoff`.
  std::chrono::milliseconds backoff{1000};
  double factor = 2.0;
  std::chrono::milliseconds max_backoff{60'000};
};

/// A queue's limits and policy. Every process that registers a queue
/// should register the same limits: each claims by its own (the stored row,
/// which operators read, is the last registration's).
struct queue_options {
  /// Items running at once across every process; nothing: no limit.
  std::optional<std::int32_t> concurrency{};
  /// Items running at once in this process: its workers for the queue
  /// (each item's steps run on the queue's own threads, this many).
  std::int32_t worker_concurrency = 8;
  /// Items running at once per partition key (e.g. per customer).
  std::optional<std::int32_t> partition_concurrency{};
  /// Starts per period, across every process.
  std::optional<queues::rate_limit> rate{};
  item_retry_policy retry;
  /// How often an idle process looks for items it was not told about
  /// (NOTIFY does the waking; one statement for all its queues).
  std::chrono::milliseconds poll_interval{5000};
};

/// Options of one enqueue.
struct enqueue_options {
  /// The item's workflow id, which is also its idempotency key (as for
  /// `start_workflow`). Empty: a fresh random id.
  std::string id{};
  /// Claimed lowest first, then in the order enqueued.
  std::int32_t priority = 0;
  /// The partition its queue's `partition_concurrency` counts it in.
  std::string partition_key{};
  /// While an item with this dedup id is ENQUEUED or PENDING in the queue,
  /// enqueueing another returns that item instead (once it has ended, the
  /// id is free again).
  std::string dedup_id{};
  /// Not claimed before this long from now.
  std::chrono::milliseconds delay{0};
  /// Cancelled if not ended this long after it started (each attempt's
  /// claim sets its deadline); zero: never.
  std::chrono::milliseconds timeout{0};
  /// As `start_options::traceparent`, for the item's run.
  std::string traceparent{};
};

} // namespace perdure::queues
