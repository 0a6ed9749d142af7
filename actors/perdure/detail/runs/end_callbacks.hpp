#pragma once

// Callbacks waiting for runs to end (`workflow_handle::when_done`): the
// non-blocking way to wait, for servers and actor code that must not hold
// a thread per call. One thread runs them: told at once of ends here, it
// reads the store for the rest every poll interval.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct runtime_services;

/// What a waiter gets once its run ended: the run as read (nothing: it is
/// gone from the store).
using ended_run = std::optional<persistence::run_record>;

class end_callbacks {
public:
  explicit end_callbacks(runtime_services& rt);

  /// Stops: `when_done` callbacks not run yet are dropped; ends `post`ed
  /// and not run yet run here, and waiting `add`s with a `dropped` get it
  /// (stopped from a callback: `stop_from_own_thread` runs those, and the
  /// rest of the callback's batch, nested in it).
  ~end_callbacks();

  end_callbacks(const end_callbacks&) = delete;
  end_callbacks& operator=(const end_callbacks&) = delete;

  /// Calls `done` on this service's thread once run `id` ended, with the
  /// run as read; if the service stops first, `dropped` (if any) on the
  /// stopping thread.
  void add(const std::string& id,
           std::function<void(const ended_run&)> done,
           std::function<void()> dropped = {});

  /// Run `id` may have ended here (its actor stopped): read it now.
  void ended(const std::string& id);

  /// Runs `f` on this service's thread soon: an end known in memory.
  /// Those posted before the service stops run, on the stopping thread if
  /// need be.
  void post(std::function<void()> f);

  /// Runs `f`, logging what it throws (a callback's exception stops
  /// nothing).
  static void call_guarded(runtime_services& rt, const std::function<void()>& f);

  /// Returns whether the caller is this service's thread (a callback).
  bool on_own_thread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }

  /// Returns whether the caller is the callbacks thread of the runtime
  /// whose services are `rt` (one a stop of that runtime joins).
  static bool runs_on(const runtime_services* rt) noexcept;

  /// Stops `self` from a callback on its own thread (one that stops the
  /// runtime, or drops its last client), which cannot join itself: no
  /// callback runs after the one under way, and the thread deletes the
  /// service when that one returns.
  static void stop_from_own_thread(std::unique_ptr<end_callbacks> self);

private:
  void loop();
  void run();
  /// Runs `fs` in order with `guard` released, logging what they throw;
  /// returns false (`guard` held) if one stopped the runtime from this
  /// thread: nothing of it may be touched then, not even its log.
  bool run_unlocked(std::vector<std::function<void()>>& fs,
                    std::unique_lock<std::mutex>& guard);
  /// Returns those of runs `ids` that ended (or are gone), as the store
  /// has them: a few statements for all, not one per run.
  std::unordered_map<std::string, std::shared_ptr<const ended_run>>
  read_ended(const std::vector<std::string>& ids);

  runtime_services& rt_;
  std::mutex mtx_;
  std::condition_variable cv_;
  struct waiting {
    std::function<void(const ended_run&)> done;
    std::function<void()> dropped;
  };
  std::unordered_map<std::string, std::vector<waiting>> pending_;
  std::unordered_set<std::string> ended_;
  std::vector<std::function<void()>> ready_;
  /// The callbacks being run, and the next to run (`run_unlocked`).
  std::vector<std::function<void()>> batch_;
  std::size_t batch_next_ = 0;
  bool stopping_ = false;
  /// Stopped from its own thread: the thread deletes the service.
  bool delete_itself_ = false;
  std::thread thread_;
};

} // namespace perdure::detail
