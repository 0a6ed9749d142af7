#include "perdure/detail/execution/execution.hpp"

#include <limits>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "perdure/cancelled_error.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/final_status_error.hpp"
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
#include "perdure/detail/tracing/run_trace.hpp"
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure::detail {

bool outage(errc code) {
  return code == errc::store_unavailable || code == errc::store_full;
}

bool execution::drive(run_message& m, std::optional<step_job>& next) {
  std::lock_guard turn{turn_};
  auto* c = std::get_if<checkpoint_committed>(&m);
  if (left_ || quitting || !c || c->seq != body_seq
      || c->ack != persistence::write_ack::committed)
    return false;
  body_seq = -1;
  inline_next_ = &next;
  try {
    handle(m);
  } catch (const std::exception& ex) {
    rt->log().error("perdure: run {} failed in its execution: {}", run_id_,
                    ex.what());
    crash();
  }
  inline_next_ = nullptr;
  if (left_) {
    next.reset();
    tell(mailbox_, leave_now{});
  }
  return true;
}

void execution::quit_host() {
  if (inline_next_) { // a step thread holds the turn: the host's next one
    left_ = true;
    return;
  }
  host_->quit();
}

void execution::receive(run_message& m) {
  std::lock_guard turn{turn_};
  if (left_) {
    if (std::holds_alternative<leave_now>(m))
      host_->quit();
    return;
  }
  auto replied = body_replied(m);
  if (quitting) { // stopped while a body ran: wait for it, then go
    if (replied)
      host_->quit();
    return;
  }
  try {
    handle(m);
  } catch (const std::exception& ex) {
    // Caught here, not by the host: CAF would end the actor at once, and
    // with it the frame a step body in flight may still use.
    rt->log().error("perdure: run {} actor failed: {}", run_id_, ex.what());
    crash();
  }
}

bool execution::on_exit_request() {
  std::lock_guard turn{turn_};
  if (body_seq < 0)
    return true;
  quitting = true;
  return false;
}

void execution::on_host_failure() {
  std::lock_guard turn{turn_};
  // Not left for the next process start: housekeeping revives it (a run
  // that fails its actor every time ends at max_recovery_attempts).
  rt->run_stopped(run_id_, std::nullopt, epoch);
  rt->runs->orphaned(run_id_, true);
}

execution::execution() = default;

execution::~execution() {
  if (!trace_)
    return;
  if (end_known_)
    trace_->forget(); // no later activation to number
  if (!rt || !rt->cfg.span_sink || !trace_->sampled())
    return;
  // An attempt ends here however it ends: the run's end, passivation, a
  // release, a stop. (A killed process reports nothing: the next
  // attempt's span links to this one.)
  close_op_span(std::nullopt, true);
  auto attrs = std::move(attempt_attributes_);
  attrs.push_back({"perdure.ended", end_known_});
  rt->cfg.span_sink->on_end(
    trace_->attempt_span("run " + log_name_, std::move(attrs), end_error_));
}

namespace {

/// Whether a live operation of `kind` gets a span of its own (a patch
/// marker, a deadline or an awakeable's creation is bookkeeping).
bool traced(persistence::entry_kind kind) {
  using k = persistence::entry_kind;
  switch (kind) {
    case k::step:
    case k::transaction:
    case k::child:
    case k::sleep:
    case k::await:
    case k::send:
    case k::event:
    case k::resolve:
      return true;
    default:
      return false;
  }
}

} // namespace

void execution::open_op_span() {
  if (!rt->cfg.span_sink || !trace_->sampled() || !traced(op->kind)
      || find_recorded(op->seq))
    return; // replayed: it ran before, and reported then
  close_op_span(std::nullopt, true);
  op_span_seq_ = op->seq;
  op_span_start_ = telemetry::now_ns();
  using k = persistence::entry_kind;
  auto compensating = saga_phase_ == persistence::saga_phase::compensating;
  switch (op->kind) {
    case k::step:
    case k::transaction:
      op_span_name_ = (compensating ? "compensate " : "step ") + op->name;
      break;
    case k::child:
      op_span_name_ = op->object_type.empty()
                        ? "start " + op->child_workflow
                        : "call " + op->object_type + "/" + op->child_workflow;
      break;
    case k::sleep:
      op_span_name_ = "sleep";
      break;
    case k::await:
      op_span_name_ = "wait";
      break;
    default:
      op_span_name_ = std::string{to_string(op->kind)} + " " + op->name;
  }
}

void execution::close_op_span(std::optional<std::string> error,
                              bool interrupted) {
  if (op_span_seq_ < 0)
    return;
  auto seq = std::exchange(op_span_seq_, -1);
  // The run's id, workflow and version are its attempt span's (the
  // parent): an operation's span carries only its own, a fifth of an
  // exported span's bytes and an allocation less per step.
  std::vector<telemetry::attribute> attrs{
    {"perdure.journal_index", std::int64_t{seq}},
  };
  if (attempt > 1)
    attrs.push_back({"perdure.attempts", std::int64_t{attempt}});
  if (interrupted) // the attempt ended first (passivation, stop, release)
    attrs.push_back({"perdure.interrupted", true});
  rt->cfg.span_sink->on_end(trace_->operation_span(
    seq, std::move(op_span_name_), op_span_start_, std::move(attrs),
    std::move(error)));
}

void execution::init(execution_host& host, mailbox box, runtime_services& r,
                     persistence::run_record run,
                     std::vector<persistence::journal_entry> journal) {
  host_ = &host;
  mailbox_ = std::move(box);
  rt = &r;
  trace_ = std::make_unique<run_trace>(run, rt->cfg.span_sink != nullptr);
  if (rt->cfg.span_sink) {
    auto& a = attempt_attributes_;
    a.push_back({"perdure.run_id", run.id});
    a.push_back({"perdure.workflow", run.name});
    if (!run.object_type.empty()) {
      a.push_back({"perdure.object.type", run.object_type});
      a.push_back({"perdure.object.key", run.object_key});
    }
    if (!run.queue_name.empty())
      a.push_back({"perdure.queue", run.queue_name});
    a.push_back({"perdure.epoch", run.owner.epoch});
    a.push_back({"perdure.recovery_attempts",
                 std::int64_t{run.recovery_attempts}});
    a.push_back({"perdure.executor", rt->cfg.executor_id});
    if (!rt->cfg.app_version.empty())
      a.push_back({"perdure.app_version", rt->cfg.app_version});
  }
  run_id_ = std::move(run.id);
  epoch = run.owner.epoch;
  if (run.parent_id)
    parent_id = std::make_unique<std::string>(std::move(*run.parent_id));
  if (!run.call_chain.empty())
    call_chain = std::make_unique<std::string>(std::move(run.call_chain));
  cancel_requested_ = run.cancel_requested;
  steps_ = rt->steps;
  if (!run.queue_name.empty()) {
    if (rt->queues)
      if (auto* pool = rt->queues->steps_for(run.queue_name))
        steps_ = pool;
    item_ = std::make_unique<queue_item>(
      queue_item{std::move(run.queue_name), run.attempts});
  }
  log_name_ = run.object_type.empty() ? run.name
                                      : run.object_type + "/" + run.name;
  if (rt->cfg.metrics) {
    series_ = &rt->metrics.of(run.name, run.object_type);
    created_at_ms_ = run.created_at_ms;
    // Started from its beginning here: not a run recovered or taken over,
    // nor a queue item's later attempt (its journal holds the failure).
    if (journal.empty() && run.recovery_attempts == 0)
      series_->started.add();
  }
  pending_start = std::make_unique<start_info>(
    start_info{std::move(run.name), std::move(run.inputs)});
  encoding_ = rt->cfg.payload_encoding;
  max_payload_ = rt->cfg.max_payload_bytes;
  load_journal(std::move(journal));
  send_signal(mailbox_, run_signal::start, 0);
}

void execution::perform(operation next, std::coroutine_handle<> h) {
  if (fatal_) {
    // The code caught the non-determinism error and went on: stop here.
    abandoned = true;
    return;
  }
  op = std::make_unique<operation>(std::move(next));
  waiting = h;
  attempt = 0;
  recording = false;
  check_again = false;
  // A saga asked to cancel observes it here, at its next operation (its
  // end included), but not at the start of its compensations.
  if (cancel_observable() && !find_recorded(op->seq)
      && op->kind != persistence::entry_kind::patch // the next one observes
      && !(op->kind == persistence::entry_kind::phase
           && op->payload == persistence::saga_phase::compensating)) {
    if (op->kind == persistence::entry_kind::sleep
        && saga_phase_ != persistence::saga_phase::done)
      op->due_ms = now_ms(); // recorded, due now: the next one observes
    else
      return cancel_operation();
  }
  if (op->kind == persistence::entry_kind::transaction
      && !find_recorded(op->seq)) {
    // Committed by an earlier attempt of this item: its result, recorded
    // here, instead of a second commit.
    if (auto e = take_carried(op->name)) {
      e->run_id = run_id_;
      e->seq = op->seq;
      record(std::move(*e));
      return;
    }
  }
  // Past the cancellation and the carried result: the operation runs.
  open_op_span();
  switch (op->kind) {
    case persistence::entry_kind::step:
    case persistence::entry_kind::transaction:
      dispatch();
      return;
    case persistence::entry_kind::awakeable:
      // Nothing to run: the creation itself is what becomes durable.
      record(entry_for(op->seq));
      return;
    case persistence::entry_kind::deadline: {
      auto e = entry_for(op->seq);
      e.payload = std::to_string(op->due_ms);
      record(std::move(e));
      return;
    }
    case persistence::entry_kind::child:
      start_child();
      return;
    case persistence::entry_kind::event:
    case persistence::entry_kind::phase:
    case persistence::entry_kind::send:
    case persistence::entry_kind::resolve:
      dispatch();
      return;
    case persistence::entry_kind::sleep:
      if (auto* r = find_recorded(op->seq)) {
        arm(persistence::recorded_time(*r)); // replay: sleep what remains
      } else {
        auto e = entry_for(op->seq);
        e.payload = std::to_string(op->due_ms);
        record(std::move(e));
      }
      return;
    case persistence::entry_kind::await:
      waiting_since = now_ms();
      check_delivery();
      return;
    case persistence::entry_kind::patch: {
      auto e = entry_for(op->seq); // its marker (see run_core::patched)
      e.payload = op->payload;
      record(std::move(e));
      return;
    }
  }
}

persistence::fence execution::owner() const {
  return {rt->cfg.executor_id, epoch};
}

std::int64_t execution::now_ms() const {
  return rt->clock->now_ms();
}

void execution::record(persistence::journal_entry e) {
  e.created_at_ms = detail::now_ms();
  checkpoint(*rt->writer, mailbox_, owner(),
             std::move(e));
}

bool execution::declares_patch(const std::string& name) const {
  if (!declared_patches_)
    return false;
  auto& known = *declared_patches_;
  return std::find(known.begin(), known.end(), name) != known.end();
}

const std::string* execution::unknown_patch() const {
  if (patches_)
    for (auto& [patch, before] : *patches_)
      if (!declares_patch(patch))
        return &patch;
  return nullptr;
}

void execution::resume_recorded() {
  close_op_span(std::nullopt);
  op.reset();
  auto h = std::exchange(waiting, {});
  h.resume();
  after_resume();
}

void execution::on_cancel(bool ended) {
  if (ended) {
    // The canceller committed the end; waiters read it from the store, not
    // from here (the run may be resumed before this actor stops).
    rt->log().info("perdure: run {} cancelled", run_id_);
    count_end(run_status::cancelled);
    rt->queue_item_released(run_id_);
    wake_parent();
    stop(std::nullopt);
    return;
  }
  if (saga_phase_ == persistence::saga_phase::compensating) {
    rt->log().info("perdure: saga {} is {}: the cancellation changes nothing",
                   run_id_, saga_phase_);
    return;
  }
  rt->log().info("perdure: saga {} asked to cancel", run_id_);
  cancel_requested_ = true;
  interrupt();
}

bool execution::cancel_observable() const {
  // A saga whose body returned (DONE) keeps its effects; at the next
  // durable operation of the code after it (or at once while it waits) the
  // run ends CANCELLED, as an ordinary run does (see on_durable); if
  // nothing follows, it ends as its code returned.
  return cancel_requested_
         && (saga_phase_ == persistence::saga_phase::forward
             || saga_phase_ == persistence::saga_phase::done)
         && cancel_shields_ == 0;
}

void execution::interrupt() {
  if (!cancel_observable())
    return;
  if (sleeping_seq >= 0) { // cut short; the next operation observes it
    sleeping_seq = -1;
    resume_recorded();
    return;
  }
  // A wait with a check, a record or a passivation in flight: their
  // answer observes it (see on_found).
  if (op && op->kind == persistence::entry_kind::await && !recording
      && checking_seq != op->seq && !passivating && !confirming)
    cancel_operation();
}

void execution::cancel_operation() {
  tell(mailbox_, checkpoint_committed{op->seq, persistence::outcome::cancelled,
                                      persistence::write_ack::committed, {},
                                      "cancelled"});
}

void execution::phase_entered(const std::string& phase) {
  saga_phase_ = phase;
  // Maybe on a step thread (see drive): the host changes on its own turn.
  if (phase == persistence::saga_phase::compensating)
    send_signal(mailbox_, run_signal::compensating, 0);
}

void execution::on_outcome(std::int32_t seq, persistence::outcome kind,
                std::string payload, std::string error, bool checkpointed) {
  if (!op || op->seq != seq)
    return;
  if (kind == persistence::outcome::failed
      && attempt < op->policy.max_attempts) {
    rt->log().debug("perdure: run {} step '{}' attempt {} failed: {}", run_id_,
                  op->name, attempt, error);
    mailbox_->tell_later(retry_delay(), signalled{run_signal::retry, seq});
    return;
  }
  auto e = entry_for(seq);
  e.outcome = kind;
  e.payload = std::move(payload);
  e.error = persistence::valid_text(error);
  e.created_at_ms = now_ms();
  if (checkpointed)
    resume_with(std::move(e));
  else
    checkpoint(*rt->writer, mailbox_, owner(),
               std::move(e));
}

persistence::journal_entry execution::entry_for(std::int32_t seq) const {
  persistence::journal_entry e;
  e.run_id = run_id_;
  e.seq = seq;
  e.kind = op->kind;
  e.name = op->name;
  return e;
}

void execution::on_durable(std::int32_t seq, std::int32_t ack, std::int32_t result,
                std::string payload, std::string error) {
  if (!op || op->seq != seq || !write_committed(ack, "its checkpoint"))
    return;
  if (static_cast<persistence::outcome>(result) == persistence::outcome::cancelled
      && recording)
    return; // a wait's outcome is being recorded: it wins, live as on replay
  if (static_cast<persistence::outcome>(result) == persistence::outcome::cancelled
      && saga_phase_ == persistence::saga_phase::done) {
    // Code after a saga that is done never sees the cancellation (it could
    // catch it and go on for ever): the run ends CANCELLED here, as the
    // store ends an ordinary run.
    cancelled_end_ = std::make_unique<std::string>(std::move(error));
    abandoned = true;
    finish();
    return;
  }
  if (auto& hooks = rt->cfg.testing;
      hooks && hooks->checkpoint_committed
      && static_cast<persistence::outcome>(result)
           != persistence::outcome::cancelled)
    hooks->checkpoint_committed(run_id_, seq);
  auto e = entry_for(seq);
  e.outcome = static_cast<persistence::outcome>(result);
  e.payload = std::move(payload);
  e.error = std::move(error);
  if (op->kind == persistence::entry_kind::sleep) {
    // The wake-up time is durable (ours, or one recorded before): wait.
    if (e.outcome == persistence::outcome::value)
      op->due_ms = persistence::recorded_time(e); // for a re-arm (on_wake)
    arm(op->due_ms);
    return;
  }
  resume_with(std::move(e));
}

void execution::on_retry(std::int32_t seq) {
  // A plain step's failed attempt wrote nothing: no attempt after a
  // cancellation. Anything else may have committed an attempt whose
  // answer was lost: dispatched again, it returns what stands, and the next
  // operation observes the cancellation.
  if (op && op->seq == seq && op->kind == persistence::entry_kind::step
      && cancel_observable()) {
    cancel_operation();
    return;
  }
  if (op && op->seq == seq) {
    if (op->kind == persistence::entry_kind::child)
      start_child();
    else
      dispatch();
  }
}

bool execution::write_committed(std::int32_t ack, const char* what) {
  switch (static_cast<persistence::write_ack>(ack)) {
    case persistence::write_ack::committed:
      return true;
    case persistence::write_ack::rejected:
      lost_ownership();
      return false;
    case persistence::write_ack::failed:
      rt->log().error("perdure: run {} stops: {} could not be written; it "
                    "is revived when the store answers again",
                    run_id_, what);
      restart();
      return false;
    case persistence::write_ack::superseded:
      return true; // the sender substituted the recorded outcome
  }
  return false;
}

void execution::lost_ownership() {
  // A write is refused when another process owns the run now (a fence),
  // or when a client cancelled it (its row ended at this epoch) and the
  // write came before the cancel's notice: told apart from the row, off
  // this thread, so a bulk cancel neither counts as fenced writes nor
  // logs "owned elsewhere". On a step thread, not the one control thread
  // (a lease loss or a bulk cancel refuses many runs' writes at once).
  steps_->post([rt = rt, id = run_id_, epoch = epoch,
                uncounted = series_ != nullptr && !end_known_,
                reporting = rt->cfg.span_sink != nullptr] {
    std::optional<persistence::run_record> run;
    try {
      run = rt->stores->with(
        [&](persistence::store& db) { return db.get_run(id); });
    } catch (const std::exception&) {
      // Unknown: counted as the fence it most often is.
    }
    if (run && run->status == run_status::cancelled
        && (!run->object_type.empty() || run->owner.epoch == epoch)) {
      rt->log().info("perdure: run {} cancelled", id);
      if (reporting) // it ended: no later activation to number
        run_trace::forget(id);
      if (uncounted) // its end, which this execution did not count
        rt->metrics.ended_without_execution(*run, run_status::cancelled,
                                            detail::now_ms());
      return;
    }
    rt->metrics.fenced_writes.add();
    rt->lease->report_fenced(id);
  });
  rt->fenced_from(run_id_, epoch);
  stop(std::nullopt);
}

void execution::resume_with(persistence::journal_entry e) {
  if (op_span_seq_ >= 0)
    close_op_span(e.outcome == persistence::outcome::value
                    ? std::nullopt
                    : std::optional<std::string>{e.error});
  std::string{}.swap(e.run_id);
  record_outcome(std::move(e));
  op.reset();
  auto h = std::exchange(waiting, {});
  h.resume();
  after_resume();
}

void execution::after_resume() {
  if (abandoned || !driver || driver->done())
    finish();
}

bool execution::body_replied(const run_message& m) {
  auto seq = std::visit(
    [](const auto& x) -> std::int32_t {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, attempt_ended>
                    || std::is_same_v<T, checkpoint_committed>)
        return x.seq;
      if constexpr (std::is_same_v<T, signalled>)
        if (x.kind == run_signal::fenced || x.kind == run_signal::drop
            || x.kind == run_signal::restart)
          return x.seq;
      return -1;
    },
    m);
  if (body_seq < 0 || seq != body_seq)
    return false;
  body_seq = -1;
  return true;
}

