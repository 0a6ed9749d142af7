#include "perdure/detail/delivery/notice_router.hpp"

#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/recovery/recovery_service.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/deadlines.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"

namespace perdure::detail {

notice_router::notice_router(runtime_services& svc) : svc_(svc) {
}

notice_router::~notice_router() = default;

void notice_router::listen(const persistence::store_options& opts) {
  listener_ = persistence::listen_for_deliveries(
    opts, [this](const persistence::notice& n) { on_notice(n); });
}

void notice_router::stop_listening() {
  listener_.reset();
}

void notice_router::on_notice(const persistence::notice& n) {
  using kind = persistence::notice::kind;
  // Posts to the control executor are safe outside the registry's lock:
  // stop() stops listening before it lets the executor go.
  if (!svc_.runs->running())
    return;
  auto& control = *svc_.control;
  switch (n.what) {
    case kind::sweep_due:
      control.post([this] { sweep(); });
      break;
    case kind::missed:
      // Runs in memory may have missed theirs too: each looks again; so do
      // the keys held here (calls from other processes).
      svc_.runs->wake_all();
      control.post([this] { sweep(); });
      svc_.recovery->take_over();
      break;
    case kind::run_woken:
      svc_.launcher->wake(n.id, -1);
      break;
    case kind::run_cancelled:
      control.post([this, id = n.id] { cancelled(id); });
      break;
    case kind::saga_cancelling:
      control.post([this, id = n.id] { cancel_signalled(id); });
      break;
    case kind::queue_has_items:
      if (svc_.queues)
        svc_.queues->notice(n.id);
      break;
    case kind::executor_gone:
      svc_.recovery->take_over();
      break;
    case kind::run_created:
      svc_.recovery->take_over(n.id); // whoever can run it adopts it
      break;
    case kind::object_has_calls:
      if (svc_.object_types.count(n.id) == 0)
        return;
      control.post([this, type = n.id, key = n.key] {
        svc_.objects->reach(type, key, false);
      });
      break;
  }
}

void notice_router::announce(const persistence::notice& n) {
  if (svc_.runs->is_active(n.id))
    return;
  try {
    svc_.stores->with([&](persistence::store& db) { db.notify(n); });
  } catch (const std::exception& ex) {
    // Stored anyway: the owner's sweep finds it.
    svc_.log().warn("perdure: could not announce a delivery to run {}: {}",
                    n.id, ex.what());
  }
}

void notice_router::sweep() {
  try {
    // A recovery brings in this executor's awake runs itself: revived
    // beside it, one would be claimed twice and run by two copies.
    std::vector<std::string> ids;
    if (!svc_.recovery->recovering())
      ids = svc_.stores->with([&](persistence::store& db) {
        return db.awake_runs(svc_.cfg.executor_id);
      });
    for (auto& id : ids)
      if (!svc_.runs->is_active(id))
        svc_.launcher->revive(id);
    // Sagas asked to cancel whose signal may have been lost (a notice
    // whose sender died, a passivation racing the request): again.
    auto sagas = svc_.stores->with([&](persistence::store& db) {
      return db.signalled_sagas(svc_.cfg.executor_id);
    });
    for (auto& id : sagas)
      cancel_signalled(id);
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: sweep failed: {}", ex.what());
  }
}

void notice_router::deadline_passed(const std::string& id,
                                    std::int64_t due_ms) {
  try {
    auto runs = svc_.stores->with([&](persistence::store& db) {
      return db.cancel_run(id, svc_.clock->now_ms(), due_ms);
    });
    if (!runs.empty())
      svc_.log().info("perdure: run {} passed its deadline: cancelled", id);
    apply_cancel(runs);
    if (!runs.empty())
      tell_parent(id);
  } catch (const std::exception& ex) {
    svc_.log().warn("perdure: could not cancel run {} at its deadline ({}); "
                    "trying again",
                    id, ex.what());
    svc_.deadlines->retry_later(id, due_ms);
  }
}

void notice_router::tell_parent(const std::string& id) {
  auto run = svc_.stores->with(
    [&](persistence::store& db) { return db.get_run(id); });
  if (run && run->parent_id) {
    svc_.launcher->wake(*run->parent_id, -1);
    announce(persistence::notice::woken(*run->parent_id));
  }
}

void notice_router::cancelled(const std::string& id) {
  // A notice may come late, after the run was resumed: a new life at a
  // newer epoch that the cancel is not about. The row says which life it
  // ended (cancel_run keeps the epoch); if it cannot be read, stop the
  // actor anyway (its next durable operation would find the end).
  if (svc_.runs->is_active(id)) {
    std::optional<persistence::run_record> run;
    try {
      run = svc_.stores->with(
        [&](persistence::store& db) { return db.get_run(id); });
    } catch (const std::exception& ex) {
      svc_.log().warn("perdure: could not read cancelled run {}: {}", id,
                      ex.what());
    }
    if (run && run->status != run_status::cancelled) {
      // Resumed since: the cancel is not the new life's, but a life older
      // than the row is stale (fenced) and stops.
      if (run->object_type.empty())
        svc_.runs->cancel(id, run->owner.epoch - 1);
      return;
    }
    std::optional<std::int64_t> up_to;
    if (run && run->object_type.empty()) // an invocation runs at its key's
      up_to = run->owner.epoch;
    if (svc_.runs->cancel(id, up_to))
      return; // the actor stops and reports the end itself
  }
  // Passivated (or owned elsewhere): nothing to stop; its queue slot goes
  // and its waiters read the store (not told "cancelled": it may have been
  // resumed since).
  svc_.queue_item_released(id);
  svc_.ends->tell(id, std::nullopt);
}

void notice_router::cancel_signalled(const std::string& id) {
  if (!svc_.runs->signal_cancel(id))
    svc_.launcher->revive(id); // it reads the request from its row
}

void notice_router::apply_cancel(
  const std::vector<persistence::cancelled_run>& runs, bool announced) {
  for (auto& c : runs) {
    if (!announced)
      announce(c.signalled ? persistence::notice::saga_cancel(c.id)
                           : persistence::notice::cancelled(c.id));
    if (c.signalled)
      cancel_signalled(c.id);
    else
      cancelled(c.id);
  }
}

} // namespace perdure::detail
