#pragma once

// This process's hold on its executor id, and what follows from it: the
// lease and its heartbeats while started, what losing and regaining it
// does to the runs here, whether a step body may run now, and the
// throttled report of runs fenced away.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "perdure/persistence/store.hpp"

namespace perdure::detail {

class executor_lease;
struct runtime_services;

class lease_service {
public:
  explicit lease_service(runtime_services& svc);
  ~lease_service();

  /// Where the lease keeps its epoch (what every store's fenced writes
  /// read, through `store_options::lease_epoch`).
  const std::shared_ptr<std::atomic<std::int64_t>>& epoch() const noexcept {
    return epoch_;
  }

  /// Takes the executor id (throws `errc::executor_in_use` if a live
  /// process holds it) and renews it every `interval` from now on: a long
  /// recovery must not let it lapse (what heartbeats trigger waits for
  /// the registry to open).
  void acquire(const persistence::store_options& opts,
               const std::string& instance,
               std::chrono::milliseconds interval);

  /// Gives the lease up (every write is in: others may take the rest
  /// over at once) and stops the heartbeats.
  void release();

  /// `owns`, once the lease was renewed recently enough for this process
  /// to act as its holder (it waits while it was not: the store away, or
  /// the process stalled), and once no other copy of the run here is in a
  /// step body. Called on a step thread right before the body; when it
  /// returns true, `step_body_done` must follow the body.
  bool may_run_step(const std::string& id, std::int64_t epoch,
                    std::int32_t seq);
  /// The body of step `seq` that `may_run_step` let run has returned.
  void step_body_done(const std::string& id, std::int32_t seq);

  /// Throws `errc::fenced` if this runtime lost its lease and has not got
  /// it back.
  void check() const;

  /// Logs that run `id` was fenced (owned elsewhere now): the first at
  /// once, the rest of a burst as one count per 5 s.
  void report_fenced(const std::string& id);
  /// Logs the count of a burst of fencings once its 5 s are over.
  void flush_log_summaries();

  /// Seconds since the lease was last renewed (-1: not held).
  double age_seconds() const noexcept;

private:
  void lost();
  void regained();

  runtime_services& svc_;
  std::shared_ptr<std::atomic<std::int64_t>> epoch_
    = std::make_shared<std::atomic<std::int64_t>>(0);
  std::unique_ptr<executor_lease> lease_;
  /// When the lease was last taken or renewed (steady clock, ns; 0: not
  /// held).
  std::atomic<std::int64_t> renewed_ns_{0};
  std::uint64_t beats_ = 0;
  std::mutex log_mtx_;
  std::chrono::steady_clock::time_point fenced_window_end_{};
  std::size_t fenced_unreported_ = 0;
};

} // namespace perdure::detail
