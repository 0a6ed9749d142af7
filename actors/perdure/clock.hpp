#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace perdure {

/// Where the runtime reads the time for durable timers (sleeps, deadlines,
/// passivation). The default is the system clock; tests inject a
/// `testing::manual_clock` and advance it instead of sleeping.
class clock {
public:
  using time_point = std::chrono::system_clock::time_point;

  virtual ~clock() = default;

  /// Returns the current time.
  virtual time_point now() const = 0;

  /// Registers `f` to be called whenever the time jumps (a manual clock
  /// advanced), so that timers due by then fire at once. The system clock
  /// never jumps and ignores it.
  virtual void on_jump(std::function<void()> f) {
    (void) f;
  }

  /// Returns milliseconds since the epoch, as stored in the tables.
  std::int64_t now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
             now().time_since_epoch())
      .count();
  }
};

/// Returns the shared system clock.
std::shared_ptr<clock> system_clock();

} // namespace perdure
