#pragma once

// The runtime's composition root: it owns the services (see services.hpp
// for who reaches what), builds them, and starts and stops them in written
// phases. Included by .cpp files only: it pulls in CAF.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "perdure/config.hpp"
#include "perdure/detail/runtime/client_gate.hpp"
#include "perdure/detail/delivery/notice_router.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/lease/lease_service.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/object_entry.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/recovery/recovery_service.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/deadlines.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/admin_store.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/timer/ticker.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/detail/workflow_entry.hpp"
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::detail {

/// The workflow behind `client::send_later` (every runtime registers it).
inline constexpr const char* delayed_call_workflow = "perdure.send_later";

class runtime_impl {
public:
  /// `client`: a client-only process (see `perdure::client`): no actors,
  /// no recovery, no lease.
  runtime_impl(config cfg, bool client);
  ~runtime_impl();

  runtime_impl(const runtime_impl&) = delete;
  runtime_impl& operator=(const runtime_impl&) = delete;

  // -- set at construction and registration, read-only once started ----------

  config cfg;
  std::unordered_map<std::string, workflow_entry> workflows;
  /// Registered virtual object types.
  std::unordered_map<std::string, object_entry> object_types;
  /// A client-only process (no actors, no executor lease).
  const bool client_mode;

private:
  /// What this process may claim (its workflows and app version), and
  /// which invocations it may run; set at start.
  persistence::claim_filter run_filter_;
  persistence::object_claim_filter object_filter_;
  std::shared_ptr<perdure::clock> clock_;
  std::shared_ptr<spdlog::logger> logger_;
  /// This runtime instance's random id (tells its own notices from those
  /// of another process using the same executor id).
  std::string instance_;

  // -- as long as the runtime ----------------------------------------------------
  // (declared before `svc`, which refers to them)

  client_gate gate_;
  /// One stop() at a time: a second caller (say the application, while a
  /// callback stops the runtime) returns once the first is done, never
  /// while its parts are being torn down.
  std::mutex stop_mtx_;
  std::condition_variable stop_done_;
  std::optional<std::thread::id> stopping_on_;
  admin_store admin_;
  runtime_metrics metrics_;
  run_registry runs_;

public:
  /// What the runtime's parts reach of each other (see services.hpp).
  runtime_services svc;

  /// Returns where Perdure logs (`config::logger`, else spdlog's default).
  spdlog::logger& log() const {
    return *logger_;
  }

  /// Returns whether `start()` ran and `stop()` did not.
  bool running() const {
    return runs_.running();
  }

  /// Keeps the runtime's parts alive while an application thread uses them
  /// (stop() closes the gate and waits for every call before tearing down).
  class client_call : public client_gate::call {
  public:
    explicit client_call(runtime_impl& rt) : client_gate::call(rt.gate_) {}
  };

  /// Sets the queues registered here (perdure::queues), before start.
  void set_queue_hooks(std::shared_ptr<queue_hooks> q);
  queue_hooks* queues() const noexcept {
    return queues_.get();
  }

  void start();
  void stop();

  /// Returns how many PENDING runs the last recovery or takeover left for
  /// processes that can run them.
  std::int64_t left_pending() const noexcept {
    return recovery_.left_pending();
  }

  /// Every metric of this runtime, its gauges sampled now.
  telemetry::snapshot metrics();
  void read_metrics(telemetry::series_visitor& v);

private:
  /// Sets the gauges read off the parts (runs in memory, the lease's age).
  void sample_gauges();
  persistence::store_options store_options() const;
  void start_client();
  /// `start` once the lease is held; `shut_down` undoes what it did.
  void start_holding_lease(const persistence::store_options& opts);
  /// Stops the actors and every part, then gives the lease up.
  void shut_down();
  /// Builds the claim filters from what is registered.
  void build_filters();
  /// Every 100 ms: revives orphaned runs, retries failed deadline
  /// cancellations, looks for stranded work now and then, logs summaries.
  void housekeeping();
  /// Reads the store-wide gauges, computing them first if due (see
  /// `store::refresh_store_gauges`); on the control executor.
  void refresh_store_gauges();
  /// Logs a phase of start or stop by name (a hang says where it is).
  void phase(const char* name);

  // -- as long as the runtime (cont.) ---------------------------------------------

  completion_watchers ends_{svc};
  run_launcher launcher_{svc};
  recovery_service recovery_{svc};
  notice_router notices_{svc};
  /// The keys with an actor here (built before the lease's heartbeats,
  /// which may drop its keys).
  object_directory objects_{svc};
  std::shared_ptr<queue_hooks> queues_;
  /// Declared after what its heartbeat's events reach: destroyed first.
  lease_service lease_{svc};

  // -- while started, in the order they are built -----------------------------------

  std::unique_ptr<persistence::journal_writer> writer_;
  std::unique_ptr<step_executor> steps_;
  std::unique_ptr<step_executor> control_;
  std::unique_ptr<store_pool> stores_;
  std::unique_ptr<store_pool> tx_stores_;
  std::unique_ptr<caf::actor_system_config> system_cfg_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<timer_service> timers_;
  std::unique_ptr<run_deadlines> deadlines_;
  std::unique_ptr<ticker> housekeeper_;
  /// When the store-wide gauges are next read (housekeeping's thread),
  /// and whether a read is under way.
  std::chrono::steady_clock::time_point store_gauges_due_{};
  std::atomic<bool> store_gauges_busy_{false};
};

} // namespace perdure::detail
