#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "perdure/clock.hpp"

namespace perdure::detail {

/// One due time: wake run `run_id` for its operation `seq`.
struct timer {
  std::int64_t due_ms = 0;
  std::string run_id;
  std::int32_t seq = 0;
};

/// The process's durable-timer heap: one thread and one binary heap for all
/// runs (no thread and no CAF timeout per run). The store holds the truth
/// (journal entries, wake-up times); this only says when to look again, so
/// it is rebuilt from the store at start-up. `fire` runs on the timer
/// thread and must not block.
class timer_service {
public:
  using fire_fn = std::function<void(const timer&)>;

  timer_service(std::shared_ptr<perdure::clock> clk, fire_fn fire);
  ~timer_service();

  timer_service(const timer_service&) = delete;
  timer_service& operator=(const timer_service&) = delete;

  /// Fires `t` once the clock reaches `t.due_ms` (at once if it has).
  void schedule(timer t);

  /// Returns how many timers are waiting.
  std::size_t size() const;

private:
  struct later {
    bool operator()(const timer& a, const timer& b) const noexcept {
      return a.due_ms > b.due_ms;
    }
  };

  void run();

  /// Shared with the clock's jump listener, which may outlive this service.
  struct wake_state {
    std::mutex mtx;
    std::condition_variable cv;
  };

  std::shared_ptr<perdure::clock> clock_;
  fire_fn fire_;
  std::shared_ptr<wake_state> wake_ = std::make_shared<wake_state>();
  std::mutex& mtx_ = wake_->mtx;
  std::condition_variable& cv_ = wake_->cv;
  /// A deque, not a vector: no doubling slack, which with 100 K sleeping
  /// runs is bytes per run.
  std::priority_queue<timer, std::deque<timer>, later> heap_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace perdure::detail
