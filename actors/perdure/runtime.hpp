#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perdure/client.hpp"
#include "perdure/config.hpp"
#include "perdure/detail/workflow_entry.hpp"
#include "perdure/object_builder.hpp"

namespace perdure {

/// How a workflow is registered (`runtime::register_workflow`).
struct workflow_options {
  /// The patches its code asks about (`workflow_context::patched` and
  /// `deprecated_patch`). A `patched` of a patch not listed throws; a
  /// process claims (recovers, takes over, retries when BLOCKED) only runs
  /// of this workflow whose patches are all listed, so a process of older
  /// code never runs a run that newer code took past a patch.
  std::vector<std::string> patches;
};

/// Owns everything that runs durable code in this process: the CAF actor
/// system (one actor per run), the step executor, the group-commit journal
/// writer, the store connections and the executor lease.
///
/// Register workflows, then `start()` (which takes the executor id's lease
/// and recovers the runs it left unfinished), then start workflows from any
/// thread. Everything a `client` does, a runtime does too.
class runtime : public client {
public:
  // -- constructors, destructors, and assignment operators --------------------

  explicit runtime(config cfg);

  /// Stops the runtime (see `stop`).
  ~runtime() override;

  // -- registration -----------------------------------------------------------

  /// Registers `fn`, a coroutine `task<R>(workflow_context&, A)` or
  /// `task<R>(workflow_context&)`, under `name`. Names are stable
  /// identifiers: runs in the store refer to them, and a process claims
  /// (recovers, takes over) only runs of workflows it registered.
  template <class F>
  void register_workflow(std::string name, F fn, workflow_options opts = {}) {
    auto entry = detail::make_workflow_entry(std::move(fn));
    entry.patches = std::move(opts.patches);
    add_workflow(std::move(name), std::move(entry));
  }

  /// Registers virtual object type `type`, whose keys each hold a `State`
  /// (default-constructible, serializable with cereal); add its handlers to
  /// the builder returned (valid until `start()`). A process claims keys only
  /// of types it registered.
  template <class State>
  object_builder<State> register_object(std::string type) {
    return object_builder<State>{add_object(
      std::move(type), [] { return std::make_unique<detail::typed_state_box<State>>(); })};
  }

  // -- life cycle -------------------------------------------------------------

  /// Migrates the schema, takes the executor id's lease (throws
  /// `executor_in_use` if a live process holds it, changing nothing),
  /// recovers this executor's PENDING runs, takes over those of dead
  /// processes, and starts accepting work. Throws `perdure::error` if the
  /// store is unusable.
  void start();

  /// Stops every run actor, waits for running step code, commits the
  /// queued journal writes and gives the lease up: the runs left PENDING
  /// are taken over by other live runtimes that registered their
  /// workflows, or recovered by the next start with this executor id.
  /// Called while another thread stops the runtime, it returns once that
  /// stop is done (in a `when_done` or `call_async` callback, which that
  /// stop waits for, at once). Throws `perdure::error` (`invalid_argument`)
  /// when called from code the stop must wait for: step code, a workflow
  /// body, an object handler.
  void stop();

  /// Returns how many PENDING runs the last recovery or takeover left for
  /// other processes because this one cannot run them (their workflow is
  /// not registered here, or another app version started them).
  std::int64_t left_pending() const;

private:
  void add_workflow(std::string name, detail::workflow_entry entry);
  void add_internal_workflows();
  detail::object_entry&
  add_object(std::string type,
             std::function<std::unique_ptr<detail::state_box>()> make_state);
};

} // namespace perdure
