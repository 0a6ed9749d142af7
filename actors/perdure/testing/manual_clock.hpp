#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <vector>

#include "perdure/clock.hpp"

namespace perdure::testing {

/// A clock that moves only when told to: give it to `config::clock` and
/// advance it to fire durable timers in tests without sleeping.
///
/// ~~~
/// auto clk = std::make_shared<perdure::testing::manual_clock>();
/// cfg.clock = clk;
/// ...                                   // a workflow sleeps for 24 hours
/// clk->advance(std::chrono::hours{24}); // and wakes up now
/// ~~~
class manual_clock final : public clock {
public:
  /// Starts at `start` (by default, the real time of construction).
  explicit manual_clock(time_point start = std::chrono::system_clock::now())
    : now_(start) {
  }

  time_point now() const override {
    std::lock_guard guard{mtx_};
    return now_;
  }

  void on_jump(std::function<void()> f) override {
    std::lock_guard guard{mtx_};
    listeners_.push_back(std::move(f));
  }

  /// Moves the time forward by `d` and wakes the timers due by then.
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> d) {
    set(now() + std::chrono::duration_cast<time_point::duration>(d));
  }

  /// Sets the time (never backwards) and wakes the timers due by then.
  void set(time_point t) {
    std::vector<std::function<void()>> listeners;
    {
      std::lock_guard guard{mtx_};
      if (t > now_)
        now_ = t;
      listeners = listeners_;
    }
    for (auto& f : listeners)
      f();
  }

private:
  mutable std::mutex mtx_;
  time_point now_;
  std::vector<std::function<void()>> listeners_;
};

} // namespace perdure::testing
