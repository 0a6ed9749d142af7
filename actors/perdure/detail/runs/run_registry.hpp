#pragma once

// Which runs and invocations live in this process, and whether it may run
// them: the actors in memory (with their epochs and wake counts), runs
// being revived, runs fenced away, runs left without an actor (orphans),
// step bodies under way, and the two flags every decision reads with them
// (started, lease lost). One lock for all of it: `owns()` reads them
// together right before every step body.
//
// It calls nothing outside itself under its lock except CAF sends (signals
// to actors) and the callbacks handed to it (spawns, posts to an
// executor), which must respect the lock order in runtime/services.hpp.

#include <caf/actor.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace perdure::detail {

class run_registry {
public:
  /// An invocation waiting in its object actor's queue (not started).
  static constexpr std::uint32_t queued_exec = UINT32_MAX;

  /// `orphan_retry`: how soon an orphan is revived (config::orphan_retry).
  explicit run_registry(std::chrono::milliseconds orphan_retry);

  // -- life --------------------------------------------------------------------

  /// A start: nothing of the last life counts (lease lost, fencings,
  /// orphans).
  void reset();
  void open();
  /// Returns whether it was open.
  bool close();
  bool running() const;
  /// Started and holding the lease.
  bool live() const;
  bool lease_lost() const;

  /// Calls `f()` under the lock if started (a post to an executor that
  /// stop() lets go only after closing this registry).
  template <class F>
  bool if_running(F&& f) {
    std::lock_guard guard{mtx_};
    if (!running_)
      return false;
    f();
    return true;
  }

  /// `if_running`, and holding the lease.
  template <class F>
  bool if_live(F&& f) {
    std::lock_guard guard{mtx_};
    if (!running_ || lease_lost_)
      return false;
    f();
    return true;
  }

  /// Takes every actor out (stop()).
  std::vector<caf::actor> take_actors();

  // -- the lease ---------------------------------------------------------------

  /// The lease lapsed and others took over: nothing here runs or claims
  /// until it is regained. Drops the run actors (object actors go with
  /// their directory) and the orphans.
  void lose_lease();
  /// A new epoch: whatever is still ours may run again. Returns whether
  /// started.
  bool regain_lease();

  // -- ownership -----------------------------------------------------------------

  /// Whether this process still runs run `id` at `epoch` (see
  /// runtime_services).
  bool owns(const std::string& id, std::int64_t epoch) const;

  enum class body_admission { run, refused, busy };
  /// Step `seq` of run `id` at `epoch` may run its body: `refused` if this
  /// copy owns the run no more, `busy` (after waiting up to 100 ms) while
  /// an older copy here is in that step's body, else `run` --
  /// `leave_body` must follow the body.
  body_admission enter_body(const std::string& id, std::int64_t epoch,
                            std::int32_t seq);
  void leave_body(const std::string& id, std::int32_t seq);

  /// Returns whether run `id` has an actor here.
  bool is_active(const std::string& id) const;

  /// Run `id` was claimed here anew: an older fencing no longer stands.
  void claimed_again(const std::string& id);

  /// A write of run `id` at `epoch` was fenced: this process never runs or
  /// revives it again at that epoch or an older one. Returns false if our
  /// own newer claim fenced an older copy here (nothing changes then).
  bool fenced_from(const std::string& id, std::int64_t epoch);

  // -- actors --------------------------------------------------------------------

  /// Admits the actor of run `id` claimed at `epoch`: unless stopping,
  /// without the lease, fenced at that epoch, or a copy at the same or a
  /// newer epoch is here already (an older one is dropped), calls
  /// `spawn()` under the lock and records the actor it returns.
  std::optional<caf::actor> admit(const std::string& id, std::int64_t epoch,
                                  const std::function<caf::actor()>& spawn);

  /// Invocation `id` runs as execution `exec` of object actor `actor`.
  void invocation_started(const std::string& id, caf::actor actor,
                          std::uint32_t exec, std::int64_t epoch);

  /// The actor of run `id` stopped: it leaves (only the copy at `epoch`,
  /// if given).
  void stopped(const std::string& id, std::int64_t epoch);

  // -- wake-ups and cancellations -------------------------------------------------

  /// Tells run `id`'s actor (operation `seq` due, or a delivery: -1), or
  /// calls `absent()` under the lock if it has none here. Nothing once
  /// stopped.
  void wake(const std::string& id, std::int32_t seq,
            const std::function<void()>& absent);
  /// Every actor here looks at the store again (notices may be lost).
  void wake_all();
  /// Returns how often run `id` was woken.
  std::uint64_t wake_count(const std::string& id) const;
  /// Drops run `id`'s actor unless it was woken since `seen` wake-ups;
  /// returns whether it was dropped.
  bool finish_passivation(const std::string& id, std::int64_t epoch,
                          std::uint64_t seen);

