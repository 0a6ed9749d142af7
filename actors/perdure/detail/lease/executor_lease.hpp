#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "perdure/detail/timer/ticker.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::detail {

/// A runtime's hold on its executor id (see `store::acquire_lease`): its
/// own connection, the epoch every fenced write carries, and a heartbeat
/// thread renewing it until `release()`. It also tells when the holder may
/// act: a holder that could not renew for most of its timeout may have been
/// declared lapsed by now without knowing it, so it runs no step body.
class executor_lease {
public:
  /// What the heartbeat found; called on the heartbeat thread.
  struct events {
    /// Another process declared this one lapsed: its runs may be running
    /// elsewhere now.
    std::function<void()> lost;
    /// The lease is held again (a new epoch) after `lost`.
    std::function<void()> regained;
    /// A heartbeat renewed the lease; `declared` is how many other
    /// executors this one declared lapsed (and announced as `x:<id>`).
    std::function<void(std::size_t declared)> renewed;
  };

  /// `epoch` is where this lease keeps its epoch (what the other stores'
  /// fenced writes read, through `store_options::lease_epoch`).
  executor_lease(persistence::store_options opts,
                 std::shared_ptr<std::atomic<std::int64_t>> epoch,
                 persistence::lease_request request, spdlog::logger& log);

  /// Stops the heartbeat; the lease lapses by itself (see `release`).
  ~executor_lease();

  executor_lease(const executor_lease&) = delete;
  executor_lease& operator=(const executor_lease&) = delete;

  /// Takes the id. Throws `errc::executor_in_use` if a live process holds
  /// it (nothing changed), or a store error.
  void acquire();

  /// Starts renewing every `interval`, reporting to `ev`.
  void start_heartbeats(std::chrono::milliseconds interval, events ev);

  /// Stops the heartbeat and gives the lease up (its runs may be taken
  /// over at once), announcing `x:<id>`. A failure is logged: the lease
  /// then lapses by itself.
  void release();

  /// Returns whether the holder may act now: not lost, and renewed within
  /// three quarters of its timeout, or within 750 ms while its lock may be
  /// gone (a renewal failed or was refused the lock, or none succeeded for
  /// two heartbeats: others judge a holder without its lock after 1 s).
  /// Always where nobody can declare it lapsed (SQLite's one runtime per
  /// file). Waits up to `wait` for that.
  bool fresh(std::chrono::milliseconds wait = std::chrono::milliseconds{0});

private:
  void beat();
  /// After a loss: acquires the lease again, if it can.
  void regain();
  /// Declares `lapsed` executors lapsed (those nobody declared first) and
  /// tells everyone; returns how many this one declared.
  std::size_t declare_lapsed(const std::vector<std::string>& lapsed);

  persistence::lease_request request_;
  spdlog::logger& log_;
  std::shared_ptr<std::atomic<std::int64_t>> epoch_;
  std::unique_ptr<persistence::store> store_;
  bool can_lapse_;
  events events_;
  std::mutex mtx_;
  std::condition_variable renewed_cv_;
  bool lost_ = false;
  /// Whether the last renewal held the id's lock (see `lease_renewal`).
  bool locked_ = true;
  /// When the last successful renewal was sent (steady clock).
  std::chrono::steady_clock::time_point renewed_at_;
  /// The heartbeat interval (until heartbeats start: an hour, so that
  /// only `locked_` decides).
  std::chrono::milliseconds interval_{std::chrono::hours{1}};
  /// Since when renewals have succeeded without a failure or a relock
  /// between (on the heartbeat thread; a time long ago from the start).
  std::optional<std::chrono::steady_clock::time_point> healthy_since_
    = std::chrono::steady_clock::time_point{};
  std::unique_ptr<ticker> heartbeat_;
};

} // namespace perdure::detail
