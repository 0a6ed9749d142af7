// What a workflow_handle asks of the runtime: a run's end (awaited in
// memory or read from the store), its status, its cancellation, and the
// error a failed run throws.

#include "perdure/workflow_handle.hpp"

#include <spdlog/spdlog.h>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/runtime/runtime_impl.hpp"
#include "perdure/detail/runs/collected.hpp"
#include "perdure/detail/time_math.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure::detail {

void on_run_end(runtime_impl& rt, const std::string& id,
                std::function<void()> done) {
  rt.svc.ends->on_end(id, std::move(done));
}

namespace {

std::optional<run_outcome> stored_outcome(runtime_impl& rt,
                                          const std::string& id) {
  auto run = rt.svc.admin->with(
    [&](persistence::store& db) { return db.get_run(id); });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  if (!is_terminal(run->status))
    return std::nullopt;
  throw_if_collected(*run);
  return run_outcome{run->status, std::move(run->output),
                     std::move(run->error)};
}

} // namespace

run_outcome await_run(runtime_impl& rt, const std::string& id,
                      std::chrono::milliseconds timeout) {
  if (!rt.running())
    throw error(errc::not_running, "the runtime is not running");
  using clock = std::chrono::steady_clock;
  auto deadline = saturating_deadline(timeout);
  rt.svc.ends->watch(id);
  struct unwatch_guard {
    runtime_impl& rt;
    const std::string& id;
    ~unwatch_guard() {
      rt.svc.ends->unwatch(id);
    }
  } guard{rt, id};
  for (bool waited_long = false;; ) {
    // Watch first, then read: an end committed in between is never missed.
    // A run this runtime is running reports its end, or its actor's stop
    // (e.g. fenced), to the watch: no read, no polling at poll_interval
    // (with hundreds of waiters, those reads and wake-ups cost more CPU
    // than the runs). Any other run may end elsewhere: poll the store. A
    // long wait that saw nothing reads too, should an end go unreported.
    auto stops = rt.svc.ends->stops(id);
    bool here = rt.svc.runs->is_active(id);
    if (!here || waited_long)
      if (auto outcome = stored_outcome(rt, id))
        return *outcome;
    auto now = clock::now();
    if (now >= deadline)
      throw error(errc::timeout,
                  "workflow '" + id + "' still running after the timeout");
    auto poll = here ? std::max<clock::duration>(rt.cfg.poll_interval,
                                                 std::chrono::seconds{1})
                     : clock::duration{rt.cfg.poll_interval};
    auto wait = std::min<clock::duration>(poll, deadline - now);
    if (auto outcome = rt.svc.ends->wait_ended(
          id, std::chrono::ceil<std::chrono::milliseconds>(wait), stops))
      return *outcome;
    waited_long = here && rt.svc.ends->stops(id) == stops;
  }
}

run_status status_of(runtime_impl& rt, const std::string& id) {
  if (!rt.running())
    throw error(errc::not_running, "the runtime is not running");
  auto run = rt.svc.admin->with(
    [&](persistence::store& db) { return db.get_run(id); });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  if (run->status == run_status::pending
      && run->saga_phase == persistence::saga_phase::compensating)
    return run_status::compensating;
  return run->status;
}

void cancel_run(runtime_impl& rt, const std::string& id) {
  runtime_impl::client_call call{rt};
  auto cancelled = rt.svc.stores->with([&](persistence::store& db) {
    return db.cancel_run(id, rt.svc.clock->now_ms());
  });
  if (cancelled.empty()) {
    auto run = rt.svc.stores->with(
      [&](persistence::store& db) { return db.get_run(id); });
    if (!run)
      throw error(errc::not_found, "no workflow run with id '" + id + "'");
    // Ended already -- or cancelled by this very call, whose commit reply
    // was lost and whose retry found it CANCELLED (M5): telling its actor
    // and its parent again is harmless, and without it the actor ran on
    // until its next write was refused. (Its cancelled descendants are
    // refused at their next write as before.)
    if (run->status == run_status::cancelled) {
      rt.svc.notices->apply_cancel({{id, false}});
      rt.svc.notices->tell_parent(id);
    }
    return;
  }
  rt.svc.notices->apply_cancel(cancelled);
  rt.svc.notices->tell_parent(id);
}

void throw_run_failure(const std::string& id, const run_outcome& outcome) {
  auto reason = outcome.error.value_or("no reason recorded");
  switch (outcome.status) {
    case run_status::cancelled:
      throw error(errc::workflow_cancelled,
                  "workflow '" + id + "' was cancelled: " + reason);
    case run_status::retries_exceeded:
      throw error(errc::retries_exceeded,
                  "workflow '" + id + "' exceeded its recovery attempts: "
                    + reason);
    case run_status::compensated:
      throw error(errc::compensated,
                  "saga '" + id + "' was compensated: " + reason);
    case run_status::compensation_failed:
      throw error(errc::compensation_failed,
                  "saga '" + id + "' could not undo everything: " + reason);
    case run_status::dead_letter:
      throw error(errc::dead_letter,
                  "queue item '" + id + "' was dead-lettered: " + reason);
    default:
      throw error(errc::workflow_failed,
                  "workflow '" + id + "' failed: " + reason);
  }
}

} // namespace perdure::detail
