#pragma once

#include <vector>

#include <caf/fwd.hpp>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

class runtime_impl;

/// Spawns the actor that owns `run`: it (re)starts the workflow coroutine,
/// feeding it the recorded outcomes in `journal` first, performs its durable
/// operations, and records its final status.
caf::actor spawn_run_actor(caf::actor_system& sys, runtime_impl& rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal);

} // namespace perdure::detail
