#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>

#include "perdure/error.hpp"

namespace perdure::detail {

/// Lets application threads' calls into a runtime in while it runs, and
/// tells stop() when the last one has left: nothing a call uses is torn
/// down under it (Seastar's gate).
class client_gate {
public:
  /// Opens the gate (start()).
  void open() {
    std::lock_guard guard{mtx_};
    open_ = true;
  }

  /// Closes the gate and returns once every call inside has left.
  void close_and_wait() {
    std::unique_lock guard{mtx_};
    open_ = false;
    left_.wait(guard, [this] { return inside_ == 0; });
  }

  /// One call inside, from construction to destruction; throws
  /// `not_running` while the gate is closed.
  class call {
  public:
    explicit call(client_gate& g) : gate_(g) {
      std::lock_guard guard{gate_.mtx_};
      if (!gate_.open_)
        throw perdure::error(errc::not_running,
                             "start() the runtime before starting work");
      ++gate_.inside_;
    }
    ~call() {
      std::lock_guard guard{gate_.mtx_};
      if (--gate_.inside_ == 0)
        gate_.left_.notify_all();
    }
    call(const call&) = delete;
    call& operator=(const call&) = delete;

  private:
    client_gate& gate_;
  };

private:
  std::mutex mtx_;
  std::condition_variable left_;
  std::size_t inside_ = 0;
  bool open_ = false;
};

} // namespace perdure::detail
