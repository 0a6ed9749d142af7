#include "perdure/detail/lease/executor_lease.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

namespace perdure::detail {

namespace {

/// The lease's own connection retries for at most half the lease: a
/// heartbeat blocked in retries for longer would not notice in time that
/// the holder can no longer act.
persistence::store_options lease_options(persistence::store_options opts,
                                         std::int64_t timeout_ms) {
  opts.retry_budget = std::min(opts.retry_budget,
                               std::chrono::milliseconds{timeout_ms / 2});
  return opts;
}

} // namespace

executor_lease::executor_lease(
  persistence::store_options opts,
  std::shared_ptr<std::atomic<std::int64_t>> epoch,
  persistence::lease_request request, spdlog::logger& log)
  : request_(std::move(request)), log_(log), epoch_(std::move(epoch)),
    store_(persistence::open_store(
      lease_options(std::move(opts), request_.timeout_ms))),
    can_lapse_(std::string_view{store_->dialect()} != "sqlite") {
}

executor_lease::~executor_lease() {
  heartbeat_.reset();
}

void executor_lease::acquire() {
  auto sent = std::chrono::steady_clock::now();
  epoch_->store(store_->acquire_lease(request_));
  std::lock_guard guard{mtx_};
  lost_ = false;
  locked_ = true;
  renewed_at_ = sent;
}

void executor_lease::start_heartbeats(std::chrono::milliseconds interval,
                                      events ev) {
  events_ = std::move(ev);
  {
    std::lock_guard guard{mtx_};
    interval_ = interval;
  }
  heartbeat_ = std::make_unique<ticker>(interval, [this] { beat(); });
}

void executor_lease::release() {
  heartbeat_.reset();
  try {
    store_->release_lease(request_.executor, epoch_->load());
    store_->notify(persistence::notice::gone(request_.executor));
  } catch (const std::exception& ex) {
    // It lapses by itself: the lock went with the connection.
    log_.warn("perdure: executor '{}' could not give its lease up: {}",
              request_.executor, ex.what());
  }
  store_.reset();
}

bool executor_lease::fresh(std::chrono::milliseconds wait) {
  // Without its lock (a connection lost or refused) a holder is declared
  // lapsed after a second without heartbeats, not its whole timeout.
  auto full = std::chrono::milliseconds{request_.timeout_ms * 3 / 4};
  auto unlocked = std::min(full, std::chrono::milliseconds{750});
  auto ok = [&] {
    auto now = std::chrono::steady_clock::now();
    // No renewal for two beats: whatever the lease connection is doing
    // (retrying a renewal or a declaration on a connection the server
    // ended: an admin, a proxy, a partition), the lock may be gone.
    auto unsure = !locked_ || now - renewed_at_ > 2 * interval_;
    return !lost_
           && (!can_lapse_ || now - renewed_at_ < (unsure ? unlocked : full));
  };
  std::unique_lock guard{mtx_};
  if (ok() || wait.count() == 0)
    return ok();
  renewed_cv_.wait_for(guard, wait, ok);
  return ok();
}

void executor_lease::beat() {
  bool lost = false;
  {
    std::lock_guard guard{mtx_};
    lost = lost_;
  }
  if (lost) {
    regain();
    return;
  }
  auto sent = std::chrono::steady_clock::now();
  std::optional<persistence::lease_renewal> renewal;
  try {
    renewal = store_->renew_lease(request_.executor, epoch_->load());
  } catch (const std::exception& ex) {
    {
      std::lock_guard guard{mtx_};
      locked_ = false; // its connection is likely gone, and its lock
    }
    healthy_since_.reset();
    log_.warn("perdure: executor '{}' could not renew its lease: {}",
              request_.executor, ex.what());
    return;
  }
  if (!renewal) {
    {
      std::lock_guard guard{mtx_};
      lost_ = true;
    }
    renewed_cv_.notify_all();
    log_.error("perdure: executor '{}' lost its lease (this process stalled "
               "or was cut off for longer than lease_timeout, and another "
               "declared it lapsed): its runs stop here and nothing it "
               "writes is accepted until it holds the lease again",
               request_.executor);
    events_.lost();
    return;
  }
  auto done = std::chrono::steady_clock::now();
  {
    std::lock_guard guard{mtx_};
    renewed_at_ = sent;
    locked_ = renewal->locked;
  }
  renewed_cv_.notify_all();
  // A renewal that had to lock again got through only after its connection
  // was cut (retries hid the failure): every holder's likely was, and their
  // locks are free and heartbeats old as ours were. Judge nobody for now.
  if (!healthy_since_ || renewal->relocked)
    healthy_since_ = done;
  // Back from an outage or a partition, the others' heartbeats look old
  // too: they get a lease's time to renew before this one judges them.
  if (sent - *healthy_since_ < std::chrono::milliseconds{request_.timeout_ms})
    renewal->lapsed.clear();
  events_.renewed(declare_lapsed(renewal->lapsed));
}

void executor_lease::regain() {
  try {
    acquire();
  } catch (const std::exception&) {
    return; // held by another process now, or the store is away: later
  }
  renewed_cv_.notify_all();
  healthy_since_ = std::chrono::steady_clock::now(); // it was cut off
  log_.warn("perdure: executor '{}' holds its lease again; it recovers "
            "the runs nobody took over",
            request_.executor);
  events_.regained();
}

std::size_t
executor_lease::declare_lapsed(const std::vector<std::string>& lapsed) {
  std::size_t declared = 0;
  for (auto& id : lapsed) {
    try {
      if (!store_->lapse_executor(id))
        continue; // another process declared it first
      log_.warn("perdure: executor '{}' lapsed (its process died, or "
                "stalled past its lease): taking its runs over",
                id);
      store_->notify(persistence::notice::gone(id));
      ++declared;
    } catch (const std::exception& ex) {
      log_.warn("perdure: could not declare executor '{}' lapsed: {}", id,
                ex.what());
    }
  }
  return declared;
}

} // namespace perdure::detail