void execution::start_code() {
  auto start = std::move(pending_start);
  if (fatal_) { // a journal row that cannot be read: this run alone fails
    rt->log().error("perdure: run {} cannot be replayed: {}", run_id_, *fatal_);
    abandoned = true;
    finish();
    return;
  }
  if (auto code = host_->start_code(*this, start->name, start->inputs,
                                    encoding_, declared_patches_)) {
    start_handler(std::move(code));
    return;
  }
  auto i = rt->workflows.find(start->name);
  if (i == rt->workflows.end()) {
    fatal_ = std::make_unique<std::string>("unknown workflow '" + start->name
                                           + "'");
    abandoned = true;
    finish();
    return;
  }
  declared_patches_ = &i->second.patches;
  if (auto* patch = unknown_patch(); patch && !item_) {
    release(*patch);
    return;
  }
  ctx.emplace(*this);
  driver = i->second.start(*ctx, std::move(start->inputs), encoding_);
  driver->start();
  after_resume();
}

void execution::start_handler(std::unique_ptr<run_driver> code) {
  driver = std::move(code);
  driver->start();
  after_resume();
}

void execution::handle(run_message& message) {
  struct visitor {
    execution& st;
    void operator()(signalled& m) {
      switch (m.kind) {
        case run_signal::start: st.start_code(); break;
        case run_signal::retry: st.on_retry(m.seq); break;
        case run_signal::fenced: st.lost_ownership(); break;
        case run_signal::wake: st.on_wake(m.seq); break;
        case run_signal::cancel: st.on_cancel(m.seq == 0); break;
        case run_signal::compensating: st.host_->compensating(); break;
        case run_signal::ended: st.on_ended(m.seq); break;
        case run_signal::restart: st.restart(); break;
        case run_signal::drop: st.stop(std::nullopt); break;
      }
    }
    void operator()(attempt_ended& m) {
      st.on_outcome(m.seq, m.result, std::move(m.payload),
                    std::move(m.error), m.checkpointed);
    }
    void operator()(checkpoint_committed& m) {
      st.on_durable(m.seq, static_cast<std::int32_t>(m.ack),
                    static_cast<std::int32_t>(m.result), std::move(m.payload),
                    std::move(m.error));
    }
    void operator()(wait_checked& m) {
      st.on_found(m.seq, m.failed, m.index.has_value(), m.index.value_or(-1), m.cursor,
                  static_cast<std::int32_t>(m.result), std::move(m.payload),
                  std::move(m.error));
    }
    void operator()(passivation_written& m) {
      st.on_passive(m.seq, m.ok, m.wake_at, m.wakes_seen);
    }
    void operator()(awake_recorded&) {
      st.on_awake();
    }
    void operator()(leave_now&) {
    }
  };
  std::visit(visitor{*this}, message);
}

} // namespace perdure::detail
