#include "perdure/detail/execution/execution.hpp"

#include "perdure/detail/tracing/run_trace.hpp"

#include <chrono>
#include <random>

#include <spdlog/spdlog.h>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/delivery/notice_router.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/lease/lease_service.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure::detail {

/// The transactional step whose body runs on this thread (read by
/// `execution::logger`, execution_steps.cpp).
thread_local const persistence::journal_entry* running_transaction = nullptr;

namespace {

/// A checkpoint with a write of its own (a transactional step, an event, a
/// saga phase), on an executor thread: the write and its checkpoint in
/// one transaction, the outcome sent to the execution.
void write_checkpoint(const mailbox& me, std::int32_t seq,
                      const persistence::journal_entry& checkpoint,
                      const persistence::fence& fence,
                      const transaction_body& body,
                      persistence::entry_kind kind, bool own_row,
                      runtime_services* rt,
                      const telemetry::span_context& span,
                      workflow_series* series, bool last_attempt) {
  // A transactional step counts as a step (an event's or a phase's row
  // does not: `series` is null for them), once its body ran; its time is
  // the body's, as a step's is (not the connection's wait or the commit).
  auto body_ran = false;
  std::chrono::steady_clock::duration body_time{};
  auto count = [&](persistence::outcome o) {
    if (!series || !body_ran)
      return;
    series->step_seconds.observe(
      std::chrono::duration<double>(body_time).count());
    if (o == persistence::outcome::value)
      series->steps_ok.add();
    else if (o == persistence::outcome::failed && !last_attempt)
      series->step_retries.add();
    else
      series->steps_failed.add();
  };
  auto is_event = kind == persistence::entry_kind::event
                  || kind == persistence::entry_kind::phase;
  auto send_failure = [&](persistence::outcome o, const char* what) {
    count(o);
    send_outcome(me, seq, o, {}, what, false);
  };
  if (!rt->runs->owns(checkpoint.run_id, fence.epoch)) {
    send_signal(me, run_signal::drop, seq);
    return;
  }
  try {
    auto& pool = own_row ? *rt->stores : *rt->tx_stores;
    auto recorded = pool.with([&](persistence::store& db) {
      if (kind == persistence::entry_kind::phase)
        return db.record_phase(fence, checkpoint, checkpoint.payload);
      if (is_event) // Perdure's own row, with its checkpoint
        return db.record_event(fence, checkpoint, checkpoint.name,
                               checkpoint.payload);
      return db.run_transaction(fence, checkpoint, [&](sql_session& s) {
        body_ran = true;
        struct in_body { // for ctx.log() in the body (execution::logger)
          explicit in_body(const persistence::journal_entry& e)
            : outer(running_transaction) {
            running_transaction = &e;
          }
          ~in_body() { running_transaction = outer; }
          const persistence::journal_entry* outer;
        } body_scope{checkpoint};
        // What the body stages or starts joins the operation's span.
        current_span_scope span_scope{span};
        auto began = std::chrono::steady_clock::now();
        struct timed { // however the body ends
          std::chrono::steady_clock::time_point began;
          std::chrono::steady_clock::duration& into;
          ~timed() { into = std::chrono::steady_clock::now() - began; }
        } timing{began, body_time};
        return body(s);
      });
    });
    if (!recorded) {
      send_signal(me, run_signal::fenced, seq);
      return;
    }
    // As recorded: an outcome an earlier attempt committed stands.
    auto& e = *recorded;
    count(e.outcome); // (not one an earlier attempt committed: no body ran)
    if (kind == persistence::entry_kind::event
        && e.outcome == persistence::outcome::value)
      e.payload.clear(); // the event's value is no result
    send_outcome(me, seq, e.outcome, std::move(e.payload),
                 std::move(e.error), true);
  } catch (const perdure::error& ex) {
    // A store that could not be reached before the user's SQL ran
    // restarts the run (no attempt spent). Once the body ran, an
    // outage-like failure spends an attempt: the user's SQL can fail in
    // ways that look like one (a deadlock every time, an idle-session
    // timeout), and its retry policy must bound them.
    if (outage(ex.code()) && !body_ran)
      send_signal(me, run_signal::restart, seq);
    else
      send_failure(persistence::outcome::failed, ex.what());
  } catch (const terminal_error& ex) {
    send_failure(persistence::outcome::terminal, ex.what());
  } catch (const std::exception& ex) {
    send_failure(persistence::outcome::failed, ex.what());
  } catch (...) {
    send_failure(persistence::outcome::failed, "unknown exception");
  }
}

} // namespace

void execution::dispatch() {
  ++attempt;
  auto seq = op->seq;
  if (op->kind == persistence::entry_kind::step
      || op->kind == persistence::entry_kind::transaction)
    body_seq = seq;
  if (op->kind == persistence::entry_kind::step) {
    dispatch_step(seq);
    return;
  }
  if (op->delivery) {
    deliver();
    return;
  }
  auto checkpoint = entry_for(seq);
  checkpoint.created_at_ms = now_ms();
  auto kind = op->kind;
  if (kind == persistence::entry_kind::event
      || kind == persistence::entry_kind::phase)
    checkpoint.payload = op->payload;
  // A transaction runs user SQL (step executor); an event is the
  // runtime's own row (control executor). A saga's phase is too, but two
  // of them per saga would serialise every saga's commits on the one
  // control thread: they share the step threads and their connections
  // (concurrent commits share WAL flushes).
  auto own_row = kind == persistence::entry_kind::event;
  auto& executor = own_row ? *rt->control : *steps_;
  executor.post([me = mailbox_, seq, checkpoint, fence = owner(),
                 body = op->tx_body, kind, own_row, rt = rt,
                 span = trace_->operation(seq),
                 series = kind == persistence::entry_kind::transaction
                            ? series_
                            : nullptr,
                 last_attempt = attempt >= op->policy.max_attempts] {
    write_checkpoint(me, seq, checkpoint, fence, body, kind, own_row, rt,
                     span, series, last_attempt);
  });
}

