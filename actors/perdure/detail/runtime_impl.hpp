#pragma once

// The runtime's internals. Included by .cpp files only: it pulls in CAF.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <spdlog/logger.h>

#include <atomic>
#include <condition_variable>
#include <optional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "perdure/config.hpp"
#include "perdure/detail/client_gate.hpp"
#include "perdure/detail/runs/end_callbacks.hpp"
#include "perdure/detail/lease/executor_lease.hpp"
#include "perdure/detail/ids.hpp"
#include "perdure/detail/object/object_actor.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/object_entry.hpp"
#include "perdure/detail/queue_hooks.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/timer/ticker.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/workflow_entry.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/delivery_listener.hpp"
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure::detail {

/// The workflow behind `client::send_later` (every runtime registers it).
inline constexpr const char* delayed_call_workflow = "perdure.send_later";

class runtime_impl {
public:
  /// `client`: a client-only process (see `perdure::client`): no actors,
  /// no recovery, no lease.
  runtime_impl(config cfg, bool client);
  ~runtime_impl();

  // -- set at construction and registration, read-only once started ----------

  config cfg;
  std::unordered_map<std::string, workflow_entry> workflows;
  /// Registered virtual object types.
  std::unordered_map<std::string, object_entry> object_types;
  /// Which invocations this process may run (its handlers and app version),
  /// set at start.
  persistence::object_claim_filter object_filter;
  /// A client-only process (no actors, no executor lease).
  const bool client_mode;

  // -- owned while started ----------------------------------------------------

  std::unique_ptr<persistence::journal_writer> writer;
  /// Runs user step code (which may block for long).
  std::unique_ptr<step_executor> steps;
  /// Runs the runtime's own store I/O (delivery checks, passivation,
  /// revival, deliveries, child starts, sweeps, deadlines): slow user steps
  /// never hold up wake-ups, deadlines or cancellations.
  std::unique_ptr<step_executor> control;
  /// Connections for the runtime's own I/O and application threads.
  std::unique_ptr<store_pool> stores;
  /// Connections for transactional steps (user SQL holds one for the
  /// step's duration): busy steps never starve the runtime's own I/O.
  std::unique_ptr<store_pool> tx_stores;
  std::unique_ptr<caf::actor_system_config> system_cfg;
  std::unique_ptr<caf::actor_system> system;
  /// The time source of durable timers (never null once constructed).
  std::shared_ptr<perdure::clock> clock;
  std::unique_ptr<timer_service> timers;
  /// Deliveries made by other processes (PostgreSQL only).
  std::unique_ptr<persistence::delivery_listener> listener;
  /// The keys with an actor here, and how invocations reach theirs.
  std::unique_ptr<object_directory> objects;
  /// The queues registered here (perdure::queues), if any; set before
  /// `start()`.
  std::shared_ptr<queue_hooks> queues;

  /// Tells the queues that item `id` runs here no more (never under
  /// `active_mtx_`: its worker may start the next item at once).
  void queue_item_released(const std::string& id) {
    if (queues)
      queues->released(id);
  }

  /// Run `id` was claimed here anew (a queue item back from its queue): a
  /// fencing of an older copy of it here no longer stands.
  void claimed_again(const std::string& id);

  /// Loads the journals of `runs`, claimed by this process, and spawns
  /// their actors (passivated ones stay out of memory until due).
  void bring_in(std::vector<persistence::run_record> runs);

  /// Queue items among `runs` start again here (a takeover, a recovery, a
  /// revival after a crash): each counts against its queue's rate limit.
  void count_queue_restarts(const std::vector<persistence::run_record>& runs);

  /// Returns where Perdure logs (`config::logger`, else spdlog's default).
  spdlog::logger& log() const {
    return *logger_;
  }

  /// Logs that run `id` was fenced (owned elsewhere now): the first at
  /// once, the rest of a burst as one count per 5 s.
  void report_fenced(const std::string& id);

  /// Returns whether `start()` ran and `stop()` did not.
  bool running() const;

  /// Keeps the runtime's parts alive while an application thread uses them
  /// (stop() closes the gate and waits for every call before tearing down).
  class client_call : public client_gate::call {
  public:
    explicit client_call(runtime_impl& rt) : client_gate::call(rt.gate_) {}
  };

  void start();
  void stop();

  /// Runs `f(store&)` on the shared control connection (application threads).
  /// Throws `errc::not_running` once the runtime has stopped.
  template <class F>
  auto with_control(F&& f) {
    std::lock_guard guard{control_mtx_};
    if (!control_)
      throw perdure::error(errc::not_running, "the runtime is not running");
    return f(*control_);
  }

  /// Returns the store options derived from the config.
  persistence::store_options store_options() const;

  /// Returns whether run `id` has an actor in this process.
  bool is_active(const std::string& id) const;

  /// Calls `done` once run `id` ended (see `end_callbacks`).
  void on_end(const std::string& id, std::function<void()> done);

  /// Spawns the actor of a claimed key; nothing once stopping.
  std::optional<caf::actor> spawn_object(object_activation a);

  /// Invocation `id` runs as execution `exec` of object actor `actor`
  /// (`queued_exec`: it waits in the actor's queue; signals wait too).
  void invocation_started(const std::string& id, caf::actor actor,
                          std::uint32_t exec, std::int64_t epoch);
  static constexpr std::uint32_t queued_exec = UINT32_MAX;

  /// Something was delivered to run `id` (an awakeable resolved; `seq` -1)
  /// or its timer for operation `seq` is due: tells its actor, or brings a
  /// passivated run of this executor back.
  void wake(const std::string& id, std::int32_t seq);

  /// Tells the processes sharing the database notice `n` about a run
  /// (woken, cancelled, a saga asked to cancel), unless it runs here.
  void announce(const persistence::notice& n);

  /// Brings back this executor's runs that should be in memory and are not
  /// (a delivery from another process while passivated).
  void sweep();

  /// Run `id`'s deadline `due_ms` came: cancels it if that is still its
  /// deadline (on the control executor; a queue item's later attempt has
  /// its own).
  void deadline_passed(const std::string& id, std::int64_t due_ms);

  /// Run `id` was cancelled in the store: stops its actor, if any.
  void cancelled(const std::string& id);

  /// Saga `id` was asked to cancel in the store: signals its actor, or
  /// brings it back if it is ours and passivated (it observes the request
  /// when it replays).
  void cancel_signalled(const std::string& id);

  /// Signals saga `id`'s actor, if it is in memory here (`active_mtx_`
  /// held); returns whether it was.
  bool signal_cancel_locked(const std::string& id);

  /// Acts on what `store::cancel_run` did to the runs of a tree, here and
  /// (announced) in other processes.
  void apply_cancel(const std::vector<persistence::cancelled_run>& runs);

  /// Run `id` (the root of a cancelled tree) ended: that is a delivery to
  /// its parent, which the store marked if passivated; wakes it here or,
  /// announced, in its own process.
  void tell_parent(const std::string& id);

  /// Returns how often run `id` was woken (see `finish_passivation`).
  std::uint64_t wake_count(const std::string& id) const;

  /// Drops the actor of run `id` from the active runs unless it was woken
  /// since `seen` wake-ups; returns whether it was dropped.
  bool finish_passivation(const std::string& id, std::int64_t epoch,
                          std::uint64_t seen);

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

  /// Claims run `id` (see `revival`) and spawns its actor replaying its
  /// journal, if it is a PENDING run of this executor not in memory here
  /// and not one this process was fenced from (on the control executor: it
  /// blocks). A store failure leaves the run orphaned: the next
  /// housekeeping tries again.
  void revive(const std::string& id, revival why = revival::wake);

  /// Spawns the actor of `run`, replaying `journal` (or, if the run was
  /// recovered too often, ends it RETRIES_EXCEEDED). Returns the actor, or
  /// nothing if none was spawned.
  std::optional<caf::actor>
  spawn_run(persistence::run_record run,
            std::vector<persistence::journal_entry> journal);

  /// Run `id` should run here but has no actor (its actor stopped on a
  /// store failure or an exception, or its creation was in doubt):
  /// housekeeping revives it within `orphan_retry` (longer while the store
  /// keeps failing). `crashed`: its actor failed (an exception), which
  /// counts against `max_recovery_attempts`; a store outage does not.
  void orphaned(const std::string& id, bool crashed = false);

  /// A write of run `id` at `epoch` was fenced: another process claimed
  /// it, and this process never runs or revives it again (unless a newer
  /// claim of this process is under way: then an older copy was fenced).
  void fenced_from(const std::string& id, std::int64_t epoch);

  /// Returns whether this process still runs run `id` at `epoch`: its
  /// actor at that epoch is the one in memory (not stopped, not replaced by
  /// a newer claim; false once stopping) and no other process took it.
  /// Checked right before a step body runs.
  bool owns(const std::string& id, std::int64_t epoch) const;
  /// `owns`, under active_mtx_.
  bool owns_locked(const std::string& id, std::int64_t epoch) const;

  /// `owns`, once the lease was renewed recently enough for this process
  /// to act as its holder (it waits while it was not: the store away, or
  /// the process stalled), and once no other copy of the run here is in a
  /// step body. Called on a step thread right before the body; when it
  /// returns true, `step_body_done` must follow the body.
  bool may_run_step(const std::string& id, std::int64_t epoch,
                    std::int32_t seq);

  /// The body of step `seq` that `may_run_step` let run has returned.
  void step_body_done(const std::string& id, std::int32_t seq);

  /// Throws `errc::fenced` if this runtime lost its executor lease (it
  /// stalled or was cut off past `lease_timeout`, and others took over)
  /// and has not got it back.
  void check_lease() const;

  /// Returns how many PENDING runs the last recovery or takeover left for
  /// processes that can run them.
  std::int64_t left_pending() const noexcept {
    return left_pending_.load();
  }

  /// Claims, in the background, the runs nobody live holds that this
  /// process can run (see `store::take_over`): run `only`, or its share.
  void take_over(std::optional<std::string> only = std::nullopt);

  /// Housekeeping, every 100 ms: revives orphaned runs, retries failed
  /// deadline cancellations, looks for stranded work now and then.
  void housekeeping();

  /// Looks for this executor's PENDING runs and invocations that should be
  /// in memory and have no actor here (on the control executor): a count
  /// over an index, and only if it says something is missing, the list;
  /// what is missing at two looks in a row is brought back.
  void check_stranded();

  /// Returns this runtime instance's random id (tells its own notices from
  /// those of another process using the same executor id).
  const std::string& instance() const noexcept {
    return instance_;
  }

  /// Called by a run actor when it stops; `outcome` is set if the run ended
  /// (its final status committed).
  void run_stopped(const std::string& id, std::optional<run_outcome> outcome,
                   std::int64_t epoch = -1);

  /// Waits for the in-process end of run `id` (up to `timeout`), or for
  /// its actor to stop after the caller saw stop count `stops`. Returns
  /// nothing on timeout or a stop without an end: the caller re-reads the
  /// store then.
  std::optional<run_outcome> wait_ended(const std::string& id,
                                        std::chrono::milliseconds timeout,
                                        std::uint64_t stops);

  /// Registers interest in the end of `id` before the caller reads the store.
  void watch(const std::string& id);

  /// Returns how many times an actor of watched run `id` stopped (read
  /// before `is_active`, so that a stop in between is not missed).
  std::uint64_t stops(const std::string& id);

  /// Drops interest registered by `watch`.
  void unwatch(const std::string& id);

private:
  /// Those waiting for one run's end. Each has its own condition: with
  /// one for all, every end woke every waiting thread.
  struct watcher {
    int count = 0;
    std::optional<run_outcome> outcome;
    std::uint64_t stops = 0;
    std::condition_variable ended;
  };

  /// Tells the waiters for `id` that its actor stopped, and how it ended
  /// (`outcome`, if it did).
  void tell_watchers(const std::string& id, std::optional<run_outcome> outcome);

  void recover();
  /// Brings claimed `runs` in: passivated ones get their timers, the
  /// others are spawned replaying their journals.
  void count_left();
  /// `start` once the lease is held; `shut_down` undoes what it did.
  void start_holding_lease(const persistence::store_options& opts);
  /// Stops the actors and every part, then gives the lease up.
  void shut_down();
  void lose_lease();
  void regain_lease();
  void take_over_now(std::optional<std::string> only);
  /// `take_over`, under active_mtx_.
  void take_over_locked(std::optional<std::string> only);
  void start_client();
  void revive_orphans();
  /// Arms run `id`'s deadline timer unless armed (under active_mtx_).
  void arm_deadline(const std::string& id, std::int64_t due_ms);
  void on_notice(const persistence::notice& n);

  std::string instance_;
  std::shared_ptr<spdlog::logger> logger_;
  std::mutex log_mtx_;
  std::chrono::steady_clock::time_point fenced_window_end_{};
  std::size_t fenced_unreported_ = 0;
  void flush_log_summaries();
  std::unique_ptr<ticker> housekeeper_;
  /// What this process may claim (its workflows and app version).
  persistence::claim_filter filter_;
  /// The lease's epoch (read by every store's fenced writes) and the
  /// lease itself, while started.
  std::shared_ptr<std::atomic<std::int64_t>> lease_epoch_
    = std::make_shared<std::atomic<std::int64_t>>(0);
  std::unique_ptr<executor_lease> lease_;
  std::uint64_t beats_ = 0;
  std::atomic<std::int64_t> left_pending_{0};
  /// Takeovers: one at a time; another asked for meanwhile runs after.
  bool taking_over_ = false;
  bool take_over_again_ = false;

  std::mutex control_mtx_;
  std::unique_ptr<persistence::store> control_;

  mutable std::mutex active_mtx_;
  struct active_run {
    caf::actor actor;
    std::uint64_t wakes = 0;
    std::int64_t epoch = 0;
    /// The execution within `actor`: 0 for a run actor, the invocation's
    /// tag in an object actor.
    std::uint32_t exec = 0;
  };
  std::unordered_map<std::string, active_run> active_;
  /// Runs being revived (one revival per run at a time: a second claim
  /// would fence the first one's actor).
  std::unordered_set<std::string> reviving_;
  /// Sagas asked to cancel while being revived (`active_mtx_`).
  std::unordered_set<std::string> cancels_pending_;
  /// Runs this process lost, with the epoch its copy had when fenced:
  /// never revived again, and never run again at that epoch or an older
  /// one (a claim of our own at a newer epoch -- a recovery racing a
  /// takeover at start -- is the run's owner and runs).
  std::unordered_map<std::string, std::int64_t> fenced_;
  /// Steps (`<run id>:<index>`) whose body is running here. Two claims of one run racing in
  /// this process (a recovery on regaining the lease and a takeover, say)
  /// spawn two copies; the older is dropped, but a body it began runs on:
  /// the newer copy's waits for it instead of running alongside.
  struct step_hash {
    std::size_t operator()(const std::pair<std::string, std::int32_t>& s) const {
      return std::hash<std::string>{}(s.first) ^ static_cast<std::size_t>(s.second);
    }
  };
  std::unordered_set<std::pair<std::string, std::int32_t>, step_hash> in_body_;
  /// Notified when a step body returns (under active_mtx_).
  std::condition_variable body_done_;
  /// Runs to revive (with whether their actor crashed), and when
  /// housekeeping may next try (steady clock).
  std::unordered_map<std::string, bool> orphans_;
  /// The lease lapsed and others took over: nothing here runs or claims
  /// until it is acquired again (see heartbeat).
  bool lease_lost_ = false;
  /// Runs whose deadline timer is armed, with its due time (one timer per
  /// deadline, however often the run is spawned; a queue item's next
  /// attempt has a new deadline, and a timer of its own).
  std::unordered_map<std::string, std::int64_t> armed_deadlines_;
  /// Runs whose deadline passed but whose cancellation failed (the store
  /// failed), with that deadline: housekeeping tries again a second later,
  /// on real time.
  std::unordered_map<std::string, std::int64_t> deadline_retries_;
  std::chrono::steady_clock::time_point deadline_retry_due_{};
  std::chrono::steady_clock::time_point orphans_due_{};
  std::chrono::milliseconds orphan_backoff_{0};
  bool orphans_busy_ = false;
  /// Work found without an actor at the last stranded check, with its
  /// epoch (brought back if still so at the next one).
  std::unordered_map<std::string, std::int64_t> stranded_suspects_;
  std::chrono::steady_clock::time_point stranded_due_{};
  bool stranded_busy_ = false;
  bool running_ = false;
  client_gate gate_;

  std::mutex callbacks_mtx_;
  std::unique_ptr<end_callbacks> callbacks_;
  std::mutex done_mtx_;
  std::unordered_map<std::string, watcher> watchers_;
};

} // namespace perdure::detail