  /// Stops run `id`'s actor (cancelled): returns false if it has none.
  /// `up_to_epoch`: only an actor claimed at that epoch or before (a run
  /// resumed since runs at a newer one, and the cancel is not its).
  bool cancel(const std::string& id,
              std::optional<std::int64_t> up_to_epoch = std::nullopt);
  /// Signals saga `id` to cancel: its actor, or once its revival under
  /// way is done. Returns false if neither (revive it then).
  bool signal_cancel(const std::string& id);

  // -- revivals and orphans ----------------------------------------------------------

  /// Run `id` may be revived now: started, holding the lease, not in
  /// memory, not fenced, not being revived, and (`wake`) not an orphan of
  /// ours (those are revived at a new epoch). Then it is being revived
  /// until `end_revival`.
  bool begin_revival(const std::string& id, bool wake);
  void end_revival(const std::string& id);

  /// Run `id` should run here and has no actor (see
  /// runtime_impl::orphaned); `crashed`: its actor failed.
  void orphaned(const std::string& id, bool crashed = false);
  /// Whether orphans are due for revival now; if so they are being revived
  /// until `orphans_done`.
  bool orphans_due(std::chrono::steady_clock::time_point now);
  /// Takes the orphans out (with whether their actor crashed).
  std::unordered_map<std::string, bool> take_orphans();
  /// A revival pass is done: the next is due after `orphan_retry`, longer
  /// while orphans are left (the store still failing).
  void orphans_done();

  // -- stranded work -------------------------------------------------------------------

  /// How many runs this process holds (actors, revivals, orphans).
  std::size_t held_count() const;
  /// Runs and invocations with an actor here now.
  std::size_t active_count() const;
  /// Of `listed` (id, epoch), those held here by nobody: not in memory,
  /// not being revived, no orphan, not in `ahead`, not fenced at that
  /// epoch. Nothing if stopped or without the lease.
  std::optional<std::vector<std::pair<std::string, std::int64_t>>>
  unheld(const std::vector<std::pair<std::string, std::int64_t>>& listed,
         const std::unordered_set<std::string>& ahead) const;

private:
  struct active_run {
    caf::actor actor;
    std::uint64_t wakes = 0;
    std::int64_t epoch = 0;
    /// The execution within `actor`: 0 for a run actor, the invocation's
    /// tag in an object actor.
    std::uint32_t exec = 0;
  };

  bool owns_locked(const std::string& id, std::int64_t epoch) const;
  bool signal_cancel_locked(const std::string& id);

  const std::chrono::milliseconds orphan_retry_;
  mutable std::mutex mtx_;
  bool running_ = false;
  /// The lease lapsed and others took over (see heartbeat).
  bool lease_lost_ = false;
  std::unordered_map<std::string, active_run> active_;
  /// Runs being revived (one revival per run at a time: a second claim
  /// would fence the first one's actor).
  std::unordered_set<std::string> reviving_;
  /// Sagas asked to cancel while being revived.
  std::unordered_set<std::string> cancels_pending_;
  /// Runs this process lost, with the epoch its copy had when fenced:
  /// never revived again, and never run again at that epoch or an older
  /// one (a claim of our own at a newer epoch -- a recovery racing a
  /// takeover at start -- is the run's owner and runs).
  std::unordered_map<std::string, std::int64_t> fenced_;
  /// Steps whose body is running here. Two claims of one run racing in
  /// this process (a recovery on regaining the lease and a takeover, say)
  /// spawn two copies; the older is dropped, but a body it began runs on:
  /// the newer copy's waits for it instead of running alongside.
  struct step_hash {
    std::size_t
    operator()(const std::pair<std::string, std::int32_t>& s) const {
      return std::hash<std::string>{}(s.first)
             ^ static_cast<std::size_t>(s.second);
    }
  };
  std::unordered_set<std::pair<std::string, std::int32_t>, step_hash> in_body_;
  std::condition_variable body_done_;
  /// Runs to revive (with whether their actor crashed), and when the next
  /// revival pass may run (steady clock).
  std::unordered_map<std::string, bool> orphans_;
  std::chrono::steady_clock::time_point orphans_due_{};
  std::chrono::milliseconds orphan_backoff_{0};
  bool orphans_busy_ = false;
};

} // namespace perdure::detail
