#pragma once

// Who waits for runs to end in this process: application threads blocked
// in `workflow_handle::result()` (each run with its own condition: with one
// for all, every end woke every waiting thread) and `when_done` callbacks
// (see end_callbacks).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

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
  /// run first, the rest are dropped.
  void stop_callbacks();

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

  runtime_services& svc_;
  std::mutex callbacks_mtx_;
  std::unique_ptr<end_callbacks> callbacks_;
  std::mutex mtx_;
  std::unordered_map<std::string, watcher> watchers_;
};

} // namespace perdure::detail
