#pragma once

// Who waits for runs to end in this process: application threads blocked
// in `workflow_handle::result()` (each run with its own condition: with one
// for all, every end woke every waiting thread) and `when_done` callbacks
// (see end_callbacks).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "perdure/call_result.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure::detail {

class end_callbacks;
class run_registry;
struct runtime_services;

class completion_watchers {
public:
  /// `svc`: what the callback thread reads (the stores, the registry).
  explicit completion_watchers(runtime_services& svc);
  ~completion_watchers();

  /// Calls `done` once run `id` ended; throws `not_running` once stopped.
  void on_end(const std::string& id, std::function<void()> done);

  /// Stops the callback thread (stop()): callbacks of runs that ended
  /// run first, the rest of `on_end`'s are dropped, and `on_outcome`'s get
  /// `not_running` on the calling thread.
  void stop_callbacks();

  using outcome_callback = std::function<void(call_end)>;

  /// Calls `done` once with run `id`'s end: from memory when `tell` brings
  /// it, else (the run stopped here without an end) read from the store
  /// once it ended; `not_running` if the runtime stops first. Register
  /// before the run can end here (before its creation is written).
  /// `in_place`: `done` only wakes a thread (it must not block or call
  /// back in): it runs on the thread that tells, else on the callback
  /// thread. `confirmed` false: the caller's write may be refused (an
  /// idempotency key used before, perhaps for another call): an end told
  /// meanwhile waits in the registration for `confirm` or `read_later`,
  /// and `finish` (the refusal's error) drops it. Returns the
  /// registration's token; throws `not_running` once stopped.
  std::uint64_t on_outcome(const std::string& id, outcome_callback done,
                           bool in_place = false, bool confirmed = true);

  /// Registration `token` of run `id` is the run's own caller (its
  /// creation committed): an end told before runs it now, and a stop told
  /// before (without an end) has it read the store.
  void confirm(const std::string& id, std::uint64_t token);

  /// Returns whether the caller is the callback thread.
  bool on_callback_thread();

  /// Ends registration `token` of run `id` with `end` now (in place, or on
  /// the callback thread), unless `tell` ended it first.
  void finish(const std::string& id, std::uint64_t token, call_end end);

  /// Registration `token` of run `id` waits for the store's word instead:
  /// the run is not (or no longer) running here. Confirms it too: an end
  /// told while it was not confirmed runs it now.
  void read_later(const std::string& id, std::uint64_t token);

  /// Tells the waiters for `id` that its actor stopped, and how it ended
  /// (`outcome`, if it did). Callbacks of `id` read the store then.
  void tell(const std::string& id, std::optional<run_outcome> outcome);

  /// Registers interest in the end of `id` before the caller reads the
  /// store.
  void watch(const std::string& id);
  /// Drops interest registered by `watch`.
  void unwatch(const std::string& id);
  /// Returns how many times an actor of watched run `id` stopped (read
  /// before `is_active`, so that a stop in between is not missed).
  std::uint64_t stops(const std::string& id);

  /// Waits for the in-process end of run `id` (up to `timeout`), or for
  /// its actor to stop after the caller saw stop count `stops`. Returns
  /// nothing on timeout or a stop without an end: the caller re-reads the
  /// store then. An end told before `stops` is not returned: the run may
  /// have been resumed since (the caller read the store after it).
  std::optional<run_outcome> wait_ended(const std::string& id,
                                        std::chrono::milliseconds timeout,
                                        std::uint64_t stops);

private:
  struct watcher {
    int count = 0;
    std::optional<run_outcome> outcome;
    std::uint64_t stops = 0;
    std::uint64_t outcome_at = 0; ///< `stops` once `outcome` was told
    std::condition_variable ended;
  };

  struct registration {
    std::uint64_t token = 0;
    outcome_callback done;
    bool in_place = false;
    bool confirmed = true;
    /// An end told before it was confirmed (see `on_outcome`).
    std::optional<call_end> parked;
    /// Told, before it was confirmed, that the run stopped here without an
    /// end: once confirmed it reads the store (no later tell may come).
    bool stopped = false;
  };

  /// Returns registration `token` of `id`, removed (no `done` if gone).
  registration take(const std::string& id, std::uint64_t token);
  /// Runs `r` with `end`: here if in place, else on the callback thread
  /// (`callbacks_mtx_` not held).
  void run_now(registration r, call_end end);
  /// Hands `done` to the callbacks' thread for when `id` ended by the
  /// store (`callbacks_mtx_` held).
  void read_when_ended(const std::string& id, outcome_callback done);
  /// Returns the callbacks' service, started if need be (`callbacks_mtx_`
  /// held); throws `not_running` once stopped.
  end_callbacks& callbacks();

  runtime_services& svc_;
  std::mutex callbacks_mtx_;
  std::unique_ptr<end_callbacks> callbacks_;
  /// `on_outcome`'s registrations by run id (`callbacks_mtx_`).
  std::unordered_map<std::string, std::vector<registration>> outcomes_;
  std::uint64_t next_token_ = 0;
  std::mutex mtx_;
  std::unordered_map<std::string, watcher> watchers_;
};

} // namespace perdure::detail
