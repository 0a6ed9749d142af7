#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

class runtime_impl;

/// What `signal_run` tells a run actor.
enum class run_signal : std::int32_t {
  /// Start (or replay) the code.
  start,
  /// Try the operation `seq` again.
  retry,
  /// A write for `seq` was fenced: the run is owned elsewhere now.
  fenced,
  /// The timer of operation `seq` is due, or (`seq` -1) something was
  /// delivered to the run.
  wake,
  /// The run was cancelled in the store.
  cancel,
  /// The final status was written (`seq`: the `write_ack`).
  ended,
  /// The store could not record what the run's memory assumes (e.g. that
  /// it is awake), or went away past its retry budget: stop, and let
  /// housekeeping revive the run from the store.
  restart,
  /// Another copy of the run replaces this one, or the runtime stops:
  /// stop without recording anything.
  drop,
};

/// The `seq` of a run's deadline timer (cancels it).
constexpr std::int32_t deadline_seq = -2;

/// The wake-up time of a run passivated until a delivery (no timer).
constexpr std::int64_t passivated_forever
  = std::numeric_limits<std::int64_t>::max();

/// Spawns the actor that owns `run`: it (re)starts the workflow coroutine,
/// feeding it the recorded outcomes in `journal` first, performs its durable
/// operations, and records its final status.
/// Sends `kind` (about operation `seq`) to run actor `run`.
void signal_run(const caf::actor& run, run_signal kind, std::int32_t seq);

caf::actor spawn_run_actor(caf::actor_system& sys, runtime_impl& rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal);

} // namespace perdure::detail
