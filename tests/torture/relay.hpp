#pragma once

// A TCP relay between Perdure's processes and the PostgreSQL server, of the
// torture run's own: everything the runtimes and clients say to the
// database passes through it, so the run can cut every connection at once
// (in the middle of whatever transaction is open) or stall them all (bytes
// held, nothing closed) for a while.

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace perdure::torture {

class tcp_relay {
public:
  /// Listens on a free loopback port and forwards to `target_port`.
  explicit tcp_relay(int target_port);
  ~tcp_relay();

  tcp_relay(const tcp_relay&) = delete;
  tcp_relay& operator=(const tcp_relay&) = delete;

  int port() const noexcept {
    return port_;
  }

  /// Cuts every open connection: the client side gets a reset, the server
  /// side an end of stream (PostgreSQL rolls back what was open).
  void cut_all();

  /// Holds every byte in both directions for `d` (connections stay open,
  /// new ones are accepted but get no answer meanwhile).
  void stall(std::chrono::milliseconds d);

  /// Returns how many connections are open through it now.
  int open_count() const noexcept {
    return open_.load();
  }

  /// Returns how many connections were cut so far.
  int cut_count() const noexcept {
    return cuts_.load();
  }

private:
  void loop();
  void wake();

  int target_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<std::int64_t> stalled_until_ns_{0};
  std::atomic<int> cuts_{0};
  std::atomic<int> open_{0};
  std::thread thread_;
};

} // namespace perdure::torture
