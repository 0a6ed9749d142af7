#pragma once

// Putting runs into memory: spawning a claimed run's actor (or ending a
// run recovered too often), reviving a run of this executor that is not in
// memory (woken after passivating, lost, crashed), waking one, spawning a
// claimed key's actor.

#include <caf/actor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct object_activation;
struct runtime_services;

class run_launcher {
public:
  explicit run_launcher(runtime_services& svc) : svc_(svc) {}

  /// Why a run of this executor comes back into memory.
  enum class revival {
    /// Woken (a delivery, a timer) after it passivated: no other copy of
    /// it exists, so it keeps its epoch -- and a takeover or adoption
    /// bringing it in here at that epoch meanwhile is not fenced by this
    /// claim (two actors of one run would each run the step under way).
    /// The store claims it only while its wake-up time is written (it
    /// passivated); a run whose actor went otherwise is an orphan, revived
    /// at a new epoch.
    wake,
    /// Its actor was lost (a checkpoint failed past the retry budget, a
    /// claim whose reply was lost): a new epoch fences what it may still
    /// have in flight.
    lost,
    /// Its actor failed: as `lost`, and counted against
    /// `max_recovery_attempts`.
    crashed,
  };

  /// Spawns the actor of `run`, replaying `journal` (or, if the run was
  /// recovered too often, ends it RETRIES_EXCEEDED). Returns the actor, or
  /// nothing if none was spawned.
  std::optional<caf::actor>
  spawn_run(persistence::run_record run,
            std::vector<persistence::journal_entry> journal);

  /// Claims run `id` (see `revival`) and spawns its actor replaying its
  /// journal, if it is a PENDING run of this executor not in memory here
  /// and not one this process was fenced from (on the control executor: it
  /// blocks). A store failure leaves the run orphaned: the next
  /// housekeeping tries again.
  void revive(const std::string& id, revival why = revival::wake);

  /// Revives the orphans (see `run_registry::orphaned`), on the control
  /// executor.
  void revive_orphans();

  /// Something was delivered to run `id` (an awakeable resolved; `seq` -1)
  /// or its timer for operation `seq` is due: tells its actor, or brings a
  /// passivated run of this executor back.
  void wake(const std::string& id, std::int32_t seq);

  /// Spawns the actor of a claimed key; nothing once stopping.
  std::optional<caf::actor> spawn_object(object_activation a);

  /// Queue items among `runs` start again here (a takeover, a recovery, a
  /// revival after a crash): each counts against its queue's rate limit.
  void count_queue_restarts(const std::vector<persistence::run_record>& runs);

private:
  runtime_services& svc_;
};

} // namespace perdure::detail
