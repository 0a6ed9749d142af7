#include "perdure/detail/timer/timer_service.hpp"

#include <algorithm>
#include <chrono>

namespace perdure::detail {

timer_service::timer_service(std::shared_ptr<perdure::clock> clk,
                             fire_fn fire)
  : clock_(std::move(clk)), fire_(std::move(fire)) {
  // A manual clock's jump wakes the thread; it re-reads the time.
  clock_->on_jump([weak = std::weak_ptr<wake_state>{wake_}] {
    if (auto w = weak.lock()) {
      std::lock_guard guard{w->mtx};
      w->cv.notify_all();
    }
  });
  thread_ = std::thread{[this] { run(); }};
}

timer_service::~timer_service() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void timer_service::schedule(timer t) {
  bool earliest;
  {
    std::lock_guard guard{mtx_};
    earliest = heap_.empty() || t.due_ms < heap_.top().due_ms;
    heap_.push(std::move(t));
  }
  if (earliest)
    cv_.notify_all();
}

std::size_t timer_service::size() const {
  std::lock_guard guard{mtx_};
  return heap_.size();
}

void timer_service::run() {
  using namespace std::chrono;
  std::vector<timer> due;
  std::unique_lock guard{mtx_};
  while (!stopping_) {
    if (heap_.empty()) {
      cv_.wait(guard);
      continue;
    }
    auto now = clock_->now_ms();
    while (!heap_.empty() && heap_.top().due_ms <= now) {
      due.push_back(heap_.top());
      heap_.pop();
    }
    if (!due.empty()) {
      guard.unlock();
      for (auto& t : due)
        fire_(t);
      due.clear();
      guard.lock();
      continue;
    }
    // Sleep until the earliest is due; at most a second, so that a clock
    // that drifts from the steady clock is re-read.
    auto wait = std::min<std::int64_t>(heap_.top().due_ms - now, 1000);
    cv_.wait_for(guard, milliseconds{wait});
  }
}

} // namespace perdure::detail
