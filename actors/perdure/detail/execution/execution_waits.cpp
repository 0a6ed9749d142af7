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

void execution::arm(std::int64_t due) {
  auto now = now_ms();
  if (due <= now || cancel_observable()) { // a cancelled saga sleeps no more
    resume_recorded();
    return;
  }
  if (host_->may_passivate() && due - now > passivate_after_ms()) {
    passivate(due);
    return;
  }
  // An object's invocation stays, holding its key, however long it sleeps
  // (leaving would give the key up and claim it again, for ever).
  sleeping_seq = op->seq;
  sleeping_due = due;
  op.reset();
  if (due - now <= passivate_after_ms()) // further: until cancelled
    rt->timers->schedule({due, run_id_, sleeping_seq});
}

void execution::check_delivery() {
  if (recording)
    return; // found already
  if (checking_seq == op->seq) {
    check_again = true; // after the one in flight
    return;
  }
  checking_seq = op->seq;
  auto me = mailbox_;
  std::vector<std::int64_t> after;
  for (auto& s : op->sources)
    after.push_back(s.what == wait_source::kind::message ? consumed(s.key) : 0);
  rt->control->post([me, seq = op->seq, sources = op->sources,
                     after = std::move(after), due = op->due_ms, rt = rt,
                     run = run_id_] {
    wait_outcome w;
    bool found = false;
    bool failed = false;
    try {
      if (auto& hooks = rt->cfg.testing; hooks && hooks->wait_checking)
        hooks->wait_checking(run, seq);
      found = rt->stores->with([&](persistence::store& db) {
        for (std::size_t i = 0; i < sources.size(); ++i) {
          if (delivered(db, run, sources[i], after[i], w)) {
            w.index = static_cast<std::int32_t>(i);
            return true;
          }
        }
        return false;
      });
      if (!found && due > 0 && rt->clock->now_ms() >= due) {
        w = wait_outcome{}; // index -1: timed out
        found = true;
      }
    } catch (const std::exception& ex) {
      rt->log().error("perdure: run {} could not check its wait ({}); it "
                      "checks again",
                      run, ex.what());
      found = false;
      failed = true;
    }
    tell(me, wait_checked{seq, failed,
                          found ? std::optional{w.index} : std::nullopt,
                          w.cursor, w.result, std::move(w.payload),
                          std::move(w.error)});
  });
}

bool execution::delivered(persistence::store& db, const std::string& run,
                      const wait_source& s, std::int64_t after,
                      wait_outcome& w) {
  switch (s.what) {
    case wait_source::kind::resolution: {
      auto r = db.get_resolution(s.key);
      if (!r)
        return false;
      w.result = r->result;
      w.payload = std::move(r->payload);
      w.error = std::move(r->error);
      return true;
    }
    case wait_source::kind::message: {
      auto m = db.next_message(run, s.key, after);
      if (!m)
        return false;
      w.cursor = m->id;
      w.payload = std::move(m->payload);
      return true;
    }
    case wait_source::kind::run: {
      auto r = db.get_run(s.key);
      if (!r || !is_terminal(r->status))
        return false;
      if (r->collected_at_ms) {
        // Another tree's run (a fork's custom child id), collected: its
        // outcome is gone.
        w.result = persistence::outcome::terminal;
        w.error = "run '" + s.key + "' ended "
                  + std::string{to_string(r->status)}
                  + " and retention collected it: its outcome is gone";
      } else if (r->status == run_status::success) {
        w.payload = r->output.value_or(std::string{});
      } else {
        w.result = persistence::outcome::terminal;
        // Named as the code made it: a call of a handler, or a child.
        auto what = r->object_type.empty()
                      ? "child workflow '" + s.key + "'"
                      : "call of " + r->object_type + " '" + r->object_key
                          + "' " + r->name;
        w.error = what + " ended " + std::string{to_string(r->status)} + ": "
                  + r->error.value_or("no reason recorded");
      }
      return true;
    }
  }
  return false;
}

void execution::on_found(std::int32_t seq, bool failed, bool found,
              std::int32_t index, std::int64_t cursor, std::int32_t result,
              std::string payload, std::string error) {
  if (seq == checking_seq)
    checking_seq = -1;
  if (!op || op->seq != seq || op->kind != persistence::entry_kind::await
      || passivating || recording)
    return;
  if (failed) {
    // Nothing is known, least of all that nothing was delivered: a run
    // confirming its passivation must not leave on it (a delivery committed
    // before its wake-up time, whose notice was lost, would never wake it).
    // Look again soon; a confirmation stays pending until a read succeeds.
    check_again = false;
    rt->timers->schedule({now_ms() + wait_check_retry_ms, run_id_, seq});
    return;
  }
  if (!found && std::exchange(check_again, false)) {
    check_delivery(); // woken while this check was in flight
    return;
  }
  check_again = false;
  if (confirming) {
    auto p = *std::exchange(confirming, std::nullopt);
    if (!found) {
      leave_or_stay(seq, p.wake_at, p.seen);
      return;
    }
    stay_awake(); // delivered after all: record it below
  }
  if (found && cancel_observable()
      && saga_phase_ == persistence::saga_phase::done) {
    // What it waited for may have ended because of this very cancellation
    // (a child, cancelled with it): the run ends CANCELLED, not on that.
    cancel_operation();
    return;
  }
  if (found) {
    wait_outcome w;
    w.index = index;
    w.cursor = cursor;
    w.payload = std::move(payload);
    auto e = entry_for(seq);
    e.outcome = static_cast<persistence::outcome>(result);
    e.payload = w.encode();
    e.error = std::move(error);
    recording = true; // one record per index, whatever wakes come now
    record(std::move(e));
    return;
  }
  if (cancel_observable()) {
    cancel_operation();
    return;
  }
  // Not yet: a delivery wakes us, or the deadline. Past the threshold,
  // leave memory until then.
  auto now = now_ms();
  auto threshold = passivate_after_ms();
  auto due = op->due_ms;
  if (now - waiting_since >= threshold && (due == 0 || due - now > threshold)) {
    passivate(due == 0 ? passivated_forever : due);
    return;
  }
  // A run that stays in memory (an object's invocation) still reads the
  // store now and then: a wake lost on the way (a dropped notice) must not
  // hold its key forever.
  auto next = host_->may_passivate()
                ? waiting_since + threshold
                : now + rt->cfg.passivate_after.count();
  if (due > 0)
    next = std::min(next, due);
  if (next <= now)
    next = due > 0 ? due : now + threshold;
  rt->timers->schedule({next, run_id_, seq});
}

void execution::on_wake(std::int32_t seq) {
  if (sleeping_seq >= 0) {
    if (seq != sleeping_seq)
      return;
    if (sleeping_due <= now_ms()) {
      sleeping_seq = -1;
      resume_recorded();
    } else { // woken early (the clock moved differently): wait again
      rt->timers->schedule({sleeping_due, run_id_, sleeping_seq});
    }
    return;
  }
  if (!op || passivating || (seq >= 0 && op->seq != seq))
    return;
  if (op->kind == persistence::entry_kind::sleep) {
    // Woken while passivating (it stays): wait again, or, cancelled, not.
    if (auto* e = find_recorded(op->seq))
      arm(persistence::recorded_time(*e));
    else
      arm(op->due_ms);
  } else if (op->kind == persistence::entry_kind::await) {
    check_delivery();
  }
}

} // namespace perdure::detail
