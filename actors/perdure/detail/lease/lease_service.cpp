#include "perdure/detail/lease/lease_service.hpp"

#include <caf/send.hpp>

#include "perdure/detail/lease/executor_lease.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/recovery/recovery_service.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/error.hpp"

namespace perdure::detail {

namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

} // namespace

lease_service::lease_service(runtime_services& svc) : svc_(svc) {
}

lease_service::~lease_service() = default;

void lease_service::acquire(const persistence::store_options& opts,
                            const std::string& instance,
                            std::chrono::milliseconds interval) {
  auto& cfg = svc_.cfg;
  // First the lease: a second process with this id changes nothing.
  lease_ = std::make_unique<executor_lease>(
    opts, epoch_,
    persistence::lease_request{.executor = cfg.executor_id,
                               .instance = instance,
                               .app_version = cfg.app_version,
                               .timeout_ms = cfg.lease_timeout.count()},
    svc_.log());
  try {
    lease_->acquire();
    renewed_ns_ = steady_ns();
    lease_->start_heartbeats(
      interval, {.lost = [this] { lost(); },
                 .regained = [this] { regained(); },
                 .renewed = [this](std::size_t declared) {
                   renewed_ns_ = steady_ns();
                   // Now and then, whatever is left for this process too
                   // (runs whose workflow no live process had, runs a
                   // client started unheard).
                   if ((declared > 0 || ++beats_ % 20 == 0) && svc_.recovery)
                     svc_.recovery->take_over();
                 }});
  } catch (...) {
    lease_.reset();
    throw;
  }
}

void lease_service::release() {
  if (lease_)
    lease_->release();
  lease_.reset();
  renewed_ns_ = 0;
}

double lease_service::age_seconds() const noexcept {
  auto at = renewed_ns_.load();
  return at == 0 ? -1.0 : static_cast<double>(steady_ns() - at) / 1e9;
}

void lease_service::lost() {
  svc_.metrics.lease_losses.add();
  svc_.runs->lose_lease();
  // After the registry's lock: the directory takes its own lock, then that
  // one.
  for (auto& actor : svc_.objects->drop_all())
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  if (svc_.queues)
    svc_.queues->lease_lost();
}

void lease_service::regained() {
  // A new epoch: whatever is still ours may run again.
  if (!svc_.runs->regain_lease())
    return;
  svc_.runs->if_running([this] {
    svc_.control->post([this] {
      try {
        svc_.recovery->recover();
        svc_.objects->revive_dropped();
        svc_.objects->recover();
      } catch (const std::exception& ex) {
        svc_.log().warn("perdure: recovery after regaining the lease "
                        "failed: {}",
                        ex.what());
      }
    });
  });
}

bool lease_service::may_run_step(const std::string& id, std::int64_t epoch,
                                 std::int32_t seq) {
  using admission = run_registry::body_admission;
  auto waiting_since = std::chrono::steady_clock::now();
  bool warned = false;
  // Not renewed for most of the lease (the store away, or this process
  // stalled): others may declare it lapsed any moment, so wait.
  for (;;) {
    if (!lease_->fresh(std::chrono::milliseconds{100})) {
      if (!svc_.runs->live())
        return false;
      continue;
    }
    switch (svc_.runs->enter_body(id, epoch, seq)) {
      case admission::run:
        return true;
      case admission::refused:
        return false;
      case admission::busy:
        break;
    }
    if (!warned && std::chrono::steady_clock::now() - waiting_since
                     > std::chrono::seconds{30}) {
      warned = true;
      svc_.log().warn("perdure: run {} step {} waits for its body an older "
                      "copy began here to return (30 s so far): the body "
                      "may hang",
                      id, seq);
    }
  }
}

void lease_service::step_body_done(const std::string& id, std::int32_t seq) {
  svc_.runs->leave_body(id, seq);
}

void lease_service::check() const {
  if (svc_.runs->lease_lost())
    throw perdure::error(errc::fenced,
                         "executor '" + svc_.cfg.executor_id
                           + "' lost its lease (this process stalled or was "
                             "cut off past lease_timeout) and has not got it "
                             "back");
}

void lease_service::report_fenced(const std::string& id) {
  std::lock_guard guard{log_mtx_};
  auto now = std::chrono::steady_clock::now();
  if (now < fenced_window_end_) {
    ++fenced_unreported_;
    return;
  }
  fenced_window_end_ = now + std::chrono::seconds{5};
  svc_.log().warn("perdure: run {} is owned elsewhere now (fenced); this "
                  "process stops running it",
                  id);
}

void lease_service::flush_log_summaries() {
  std::lock_guard guard{log_mtx_};
  if (fenced_unreported_ == 0
      || std::chrono::steady_clock::now() < fenced_window_end_)
    return;
  svc_.log().warn("perdure: {} more runs were fenced (owned elsewhere now) "
                  "and stopped here in the last 5 s",
                  std::exchange(fenced_unreported_, 0));
}

} // namespace perdure::detail
