#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace perdure::detail {

/// The threads that run user step code, which may block on I/O. CAF's
/// scheduler threads never run it; results return to actors as messages.
class step_executor {
public:
  /// Starts `threads` threads, which belong to `owner` (see `runs_on`).
  step_executor(std::size_t threads, const void* owner);

  /// Same as `stop()`.
  ~step_executor();

  step_executor(const step_executor&) = delete;
  step_executor& operator=(const step_executor&) = delete;

  /// Finishes the jobs already running, drops queued ones, joins. Later
  /// `post`s do nothing; the executor stays valid to call.
  void stop();

  /// Queues `job`; it runs on one of the executor's threads.
  void post(std::function<void()> job);

  /// Returns whether jobs wait for a thread (a workflow going on with its
  /// next step on the thread it holds would jump that queue).
  bool has_queued_jobs();

  /// Threads running a job now, and jobs waiting for one.
  struct load_reading {
    std::size_t busy = 0;
    std::size_t queued = 0;
  };
  load_reading load();

  /// Returns whether the calling thread is an executor thread of `owner`
  /// (one that must not join `owner`'s executors, as `runtime::stop()`
  /// does).
  static bool runs_on(const void* owner) noexcept;

private:
  void work();
  /// Under mtx_: whether to wake an idle thread for queued jobs. One
  /// thread is woken at a time; a woken thread that finds more jobs wakes
  /// the next, so blocking steps still spread over every thread, while a
  /// burst of short ones costs a wake-up or two instead of one per job
  /// (each a context switch, the largest cost of a step under load).
  bool wake_one();

  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  /// Threads waiting for jobs; whether one was woken and has not run yet.
  std::size_t idle_ = 0;
  bool wake_pending_ = false;
  const void* owner_;
  std::vector<std::thread> threads_;
};

} // namespace perdure::detail
