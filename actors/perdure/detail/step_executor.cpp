#include "perdure/detail/step_executor.hpp"

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

step_executor::~step_executor() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void step_executor::post(std::function<void()> job) {
  {
    std::lock_guard guard{mtx_};
    if (stopping_)
      return;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void step_executor::work() {
  executor_owner = owner_;
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock guard{mtx_};
      cv_.wait(guard, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_)
        return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

} // namespace perdure::detail
