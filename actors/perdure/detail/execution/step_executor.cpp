#include "perdure/detail/execution/step_executor.hpp"

#include <algorithm>

namespace perdure::detail {

namespace {

thread_local const void* executor_owner = nullptr;

} // namespace

bool step_executor::runs_on(const void* owner) noexcept {
  return owner != nullptr && executor_owner == owner;
}

step_executor::step_executor(std::size_t threads, const void* owner)
  : owner_(owner) {
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { work(); });
}

step_executor::~step_executor() { stop(); }

void step_executor::stop() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
}

void step_executor::post(std::function<void()> job) {
  bool wake = false;
  {
    std::lock_guard guard{mtx_};
    if (stopping_)
      return;
    jobs_.push_back(std::move(job));
    wake = wake_one();
  }
  if (wake)
    cv_.notify_one();
}

bool step_executor::has_queued_jobs() {
  std::lock_guard guard{mtx_};
  return !jobs_.empty();
}

step_executor::load_reading step_executor::load() {
  std::lock_guard guard{mtx_};
  return {threads_.size() - std::min(idle_, threads_.size()), jobs_.size()};
}

bool step_executor::wake_one() {
  if (idle_ == 0 || wake_pending_)
    return false;
  wake_pending_ = true;
  return true;
}

void step_executor::work() {
  executor_owner = owner_;
  for (;;) {
    std::function<void()> job;
    bool wake = false;
    {
      std::unique_lock guard{mtx_};
      ++idle_;
      while (!stopping_ && jobs_.empty()) {
        cv_.wait(guard);
        wake_pending_ = false; // woken (or not): the next post wakes one
      }
      --idle_;
      if (stopping_)
        return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      // More queued: the next thread, in case this job blocks for long.
      wake = !jobs_.empty() && wake_one();
    }
    if (wake)
      cv_.notify_one();
    job();
  }
}

} // namespace perdure::detail
