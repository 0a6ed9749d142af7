#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perdure/persistence/records.hpp"
#include "perdure/queue_stats.hpp"

namespace perdure::persistence {

/// A queue's limits as stored in its row (each process claims by its own
/// registration; the row is what operators and clients read).
struct queue_definition {
  std::string name;
  /// Items PENDING at once across every process; nothing: no limit.
  std::optional<std::int32_t> concurrency;
  /// Items PENDING at once per partition key.
  std::optional<std::int32_t> partition_concurrency;
  /// At most this many starts in any window of `rate_period_ms`.
  std::optional<std::int32_t> rate_limit;
  std::int64_t rate_period_ms = 1000;
};

/// One claim of queue items (see `queue_store::claim_queued`).
struct queue_claim_request {
  queue_definition queue;
  /// The claimer, and which workflows it can run.
  std::string executor;
  claim_filter filter;
  /// The claimer's clock (ms since the epoch), for `not_before`.
  std::int64_t now_ms = 0;
  /// Most items to take: the claimer's idle workers for this queue (and,
  /// without a shared limit, what it claims ahead for them).
  std::int32_t capacity = 0;
  /// The rate limit counts starts over its period plus this: an item
  /// starts running within this long of its claim (the claimer takes only
  /// as many as it has idle workers, and starts them at once), so no window
  /// of the period sees more than the limit by actual start time. Costs
  /// margin / (period + margin) of the limit: 3 % at one second.
  std::int64_t rate_margin_ms = 30;
  /// With a partition limit: read partitions after this key first (the
  /// last claim's `partition_cursor`), then from the first one, so that
  /// partitions beyond what one claim reads take their turn (PostgreSQL
  /// reads at most 1000 partitions' heads per claim).
  std::string partition_after;
};

/// What a claim took, and what held the rest back.
struct queue_claim {
  /// The items claimed, PENDING under the claimer at a new epoch.
  std::vector<run_record> runs;
  /// Per item of `runs`: never started before, so it has no journal yet
  /// (may be empty: unknown, load it).
  std::vector<bool> fresh;
  /// Ready items were left because the queue's (or a partition's)
  /// concurrency is used up: they can go when a running item ends.
  bool concurrency_bound = false;
  /// Ready items were left for the rate limit: the next start is allowed
  /// this many ms from now.
  std::optional<std::int64_t> rate_wait_ms;
  /// When the first item not ready yet (delayed, backing off) becomes
  /// ready (ms since the epoch, the claimer's clock), if the claim left
  /// room for it.
  std::optional<std::int64_t> next_ready_ms;
  /// With a rate limit: the time (database clock, ms) its starts were
  /// stamped with in the rate limit's count (see `restamp_queue_starts`).
  std::int64_t stamped_ms = 0;
  /// Where the next claim's partitions start (see `partition_after`):
  /// empty once every partition with ready items was read.
  std::string partition_cursor;
};

/// Queues: items are runs with a queue name, ENQUEUED until claimed. One
/// role of `store`.
class queue_store {
public:
  virtual ~queue_store() = default;

  /// Creates or updates queue `q`'s row.
  virtual void define_queue(const queue_definition& q) = 0;

  /// Inserts `item` (status ENQUEUED, `queue_name` set) and announces it
  /// (`q:<queue>`, on commit), unless a run with its id exists, or an item
  /// with its `dedup_id` is ENQUEUED or PENDING in its queue: then returns
  /// that one, `created` false.
  virtual create_result enqueue(const run_record& item) = 0;

  /// In one transaction, under the queue row's lock if the queue has a
  /// limit shared by processes: counts what runs and what started lately,
  /// and claims the ready items the limits allow, by priority, then age,
  /// one partition at a time in turn (`choose_claims`).
  virtual queue_claim claim_queued(const queue_claim_request& req) = 0;

  /// Items of `queues` (one name per item, repeats allowed) started again
  /// after a takeover, a recovery or a revival: each counts against its
  /// queue's rate limit like a claim's start (a queue without one: nothing).
  virtual void record_queue_starts(const std::vector<std::string>& queues)
    = 0;

  /// A claim's `count` starts of `queue`, stamped `stamped_ms` (see
  /// `queue_claim::stamped_ms`), begin only now (a slow commit or journal
  /// load): `count` stamps of that time move to now, so the rate limit
  /// holds by actual start time.
  virtual void restamp_queue_starts(std::string_view queue,
                                    std::int64_t stamped_ms,
                                    std::int64_t count)
    = 0;

  /// Returns, for each of `queues` with ENQUEUED items, when the first of
  /// them may be claimed (ms since the epoch; 0: now). One statement.
  virtual std::vector<std::pair<std::string, std::int64_t>>
  queued_heads(const std::vector<std::string>& queues) = 0;

  /// Puts item `id`, whose attempt under `owner` failed with `error`, back
  /// in its queue until `not_before_ms`, forgetting its journal from its
  /// first failed step on (those steps run again; the ones before do not).
  /// Returns false if fenced.
  virtual bool retry_item(const fence& owner, std::string_view id,
                          std::int64_t not_before_ms, const std::string& error,
                          std::int64_t at_ms)
    = 0;

  /// Moves DEAD_LETTER item `id` back to ENQUEUED with its attempts reset
  /// (its journal as `retry_item` leaves it) and announces it. Returns the
  /// item, or nothing if it is not a dead letter. Throws
  /// `conflicting_id` if another item holds its dedup id now.
  /// A `resume` event records it, with `reason`.
  virtual std::optional<run_record> requeue(std::string_view id,
                                            std::int64_t at_ms,
                                            std::string_view reason)
    = 0;

  /// Returns queue `queue`'s counts (`now_ms`: what is ready).
  virtual queue_stats count_queue(std::string_view queue,
                                   std::int64_t now_ms)
    = 0;
};

} // namespace perdure::persistence
