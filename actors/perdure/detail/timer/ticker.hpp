#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace perdure::detail {

/// A thread that calls `tick` every `interval` of real (steady) time until
/// destroyed: the runtime's housekeeping (reviving orphaned runs), which
/// must go on whatever clock the durable timers read. `tick` must not block.
class ticker {
public:
  ticker(std::chrono::milliseconds interval, std::function<void()> tick);

  /// Stops the thread (after a tick in progress) and joins it.
  ~ticker();

  ticker(const ticker&) = delete;
  ticker& operator=(const ticker&) = delete;

private:
  std::chrono::milliseconds interval_;
  std::function<void()> tick_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace perdure::detail
