// A run's steps on a step thread: the body, then its checkpoint, whose
// ack the thread waits for itself when it committed it (no hop through the
// host), then the next step the execution hands back.

#include "perdure/detail/execution/execution.hpp"

#include "perdure/detail/tracing/run_trace.hpp"

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
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure::detail {

namespace {

/// A step thread's own checkpoint, whose ack it waits for on its stack
/// (see `execution::run_steps`).
struct direct_reply {
  const execution_mailbox* box;
  std::int32_t seq;
  std::optional<run_message>* reply;
};

thread_local direct_reply* awaited_reply = nullptr;

/// Hands `m` to the step thread waiting for it, if this is that thread;
/// otherwise to the execution's host.
void answer(const mailbox& me, std::int32_t seq, run_message m) {
  if (auto* d = awaited_reply; d && d->box == me.get() && d->seq == seq) {
    *d->reply = std::move(m);
    return;
  }
  tell(me, std::move(m));
}

} // namespace

void checkpoint(persistence::journal_writer& writer, const mailbox& me,
                persistence::fence owner, persistence::journal_entry e,
                bool on_step_thread) {
  auto seq = e.seq;
  auto result = e.outcome;
  auto payload = e.payload; // the actor needs it after the commit
  auto error = e.error;
  writer.append({std::move(owner), std::move(e)},
                [me, seq, result, payload = std::move(payload),
                 error = std::move(error)](persistence::write_result r) {
                  if (r.ack == persistence::write_ack::superseded) {
                    // The index holds another outcome (recorded by an
                    // attempt whose commit was in doubt): it stands, live
                    // as on replay.
                    auto& e = *r.recorded;
                    answer(me, seq,
                           checkpoint_committed{
                             seq, e.outcome, persistence::write_ack::committed,
                             std::move(e.payload), std::move(e.error)});
                    return;
                  }
                  answer(me, seq,
                         checkpoint_committed{seq, result, r.ack, payload,
                                              error});
                },
                on_step_thread);
}

namespace {

/// The step whose body runs on this thread (for `ctx.log()` called in it).
thread_local const step_job* running_step = nullptr;

} // namespace

// The transactional step whose body runs on this thread (see
// write_checkpoint, execution_operations.cpp).
extern thread_local const persistence::journal_entry* running_transaction;

run_logger execution::logger() {
  std::string tags = "run=" + run_id_ + " workflow=" + log_name_;
  if (auto* j = running_step; j && j->exec == this) {
    // In a step's body: live by definition (bodies never replay).
    tags += " step=" + std::to_string(j->seq) + " (" + j->proto.name
            + ") attempt=" + std::to_string(j->attempt);
  } else if (auto* t = running_transaction; t && t->run_id == run_id_) {
    // In a transaction's body, on a step thread: live, and the journal
    // is the actor's to read, not this thread's.
    tags += " step=" + std::to_string(t->seq) + " (" + t->name + ")";
  } else {
    if (find_recorded(peek_seq()) != nullptr)
      return {nullptr, {}}; // replaying
    tags += " step=" + std::to_string(peek_seq())
            + " attempt=" + std::to_string(epoch);
  }
  tags += " executor=" + rt->cfg.executor_id;
  if (!rt->cfg.app_version.empty())
    tags += " version=" + rt->cfg.app_version;
  tags += " trace_id=" + trace_->trace_hex();
  return {&rt->log(), std::move(tags)};
}

void execution::run_steps(step_job j) {
  for (;;) {
    // Right before the body: a process that lost the run to another one,
    // or is stopping (stop() empties the active runs), runs none of its
    // steps any more.
    if (!j.rt->lease->may_run_step(j.proto.run_id, j.fence.epoch, j.seq)) {
      send_signal(j.me, run_signal::drop, j.seq);
      return;
    }
    j.rt->log().debug("perdure: run {} step {} runs at epoch {}",
                      j.proto.run_id, j.seq, j.fence.epoch);
    step_outcome out;
    {
      // Whatever leaves the body, a newer copy waiting for it goes on.
      struct body_done {
        step_job& j;
        ~body_done() { j.rt->lease->step_body_done(j.proto.run_id, j.seq); }
      } done{j};
      if (auto& hooks = j.rt->cfg.testing; hooks && hooks->step_starting)
        hooks->step_starting(j.proto.run_id, j.seq);
      auto began = std::chrono::steady_clock::now();
      struct in_body {
        explicit in_body(const step_job& j) : outer(running_step) {
          running_step = &j;
        }
        ~in_body() { running_step = outer; }
        const step_job* outer;
      } body_scope{j};
      // What the body starts, calls or enqueues joins the step's span.
      current_span_scope span_scope{j.exec->trace_->operation(j.seq)};
      out = j.body(); // catches what the user's code throws
      if (auto* series = j.exec->series_) {
        series->step_seconds.observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now()
                                        - began)
            .count());
        if (out.result == persistence::outcome::value)
          series->steps_ok.add();
        else if (out.result == persistence::outcome::failed
                 && !j.last_attempt)
          series->step_retries.add();
        else // its last attempt, or a terminal error
          series->steps_failed.add();
      }
    }
    if (out.result == persistence::outcome::failed && !j.last_attempt) {
      // Attempts left: the host schedules the retry.
      send_outcome(j.me, j.seq, out.result, std::move(out.payload),
                   std::move(out.error), false);
      return;
    }
    auto e = std::move(j.proto);
    e.outcome = out.result;
    e.payload = std::move(out.payload);
    e.error = persistence::valid_text(out.error);
    e.created_at_ms = detail::now_ms();
    // A step thread may block: it commits itself if a writer connection is
    // idle, and then the ack comes back here, not to the host.
    std::optional<run_message> reply;
    direct_reply awaiting{j.me.get(), j.seq, &reply};
    awaited_reply = &awaiting;
    checkpoint(*j.rt->writer, j.me, std::move(j.fence), std::move(e), true);
    awaited_reply = nullptr;
    if (!reply)
      return; // a writer thread committed it: the ack went to the host
    std::optional<step_job> next;
    if (!j.exec->drive(*reply, next)) {
      tell(j.me, std::move(*reply));
      return;
    }
    if (!next)
      return;
    j = std::move(*next);
  }
}

} // namespace perdure::detail
