#pragma once

// What the runtime's parts reach of each other: executions, run and object
// actors, the object directory, end callbacks and perdure::queues get this
// view, never the runtime itself (libpqxx's call gates, in spirit). One
// file to review for who may touch what.
//
// Lock order (a lock may be taken while holding those to its left, never
// the other way round):
//   object_directory, end callbacks (completion_watchers), callbacks of
//   the writer -> run_registry -> {deadlines, recovery_service,
//   lease_service's log throttle} -> {timer_service, step_executor,
//   queue_service, CAF mailboxes}.
// run_registry never calls back into the directory, the queues' `released`,
// the watchers or a spawn outside the callback it is handed.

#include <spdlog/logger.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "perdure/config.hpp"
#include "perdure/detail/object_entry.hpp"
#include "perdure/detail/workflow_entry.hpp"
#include "perdure/persistence/records.hpp"
#include "perdure/workflow_handle.hpp"

namespace caf {
class actor_system;
}

namespace perdure::persistence {
class journal_writer;
}

namespace perdure::detail {

class admin_store;
class client_gate;
class completion_watchers;
class run_deadlines;
class lease_service;
class notice_router;
class object_directory;
class queue_hooks;
class recovery_service;
class run_launcher;
class run_registry;
class runtime_metrics;
class step_executor;
class store_pool;
class timer_service;

/// The view's address is also the owner of every thread pool of the
/// runtime (`step_executor::runs_on(&svc)`: its executors and the queues'
/// worker pools), which is how stop() tells it is called from one.
struct runtime_services {
  // -- as long as the runtime (set at construction) -----------------------------

  const config& cfg;
  const std::unordered_map<std::string, workflow_entry>& workflows;
  const std::unordered_map<std::string, object_entry>& object_types;
  /// Which runs this process may claim: its workflows and app version
  /// (set at start).
  const persistence::claim_filter& run_filter;
  /// Which invocations this process may run (set at start).
  const persistence::object_claim_filter& object_filter;
  /// A client-only process (no actors, no lease, no recovery).
  const bool client_mode;
  spdlog::logger& logger;
  /// What this runtime counts and times (perdure_* metrics).
  runtime_metrics& metrics;
  /// The time source of durable timers.
  perdure::clock* clock = nullptr;
  /// Which runs and invocations live here; `running()` says whether the
  /// runtime is started.
  run_registry* runs = nullptr;
  /// Threads waiting for runs to end, and when_done callbacks.
  completion_watchers* ends = nullptr;
  /// The keys with an actor here.
  object_directory* objects = nullptr;
  /// Application threads' calls (stop() waits for them).
  client_gate* gate = nullptr;
  /// The runtime's own connection (migrations, recovery, single reads).
  admin_store* admin = nullptr;
  lease_service* lease = nullptr;
  run_launcher* launcher = nullptr;
  recovery_service* recovery = nullptr;
  notice_router* notices = nullptr;
  /// The queues registered here (perdure::queues), or null; set before
  /// start.
  queue_hooks* queues = nullptr;

  // -- while started (null otherwise) ------------------------------------------

  /// When this runtime started (its clock, ms): its code is at least this
  /// new. Runs BLOCKED by a process started earlier are tried again here.
  std::int64_t started_at_ms = 0;

  persistence::journal_writer* writer = nullptr;
  /// Runs user step code (which may block for long).
  step_executor* steps = nullptr;
  /// Runs the runtime's own store I/O (delivery checks, passivation,
  /// revival, deliveries, child starts, sweeps, deadlines): slow user steps
  /// never hold up wake-ups, deadlines or cancellations.
  step_executor* control = nullptr;
  /// Connections for the runtime's own I/O and application threads.
  store_pool* stores = nullptr;
  /// Connections for transactional steps (user SQL holds one for the
  /// step's duration): busy steps never starve the runtime's own I/O.
  store_pool* tx_stores = nullptr;
  caf::actor_system* system = nullptr;
  timer_service* timers = nullptr;
  /// Run deadlines armed here.
  run_deadlines* deadlines = nullptr;

  spdlog::logger& log() const noexcept {
    return logger;
  }

  /// Run `id`'s actor stopped; `outcome` is set if the run ended (its
  /// final status committed): it leaves the registry (only the copy at
  /// `epoch`, if given), frees its queue slot, and its waiters are told.
  void run_stopped(const std::string& id, std::optional<run_outcome> outcome,
                   std::int64_t epoch = -1);

  /// Run `id`'s actor at `epoch` passivates: it leaves unless woken since
  /// it saw `seen` wake-ups (returns whether it left; its waiters poll the
  /// store then).
  bool finish_passivation(const std::string& id, std::int64_t epoch,
                          std::uint64_t seen);

  /// Tells the queues that item `id` runs here no more (never under the
  /// registry's lock: its worker may start the next item at once).
  void queue_item_released(const std::string& id);

  /// A write of run `id` at `epoch` was fenced (see
  /// `run_registry::fenced_from`); frees its queue slot if it was.
  void fenced_from(const std::string& id, std::int64_t epoch);
};

} // namespace perdure::detail
