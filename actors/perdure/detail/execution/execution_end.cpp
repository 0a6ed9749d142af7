// How an execution ends: its final status written, a queue item put back
// for another attempt, the actor told to stop, restart or crash.

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
#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure::detail {

void execution::finish() {
  auto terminal = false;
  persistence::completion_write c;
  c.run_id = run_id_;
  c.owner = owner();
  c.at_ms = now_ms();
  if (fatal_ && diverged_ && may_block()) {
    block(*fatal_);
    return;
  }
  if (fatal_) {
    c.status = run_status::error;
    c.error = *fatal_;
  } else if (cancelled_end_) {
    c.status = run_status::cancelled;
    c.error = cancelled_end_->empty() ? std::string{"cancelled"}
                                      : *cancelled_end_;
  } else {
    try {
      auto out = driver->take_result();
      if (out.size() > max_payload_) {
        c.status = run_status::error;
        c.error = "output of " + std::to_string(out.size())
                  + " bytes exceeds the limit of "
                  + std::to_string(max_payload_);
      } else {
        c.status = run_status::success;
        c.output = std::move(out);
      }
    } catch (const final_status_error& ex) {
      c.status = is_terminal(ex.status()) ? ex.status() : run_status::error;
      c.error = persistence::valid_text(ex.what());
    } catch (const cancelled_error& ex) {
      c.status = run_status::cancelled;
      c.error = persistence::valid_text(ex.what());
    } catch (const terminal_error& ex) {
      c.status = run_status::error;
      c.error = persistence::valid_text(ex.what());
      terminal = true;
    } catch (const std::exception& ex) {
      c.status = run_status::error;
      c.error = persistence::valid_text(ex.what());
    } catch (...) {
      c.status = run_status::error;
      c.error = "unknown exception";
    }
  }
  driver.reset();
  if (item_ && c.status == run_status::error && !abandoned) {
    // A queue item's failed attempt: back to its queue, or dead-lettered.
    std::optional<std::int64_t> again;
    if (rt->queues)
      again = rt->queues->retry_at(item_->queue, item_->attempts, terminal);
    else if (!terminal && item_->attempts < default_item_retry::max_attempts)
      again = detail::now_ms() + default_item_retry::backoff_ms;
    if (again) {
      requeue(*again, *c.error);
      return;
    }
    c.status = run_status::dead_letter;
  }
  host_->settle_end(c);
  final_outcome = std::make_unique<run_outcome>(
    run_outcome{c.status, c.output, c.error});
  if (item_ && rt->queues)
    rt->queues->finishing(run_id_);
  auto me = mailbox_;
  rt->writer->submit(host_->final_write(std::move(c)),
                     [me](persistence::write_result r) {
                       send_signal(me, run_signal::ended,
                                   static_cast<std::int32_t>(r.ack));
                     });
}

void execution::requeue(std::int64_t not_before_ms, std::string error) {
  requeued_ = true;
  leave_by("go back to its queue",
           [fence = owner(), id = run_id_, not_before_ms,
            error = std::move(error)](persistence::store& db) {
             return db.retry_item(fence, id, not_before_ms, error,
                                  detail::now_ms());
           });
}

bool execution::may_block() const {
  // Not an object's invocation, nor a run one serves (calls of a key run
  // in order: a blocked one would hold its key), nor a queue item (its
  // dedup id and limits count only queued and running items): those end
  // ERROR.
  return rt->cfg.on_non_determinism == non_determinism_policy::block
         && host_->held_key().empty() && (!call_chain || call_chain->empty())
         && !item_;
}

void execution::block(const std::string& why) {
  blocked_ = true;
  if (series_)
    series_->blocked.add();
  auto version = rt->cfg.app_version.empty() ? std::string{"(no app_version)"}
                                             : rt->cfg.app_version;
  auto text = why + "; met by executor '" + rt->cfg.executor_id
              + "' at app version " + version;
  rt->log().warn("perdure: run {} is BLOCKED: {}. Deploy code that replays "
                 "its journal (keep the old steps for runs in flight), and "
                 "a process started after this one tries it again; or "
                 "cancel it",
                 run_id_, text);
  leave_by("be set BLOCKED",
           [fence = owner(), id = run_id_, svc = rt,
            text = persistence::valid_text(text)](persistence::store& db) {
             return db.block_run(fence, id, text, svc->started_at_ms,
                                 svc->clock->now_ms());
           });
}

void execution::release(const std::string& patch) {
  released_ = true;
  rt->log().info("perdure: run {} took patch '{}', which this process's "
                 "code does not declare: left to a process that does",
                 run_id_, patch);
  leave_by("be given up", [fence = owner(), id = run_id_](
                            persistence::store& db) {
    return db.release_run(fence, id);
  });
}

void execution::leave_by(const char* what,
                         std::function<bool(persistence::store&)> write) {
  auto me = mailbox_;
  rt->control->post([me, rt = rt, id = run_id_, what,
                     write = std::move(write)] {
    auto ack = persistence::write_ack::failed;
    try {
      auto done = rt->stores->with(write);
      ack = done ? persistence::write_ack::committed
                 : persistence::write_ack::rejected;
    } catch (const std::exception& ex) {
      rt->log().warn("perdure: run {} could not {} ({}); it is tried again "
                     "here",
                     id, what, ex.what());
    }
    send_signal(me, run_signal::ended, static_cast<std::int32_t>(ack));
  });
}

void execution::on_ended(std::int32_t ack) {
  if (blocked_ || released_) {
    // Not an end: a waiting handle goes on waiting (queue items do not
    // block: see may_block).
    if (write_committed(ack, blocked_ ? "its BLOCKED status" : "its release"))
      stop(std::nullopt);
    return;
  }
  if (requeued_) {
    // Back in its queue: not an end; a waiting handle goes on waiting.
    if (write_committed(ack, "its return to its queue")) {
      rt->queue_item_released(run_id_);
      stop(std::nullopt);
    }
    return;
  }
  if (write_committed(ack, "its final status")) {
    ended_ = true;
    count_end(final_outcome->status);
    stop(*final_outcome);
  }
}

void execution::count_end(run_status status) {
  end_known_ = true; // for the attempt's span
  if (status != run_status::success)
    end_error_ = std::string{to_string(status)};
  if (!series_)
    return;
  rt->metrics.ended(*series_, status, created_at_ms_, detail::now_ms());
  if (status == run_status::dead_letter && item_)
    rt->metrics.dead_lettered(item_->queue);
}

std::int64_t execution::passivate_after_ms() const {
  // Staying: a year is "never" here, and no sum with it overflows.
  constexpr std::int64_t never = 365LL * 24 * 3600 * 1000;
  return host_->may_passivate() ? rt->cfg.passivate_after.count() : never;
}

void execution::stop(std::optional<run_outcome> outcome) {
  auto ended = outcome.has_value();
  rt->run_stopped(run_id_, std::move(outcome), epoch);
  if (ended)
    wake_parent();
  leave();
}

void execution::wake_parent() {
  if (!parent_id)
    return;
  rt->launcher->wake(*parent_id, -1); // a parent may be waiting for this end
  // In another process (a call's caller):
  rt->notices->announce(persistence::notice::woken(*parent_id));
}

void execution::leave() {
  if (body_seq >= 0) {
    quitting = true;
    return;
  }
  quit_host();
}

void execution::restart() {
  stop(std::nullopt);
  rt->runs->orphaned(run_id_);
}

void execution::crash() {
  rt->run_stopped(run_id_, std::nullopt, epoch);
  rt->runs->orphaned(run_id_, true);
  leave();
}

} // namespace perdure::detail