void execution::dispatch_step(std::int32_t seq) {
  // The step thread hands a final outcome straight to the journal writer;
  // the ack comes back to the host, or, if the step thread committed it
  // itself, the step thread goes on (see `run_steps`).
  auto last_attempt = attempt >= op->policy.max_attempts;
  step_job job{mailbox_, this,    seq,            last_attempt,
               op->body, owner(), entry_for(seq), rt, attempt};
  if (inline_next_ && !steps_->has_queued_jobs()) {
    // On the step thread that ran the last one, which goes on with it,
    // unless other runs' steps wait for a thread (they go first: FIFO).
    *inline_next_ = std::move(job);
    return;
  }
  steps_->post([job = std::move(job)]() mutable {
    run_steps(std::move(job));
  });
}

void execution::deliver() {
  auto me = mailbox_;
  auto seq = op->seq;
  auto checkpoint = entry_for(seq);
  checkpoint.created_at_ms = detail::now_ms();
  rt->control->post([me, seq, checkpoint = std::move(checkpoint),
                     fence = owner(), d = op->delivery, rt = rt] {
    try {
      auto recorded = rt->stores->with([&](persistence::store& db) {
        return db.deliver(fence, checkpoint, *d);
      });
      if (!recorded) {
        send_signal(me, run_signal::fenced, seq);
        return;
      }
      if (recorded->outcome == persistence::outcome::value) {
        rt->launcher->wake(d->run_id(), -1);
        rt->notices->announce(persistence::notice::woken(d->run_id()));
      }
      send_outcome(me, seq, recorded->outcome, {}, recorded->error, true);
    } catch (const perdure::error& ex) {
      if (outage(ex.code()))
        send_signal(me, run_signal::restart, seq);
      else
        send_outcome(me, seq, persistence::outcome::failed, {}, ex.what(),
                     false);
    } catch (const std::exception& ex) {
      send_outcome(me, seq, persistence::outcome::failed, {}, ex.what(),
                   false);
    }
  });
}

void execution::start_child() {
  if (!op->object_type.empty()) {
    start_call();
    return;
  }
  ++attempt;
  persistence::run_record child;
  child.id = op->name;
  child.name = op->child_workflow;
  child.inputs = op->payload;
  child.owner = {rt->cfg.executor_id, 1};
  child.app_version = rt->cfg.app_version;
  child.created_at_ms = detail::now_ms();
  child.parent_id = run_id_;
  // The chain of held keys goes on through child workflows (a handler
  // waiting for a child that calls it back would wait for itself).
  child.call_chain = callee_chain(true);
  child.traceparent = trace_->operation(op->seq).traceparent();
  child.undo_of = op->undo_of;
  auto undo = !child.undo_of.empty();
  auto me = mailbox_;
  rt->control->post([me, seq = op->seq, child = std::move(child), rt = rt,
                     fence = owner(), undo]() mutable {
    if (rt->workflows.count(child.name) == 0)
      return send_outcome(me, seq, persistence::outcome::terminal, {},
                          "no workflow registered as '" + child.name + "'",
                          false);
    create_child_run(
      *rt, me, seq, fence, std::move(child),
      [rt, undo](persistence::run_record& created) {
        if (undo) // with the journal it was given; no actor yet
          rt->launcher->revive(created.id, run_launcher::revival::lost);
        else
          rt->launcher->spawn_run(std::move(created), {});
      },
      [rt](const persistence::run_record& again) {
        // Ours from before a crash: make sure it runs (at a new epoch).
        rt->launcher->revive(again.id, run_launcher::revival::lost);
      });
  });
}

void execution::create_child_run(
  runtime_services& rt, const mailbox& me, std::int32_t seq,
  const persistence::fence& fence, persistence::run_record child,
  const std::function<void(persistence::run_record&)>& start,
  const std::function<void(const persistence::run_record&)>& again) {
  auto report = [&](persistence::outcome o, std::string error) {
    send_outcome(me, seq, o, {}, std::move(error), false);
  };
  if (!persistence::is_valid_name(child.id))
    return report(persistence::outcome::terminal,
                  "child ids must be 1 to 255 bytes of UTF-8 without NUL");
  try {
    auto result = rt.stores->with(
      [&](persistence::store& db) { return db.create_child(fence, child); });
    if (!result) {
      send_signal(me, run_signal::fenced, seq);
      return;
    }
    if (result->created) {
      start(result->run);
    } else if (result->run.name != child.name
               // An undo run takes the undone run's inputs when created.
               || (child.undo_of.empty() && result->run.inputs != child.inputs)
               || result->run.parent_id != child.parent_id) {
      return report(persistence::outcome::terminal,
                    "child id '" + child.id + "' already names another run");
    } else {
      again(result->run);
    }
    report(persistence::outcome::value, {});
  } catch (const perdure::error& ex) {
    if (outage(ex.code()))
      send_signal(me, run_signal::restart, seq);
    else
      report(persistence::outcome::failed, ex.what());
  } catch (const std::exception& ex) {
    report(persistence::outcome::failed, ex.what());
  }
}

std::chrono::milliseconds execution::retry_delay() const {
  auto& p = op->policy;
  double ms = static_cast<double>(p.initial_delay.count());
  for (int i = 1; i < attempt; ++i)
    ms *= p.backoff;
  ms = std::min(ms, static_cast<double>(p.max_delay.count()));
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter{ms / 2, ms};
  return std::chrono::milliseconds{static_cast<long>(jitter(rng))};
}

} // namespace perdure::detail
