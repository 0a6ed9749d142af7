#include "perdure/detail/timer/ticker.hpp"

namespace perdure::detail {

ticker::ticker(std::chrono::milliseconds interval, std::function<void()> tick)
  : interval_(interval), tick_(std::move(tick)) {
  thread_ = std::thread{[this] {
    std::unique_lock guard{mtx_};
    while (!cv_.wait_for(guard, interval_, [this] { return stopping_; })) {
      guard.unlock();
      tick_();
      guard.lock();
    }
  }};
}

ticker::~ticker() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

} // namespace perdure::detail
