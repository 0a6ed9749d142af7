#include "perdure/detail/execution/execution.hpp"

#include <spdlog/spdlog.h>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/delivery/notice_router.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/lease/lease_service.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure::detail {

void execution::passivate(std::int64_t wake_at) {
  passivating = true;
  if (waking) { // after the wake-up time was cleared, not before
    deferred_passivation = wake_at;
    return;
  }
  auto me = mailbox_;
  auto seen = rt->runs->wake_count(run_id_);
  rt->control->post([me, seq = op->seq, seen, wake_at, fence = owner(),
                     id = run_id_, pool = rt->stores,
                     log = &rt->log()] {
    bool ok = false;
    try {
      ok = pool->with([&](persistence::store& db) {
        return db.set_wake_at(fence, id, wake_at);
      });
    } catch (const std::exception& ex) {
      log->error("perdure: run {} could not passivate: {}", id,
                    ex.what());
    }
    tell(me, passivation_written{seq, ok, wake_at, seen});
  });
}

void execution::on_passive(std::int32_t seq, bool ok, std::int64_t wake_at,
                std::uint64_t seen) {
  passivating = false;
  if (!ok) {
    // Fenced or cancelled meanwhile; or the store failed: stay in memory
    // and keep waiting (a failed write changed nothing).
    if (op && op->seq == seq)
      on_wake(seq);
    return;
  }
  if (op && op->seq == seq && op->kind == persistence::entry_kind::await) {
    // A delivery committed before the wake-up time was written cleared
    // nothing and may have no notice on its way (its sender crashed):
    // look once more now that the time is written. One committed after
    // clears it again, and the sweep finds the run.
    confirming = passivation{wake_at, seen};
    check_delivery();
    return;
  }
  leave_or_stay(seq, wake_at, seen);
}

void execution::leave_or_stay(std::int32_t seq, std::int64_t wake_at,
                   std::uint64_t seen) {
  if (op && op->seq == seq && rt->finish_passivation(run_id_, epoch, seen)) {
    if (wake_at != passivated_forever)
      rt->timers->schedule({wake_at, run_id_, -1});
    rt->log().debug("perdure: run {} passivated", run_id_);
    quit_host(); // the state, and with it the coroutine frame, goes
    return;
  }
  // Woken while passivating: the run stays, and the store must not keep a
  // wake-up time that would hide it from recovery.
  stay_awake();
  if (op && op->seq == seq)
    on_wake(seq);
}

void execution::stay_awake() {
  auto me = mailbox_;
  waking = true;
  rt->control->post([me, fence = owner(), id = run_id_,
                     pool = rt->stores, log = &rt->log()] {
    try {
      pool->with([&](persistence::store& db) {
        return db.set_wake_at(fence, id, std::nullopt);
      });
      tell(me, awake_recorded{});
    } catch (const std::exception& ex) {
      log->warn("perdure: run {} could not record that it is awake "
                   "({}); it restarts",
                   id, ex.what());
      send_signal(me, run_signal::restart, 0);
    }
  });
}

void execution::on_awake() {
  waking = false;
  if (auto due = std::exchange(deferred_passivation, std::nullopt)) {
    passivating = false;
    if (op)
      passivate(*due);
  }
}

} // namespace perdure::detail
