#pragma once

// What the runtime asks of its queues. perdure::queues implements it; a
// runtime without queues has none.

#include <caf/actor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

namespace perdure::detail {

class step_executor;

/// How an item is retried in a process where its queue is not registered.
struct default_item_retry {
  static constexpr std::int32_t max_attempts = 3;
  static constexpr std::int64_t backoff_ms = 1000;
};

class queue_hooks {
public:
  virtual ~queue_hooks() = default;

  /// The runtime recovered its runs and runs: claiming may begin.
  virtual void start() = 0;

  /// The runtime stops: claim nothing more (before its actors stop).
  virtual void stop() = 0;

  /// Every actor is gone: let the worker threads and actor handles go
  /// (before the actor system does).
  virtual void join() = 0;

  /// The lease was lost: items claimed ahead are others' to run now.
  virtual void lease_lost() = 0;

  /// Items may wait in `queue` (a `q:` notice).
  virtual void notice(const std::string& queue) = 0;

  /// Returns the threads that run the steps of `queue`'s items (its worker
  /// pool), or null for the runtime's.
  virtual step_executor* steps_for(const std::string& queue) = 0;

  /// An attempt of an item of `queue` failed; it was its `attempts`-th
  /// (`terminal`: with a `terminal_error`). Returns when to try again (ms
  /// since the epoch), or nothing: it goes to the dead letters.
  virtual std::optional<std::int64_t>
  retry_at(const std::string& queue, std::int32_t attempts, bool terminal)
    = 0;

  /// Item `id` of `queue` runs here now, hosted by `actor` (claimed,
  /// recovered, taken over, revived).
  virtual void holding(const std::string& queue, const std::string& id,
                       const caf::actor& actor)
    = 0;

  /// Item `id` runs here no more: it ended, went back to its queue, or is
  /// owned elsewhere now.
  virtual void released(const std::string& id) = 0;

  /// Item `id`'s code ended; its end is being written. A queue whose
  /// limits are this process's alone gives its worker the next item now
  /// (the end still counts for the shared limits until it committed).
  virtual void finishing(const std::string& id) = 0;
  /// Adds the ids of the items claimed here and waiting for a worker
  /// (PENDING here with no actor yet, on purpose) to `ids`.
  virtual void claimed_ahead(std::unordered_set<std::string>& ids) = 0;
};

} // namespace perdure::detail
