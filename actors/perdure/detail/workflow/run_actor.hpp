#pragma once

// The run actor: a thin CAF host of one execution (see execution.hpp).

#include <cstdint>
#include <vector>

#include <caf/fwd.hpp>

#include "perdure/detail/execution/run_message.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct runtime_services;

/// Sends `kind` (about operation `seq`) to the execution `exec` of actor
/// `run` (0: a run actor's one execution; else an object actor's).
void signal_run(const caf::actor& run, std::uint32_t exec, run_signal kind,
                std::int32_t seq);

/// Spawns the actor that owns `run`: it hosts the run's execution, which
/// (re)starts the workflow coroutine, feeding it the recorded outcomes in
/// `journal` first, performs its durable operations, and records its final
/// status.
caf::actor spawn_run_actor(caf::actor_system& sys, runtime_services& rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal);

} // namespace perdure::detail
