#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

class runtime_impl;

/// Tells a run actor that its timer for operation `seq` is due, or (`seq`
/// -1) that something was delivered to it.
using wake_atom = caf::atom_constant<caf::atom("wake")>;

/// Tells a run actor that its run was cancelled in the store.
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;

/// The `seq` of a run's deadline timer (cancels it).
constexpr std::int32_t deadline_seq = -2;

/// The wake-up time of a run passivated until a delivery (no timer).
constexpr std::int64_t passivated_forever
  = std::numeric_limits<std::int64_t>::max();

/// Spawns the actor that owns `run`: it (re)starts the workflow coroutine,
/// feeding it the recorded outcomes in `journal` first, performs its durable
/// operations, and records its final status.
caf::actor spawn_run_actor(caf::actor_system& sys, runtime_impl& rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal);

} // namespace perdure::detail
