// perdure::client: starting, cancelling and listing runs, resolving
// awakeables and promises, messages and events -- for application threads,
// in a runtime's process or in a process of its own.

#include "perdure/client.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <future>
#include <tuple>
#include <type_traits>
#include <unordered_set>

#include "perdure/detail/export/exported_run.hpp"
#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runtime/client_access.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/runtime/runtime_impl.hpp"
#include "perdure/detail/runs/collected.hpp"
#include "perdure/detail/time_math.hpp"
#include "perdure/detail/tracing/run_trace.hpp"
#include "perdure/persistence/detail/migrations.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure {

// -- client ---------------------------------------------------------------------

client::client(config cfg)
  : impl_(std::make_shared<detail::runtime_impl>(std::move(cfg), true)) {
  impl_->start();
}

client::client(runtime_mode, config cfg)
  : impl_(std::make_shared<detail::runtime_impl>(std::move(cfg), false)) {
}

client::~client() {
  try {
    impl_->stop();
  } catch (const std::exception& ex) {
    impl_->log().error("perdure: {}", ex.what());
  }
}

const config& client::cfg() const noexcept {
  return impl_->cfg;
}

run_page client::list_runs(const run_filter& filter) {
  detail::runtime_impl::client_call call{*impl_};
  return impl_->svc.stores->with(
    [&](persistence::store& db) { return db.list_runs(filter); });
}

std::vector<step_record> client::history(const std::string& id) {
  detail::runtime_impl::client_call call{*impl_};
  auto [run, journal, events]
    = impl_->svc.stores->with([&](persistence::store& db) {
        return std::make_tuple(db.get_run(id), db.load_journals({id}),
                               db.run_events(id));
      });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  std::vector<step_record> steps;
  for (auto& e : journal) {
    step_record s;
    s.seq = e.seq;
    s.kind = persistence::to_string(e.kind);
    s.name = std::move(e.name);
    switch (e.outcome) {
      case persistence::outcome::value: s.outcome = "value"; break;
      case persistence::outcome::failed: s.outcome = "failed"; break;
      case persistence::outcome::terminal: s.outcome = "terminal"; break;
      default: s.outcome = "unreadable"; break;
    }
    s.payload = std::move(e.payload);
    s.error = std::move(e.error);
    s.at = std::chrono::system_clock::time_point{
      std::chrono::milliseconds{e.created_at_ms}};
    steps.push_back(std::move(s));
  }
  // Each event before the journal index it came before (a resume's after
  // what it kept, before what ran again); patch markers stay first.
  for (auto& ev : events) {
    step_record s;
    s.seq = -1;
    s.kind = std::move(ev.kind);
    s.name = std::move(ev.detail);
    s.outcome = "event";
    s.payload = std::move(ev.reason);
    s.at = std::chrono::system_clock::time_point{
      std::chrono::milliseconds{ev.at_ms}};
    auto later = std::find_if(steps.begin(), steps.end(), [&](auto& e) {
      return e.outcome != "event" && e.seq >= ev.before_seq;
    });
    steps.insert(later, std::move(s));
  }
  return steps;
}

std::string client::export_run(const std::string& id) {
  detail::runtime_impl::client_call call{*impl_};
  auto [run, journal] = impl_->svc.stores->with([&](persistence::store& db) {
    return std::make_pair(db.get_run(id), db.load_journals({id}));
  });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  detail::throw_if_collected(*run);
  detail::exported_run out;
  out.id = run->id;
  out.workflow = run->name;
  out.status = std::string{to_string(run->status)};
  out.app_version = run->app_version;
  out.inputs = std::move(run->inputs);
  out.exported_at_ms = impl_->svc.clock->now_ms();
  out.cancel_requested = run->cancel_requested;
  out.journal = std::move(journal);
  return detail::to_json(out);
}

namespace {

/// Throws unless `existing`, found under the id of `run`, is the same start
/// (same workflow, same inputs): a start with a taken id returns that run.
void check_same_start(const persistence::run_record& existing,
                      const persistence::run_record& run) {
  if (existing.name != run.name)
    throw error(errc::conflicting_id,
                "workflow id '" + run.id + "' already names a run of '"
                  + existing.name + "'");
  // A tombstone's inputs are gone: its workflow is all there is to compare.
  if (existing.inputs != run.inputs && !existing.collected_at_ms)
    throw error(errc::conflicting_id,
                "workflow id '" + run.id
                  + "' already names a run with other inputs");
}

/// Starts `run` from a client: stored unowned, then announced, so that a
/// runtime that registered its workflow adopts it.
void start_unowned(detail::runtime_impl& rt, persistence::run_record run) {
  run.owner = {persistence::unowned_executor, 0};
  auto result = rt.svc.stores->with(
    [&](persistence::store& db) { return db.create_run(run); });
  if (!result.created) {
    check_same_start(result.run, run);
    return;
  }
  try {
    rt.svc.stores->with(
      [&](persistence::store& db) {
        db.notify(persistence::notice::created(run.id));
      });
  } catch (const std::exception& ex) {
    // Stored anyway: runtimes find unowned runs every few seconds.
    rt.log().warn("perdure: could not announce run {}: {}", run.id, ex.what());
  }
}

} // namespace

std::string client::start_run(std::string_view name, std::string inputs,
                               start_options opts) {
  if (!impl_->running())
    throw error(errc::not_running, "start() the runtime before starting work");
  detail::check_name("workflow name", name);
  if (!impl_->client_mode && impl_->workflows.count(std::string{name}) == 0)
    throw error(errc::unknown_workflow,
                "no workflow registered as '" + std::string{name} + "'");
  if (!impl_->client_mode)
    impl_->svc.lease->check();
  if (opts.id.empty())
    opts.id = detail::random_id();
  detail::check_name("workflow id", opts.id);
  if (inputs.size() > impl_->cfg.max_payload_bytes)
    throw error(errc::payload_too_large,
                "inputs of " + std::to_string(inputs.size())
                  + " bytes exceed the limit of "
                  + std::to_string(impl_->cfg.max_payload_bytes));
  persistence::run_record run;
  run.id = opts.id;
  run.name = std::string{name};
  run.status = run_status::pending;
  run.inputs = std::move(inputs);
  run.owner = {impl_->cfg.executor_id, 1};
  run.app_version = impl_->cfg.app_version;
  run.created_at_ms = detail::now_ms();
  run.traceparent = detail::traceparent_for_start(opts.traceparent);
  if (opts.timeout.count() > 0)
    run.deadline_ms = detail::saturating_add(impl_->svc.clock->now_ms(),
                                             opts.timeout.count());
  detail::runtime_impl::client_call call{*impl_};
  if (impl_->client_mode) {
    start_unowned(*impl_, std::move(run));
    return opts.id;
  }
  // Through the group-commit writer: starts from many threads share a
  // commit. Durable first, then delivered: the run exists before its actor.
  // A taken id whose run is gone by the time it is read was a tombstone
  // that expired in between: the id is free, the start tries again.
  std::optional<persistence::run_record> existing;
  for (int attempt = 1; !existing; ++attempt) {
    std::promise<persistence::write_result> created;
    auto written = created.get_future();
    impl_->svc.writer->create(run, [&created](persistence::write_result r) {
      created.set_value(std::move(r));
    });
    auto result = written.get();
    switch (result.ack) {
      case persistence::write_ack::committed:
        // Spawning arms its deadline.
        impl_->svc.launcher->spawn_run(std::move(run), {});
        return opts.id;
      case persistence::write_ack::failed:
      case persistence::write_ack::superseded:
        // The commit may have happened all the same: if the run exists, it
        // runs (housekeeping finds it); a start with this id returns it.
        impl_->svc.runs->orphaned(run.id);
        throw error(result.error == errc::store_full ? errc::store_full
                                                     : errc::store_unavailable,
                    "could not record the start of workflow '" + run.id
                      + "': the database is "
                      + (result.error == errc::store_full ? "full"
                                                          : "unavailable"));
      case persistence::write_ack::rejected:
        break;
    }
    // The id was taken: the same start again (or our own in-doubt commit
    // re-sent) returns that run; another name or other inputs is a conflict.
    existing = impl_->svc.stores->with([&](persistence::store& db) {
      return db.get_run(run.id);
    });
    if (!existing && attempt == 3)
      throw error(errc::store_error,
                  "run '" + run.id + "' was taken and gone three times in a "
                  "row: something deletes runs as they start; try again");
  }
  check_same_start(*existing, run);
  if (existing->status == run_status::pending && existing->owner == run.owner
      && !impl_->svc.runs->is_active(run.id)) {
    // Ours and not running: a creation whose acknowledgement was lost.
    auto journal = impl_->svc.stores->with([&](persistence::store& db) {
      return db.load_journals({run.id});
    });
    impl_->svc.launcher->spawn_run(std::move(*existing), std::move(journal));
  }
  return opts.id;
}

void client::cancel(const std::string& id) {
  detail::cancel_run(*impl_, id);
}

namespace {

/// `resume` without the throwing: what the store did.
persistence::run_store::resume_outcome
resume_one(detail::runtime_impl& rt, const std::string& id,
           const resume_options& opts) {
  std::optional<std::string_view> version;
  if (opts.app_version)
    version = *opts.app_version;
  auto now = rt.svc.clock->now_ms();
  auto out = rt.svc.stores->with([&](persistence::store& db) {
    return db.resume_run(id, version, now, opts.reason);
  });
  // Its transaction told the runtimes (run_created): one that can run it
  // adopts it.
  if (out.resumed)
    rt.log().info("perdure: run {} resumed from {} ({} failed journal "
                  "entries dropped)",
                  id, to_string(*out.was), out.dropped);
  if (out.was != run_status::dead_letter)
    return out;
  if (opts.app_version)
    throw error(errc::invalid_argument,
                "queue item '" + id + "' is a dead letter: it goes back to "
                  "its queue under its own app version (resume it without "
                  "one, then move_runs moves its version's queued items)");
  // A dead letter goes back to its queue (the queue's own retry journal).
  auto item = rt.svc.stores->with([&](persistence::store& db) {
    return db.requeue(id, now, opts.reason);
  });
  if (!item) // requeued (or resumed otherwise) since
    return out;
  out.resumed = true;
  if (rt.svc.queues)
    rt.svc.queues->notice(item->queue_name);
  rt.log().info("perdure: queue item {} resumed from DEAD_LETTER", id);
  return out;
}

std::string not_resumable(const std::string& id, run_status was) {
  return "run '" + id + "' is " + std::string{to_string(was)}
         + ": only runs that ended ERROR, CANCELLED, RETRIES_EXCEEDED or "
           "DEAD_LETTER, or are BLOCKED, can be resumed (an object "
           "invocation is called again)";
}

bool resumable(run_status s) {
  return s == run_status::error || s == run_status::cancelled
         || s == run_status::retries_exceeded || s == run_status::blocked
         || s == run_status::dead_letter;
}

} // namespace

void client::resume(const std::string& id, resume_options opts) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  auto out = resume_one(rt, id, opts);
  if (!out.was)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  if (!out.resumed) {
    auto run = rt.svc.admin->with(
      [&](persistence::store& db) { return db.get_run(id); });
    if (run)
      detail::throw_if_collected(*run);
    throw error(errc::invalid_argument, not_resumable(id, *out.was));
  }
}

namespace {

/// Walks the runs `filter` matches, page by page (`filter.limit` a page,
/// its cursor ignored): counts and samples those `wanted` takes, and
/// unless `dry_run` does `act(run, result)` to each (which counts it in
/// `done`, `refused` or `created`) -- or `act(runs, result)` to each
/// `chunk` of them -- from `workers` threads at once (an `act` that is
/// safe to run side by side), telling `progress` as it goes. The first
/// error other than what `act` counts stops the walk.
template <class Wanted, class Act>
bulk_result for_each_matching(detail::runtime_impl& rt, run_filter filter,
                              bool dry_run, const bulk_progress& progress,
                              Wanted wanted, Act act,
                              std::size_t workers = 1,
                              std::size_t chunk = 1) {
  using runs_t = std::vector<const run_info*>;
  constexpr bool by_chunk = std::is_invocable_v<Act&, const runs_t&,
                                                bulk_result&>;
  constexpr std::size_t sample_size = 10;
  bulk_result result;
  std::mutex mtx;
  filter.cursor.clear();
  for (;;) {
    auto page = rt.svc.stores->with(
      [&](persistence::store& db) { return db.list_runs(filter); });
    std::vector<const run_info*> chosen; // this page's runs `wanted` took
    for (auto& run : page.runs) {
      if (!wanted(run))
        continue;
      ++result.matched;
      if (result.sample.size() < sample_size)
        result.sample.push_back(run.id);
      chosen.push_back(&run);
    }
    std::atomic<std::size_t> next{0};
    std::exception_ptr failure;
    auto work = [&] {
      for (;;) {
        auto i = next.fetch_add(chunk);
        if (dry_run || i >= chosen.size())
          return;
        bulk_result one;
        try {
          if constexpr (by_chunk)
            act(runs_t(chosen.begin() + i,
                       chosen.begin() + std::min(i + chunk, chosen.size())),
                one);
          else
            act(*chosen[i], one);
        } catch (...) {
          std::lock_guard guard{mtx};
          if (!failure)
            failure = std::current_exception();
          next = chosen.size(); // the others stop too
          return;
        }
        std::lock_guard guard{mtx};
        result.done += one.done;
        for (auto& r : one.refused)
          result.refused.push_back(std::move(r));
        for (auto& c : one.created)
          result.created.push_back(std::move(c));
        if (progress)
          progress(result.done
                   + static_cast<std::int64_t>(result.refused.size()));
      }
    };
    std::vector<std::thread> threads;
    auto units = (chosen.size() + chunk - 1) / chunk;
    for (std::size_t k = 1; k < std::min(workers, units); ++k)
      threads.emplace_back(work);
    work();
    for (auto& t : threads)
      t.join();
    if (failure)
      std::rethrow_exception(failure);
    if (page.next_cursor.empty())
      return result;
    filter.cursor = std::move(page.next_cursor);
  }
}

} // namespace

bulk_result client::resume_matching(run_filter filter, resume_options opts,
                                    bool dry_run,
                                    const bulk_progress& progress) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  if (filter.status && !resumable(*filter.status))
    throw error(errc::invalid_argument,
                "runs that are " + std::string{to_string(*filter.status)}
                  + " cannot be resumed: filter on ERROR, CANCELLED, "
                    "RETRIES_EXCEEDED, DEAD_LETTER or BLOCKED");
  return for_each_matching(
    rt, std::move(filter), dry_run, progress,
    [](const run_info& run) {
      return resumable(run.status) && !run.collected_at;
    },
    [&](const run_info& run, bulk_result& result) {
      persistence::run_store::resume_outcome out;
      try {
        out = resume_one(rt, run.id, opts);
      } catch (const error& ex) {
        if (ex.code() != errc::invalid_argument
            && ex.code() != errc::conflicting_id)
          throw;
        result.refused.emplace_back(run.id, ex.what());
        return;
      }
      if (out.resumed)
        ++result.done;
      else if (out.was) // a queue item, an invocation, or changed since
        result.refused.emplace_back(run.id, not_resumable(run.id, *out.was));
    });
}

namespace {

/// Throws unless `opts` names at most one point.
void check_fork_point(const fork_options& opts) {
  auto points = (opts.from_step ? 1 : 0) + (opts.from_step_name ? 1 : 0)
                + (opts.from_last_failure ? 1 : 0);
  if (points > 1)
    throw error(errc::invalid_argument,
                "fork from one point: an index, a step name or the last "
                "failure");
}

/// `fork` without the throwing: what the store did (`opts.id` set).
persistence::run_store::fork_outcome
fork_one(detail::runtime_impl& rt, const std::string& id,
         const fork_options& opts) {
  persistence::run_store::fork_request req{
    id,          opts.id,           opts.from_step,   opts.from_step_name,
    opts.from_last_failure, opts.app_version, rt.svc.clock->now_ms(),
    opts.reason};
  auto out = rt.svc.stores->with(
    [&](persistence::store& db) { return db.fork_run(req); });
  if (out.what == persistence::run_store::fork_outcome::result::forked)
    rt.log().info("perdure: run {} forked from run {} at journal index {} "
                  "({} entries copied)",
                  opts.id, id, out.from, out.copied);
  return out;
}

std::string not_forkable(const std::string& id, const std::string& why) {
  return "run '" + id + "' cannot be forked there: " + why;
}

} // namespace

std::string client::fork(const std::string& id, fork_options opts) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  check_fork_point(opts);
  if (opts.id.empty())
    opts.id = detail::random_id();
  detail::check_key("fork id", opts.id);
  auto out = fork_one(rt, id, opts);
  using result = persistence::run_store::fork_outcome::result;
  switch (out.what) {
    case result::not_found:
      throw error(errc::not_found, "no workflow run with id '" + id + "'");
    case result::id_taken:
      throw error(errc::conflicting_id,
                  "a run with id '" + opts.id
                    + "' exists: fork with another id, or none for a fresh one");
    case result::refused:
      throw error(errc::invalid_argument, not_forkable(id, out.why));
    case result::forked:
      break;
  }
  return opts.id;
}

bulk_result client::fork_matching(run_filter filter, fork_options opts,
                                  bool dry_run,
                                  const bulk_progress& progress) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  check_fork_point(opts);
  if (!opts.id.empty())
    throw error(errc::invalid_argument,
                "forks by filter take fresh ids: leave fork_options::id "
                "empty");
  // Forks made here are new runs the listing may show on a later page:
  // they are not forked again.
  std::unordered_set<std::string> made;
  return for_each_matching(
    rt, std::move(filter), dry_run, progress,
    [&](const run_info& run) {
      return made.count(run.id) == 0 && !run.collected_at;
    },
    [&](const run_info& run, bulk_result& result) {
      opts.id = detail::random_id();
      auto out = fork_one(rt, run.id, opts);
      using result_kind = persistence::run_store::fork_outcome::result;
      if (out.what == result_kind::forked) {
        ++result.done;
        made.insert(opts.id);
        result.created.emplace_back(run.id, opts.id);
      } else if (out.what == result_kind::refused) {
        result.refused.emplace_back(run.id, not_forkable(run.id, out.why));
      }
    });
}

namespace {

/// A compensating saga is not: it is undoing already, and ends as that
/// ends.
bool cancellable(run_status s) {
  return s == run_status::pending || s == run_status::enqueued
         || s == run_status::blocked;
}

} // namespace

bulk_result client::cancel_matching(run_filter filter, bool dry_run,
                                    const bulk_progress& progress) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  if (filter.status && !cancellable(*filter.status))
    throw error(errc::invalid_argument,
                "runs that are " + std::string{to_string(*filter.status)}
                  + " have ended: filter on PENDING, ENQUEUED or BLOCKED "
                    "(or on no status: every unended run)");
  if (!filter.status)
    filter.unended = true;
  // Cancels go to the store a batch at a time (one transaction and its
  // notices: one commit per batch, not two per run), several batches side
  // by side on the pool's connections.
  constexpr std::size_t workers = 4, batch = 100;
  return for_each_matching(
    rt, std::move(filter), dry_run, progress,
    [](const run_info& run) { return cancellable(run.status); },
    [&](const std::vector<const run_info*>& runs, bulk_result& result) {
      std::vector<std::string> ids;
      for (auto* r : runs)
        ids.push_back(r->id);
      auto now = rt.svc.clock->now_ms();
      auto cancelled = rt.svc.stores->with(
        [&](persistence::store& db) { return db.cancel_runs(ids, now); });
      rt.svc.notices->apply_cancel(cancelled, true);
      std::unordered_set<std::string> hit;
      for (auto& c : cancelled)
        hit.insert(c.id);
      for (auto* r : runs) {
        if (hit.count(r->id) == 0) {
          // Cancelled with a tree of this walk, or by our own commit whose
          // reply was lost (the retry found nothing): done. Else it ended
          // (or began compensating) meanwhile.
          auto now_run = rt.svc.stores->with(
            [&](persistence::store& db) { return db.get_run(r->id); });
          if (now_run && now_run->status == run_status::cancelled) {
            ++result.done;
            continue;
          }
          result.refused.emplace_back(
            r->id, "run '" + r->id + "' is "
                     + (now_run ? std::string{to_string(now_run->status)}
                                : std::string{"gone"})
                     + " now: it was not cancelled");
          continue;
        }
        ++result.done;
        if (r->parent_id) { // its end is a delivery to its parent
          rt.svc.launcher->wake(*r->parent_id, -1);
          rt.svc.notices->announce(persistence::notice::woken(*r->parent_id));
        }
      }
    },
    workers, batch);
}

run_detail client::describe(const std::string& id) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  auto run = rt.svc.stores->with(
    [&](persistence::store& db) { return db.get_run(id); });
  if (!run)
    throw error(errc::not_found, "no workflow run with id '" + id + "'");
  auto at = [](std::int64_t ms) {
    return std::chrono::system_clock::time_point{std::chrono::milliseconds{ms}};
  };
  auto at_opt = [&](const std::optional<std::int64_t>& ms)
    -> std::optional<std::chrono::system_clock::time_point> {
    if (!ms)
      return std::nullopt;
    return at(*ms);
  };
  run_detail d;
  auto& i = d.info;
  i.id = run->id;
  i.name = run->name;
  i.status = run->status;
  if (run->status == run_status::pending
      && run->saga_phase == persistence::saga_phase::compensating)
    i.status = run_status::compensating;
  i.executor = run->owner.executor;
  i.created_at = at(run->created_at_ms);
  i.updated_at = at(run->updated_at_ms);
  i.error = run->error;
  i.parent_id = run->parent_id;
  i.app_version = run->app_version;
  if (!run->queue_name.empty())
    i.queue = run->queue_name;
  if (!run->object_type.empty()) {
    i.object_type = run->object_type;
    i.object_key = run->object_key;
  }
  i.collected_at = at_opt(run->collected_at_ms);
  d.epoch = run->owner.epoch;
  d.inputs = std::move(run->inputs);
  d.output = std::move(run->output);
  d.started_at = at_opt(run->started_at_ms);
  d.wake_at = at_opt(run->wake_at_ms);
  d.deadline = at_opt(run->deadline_ms);
  d.attempts = run->attempts;
  d.recovery_attempts = run->recovery_attempts;
  d.priority = run->priority;
  d.partition_key = run->partition_key;
  d.dedup_id = run->dedup_id;
  d.saga_phase = run->saga_phase;
  d.cancel_requested = run->cancel_requested;
  return d;
}

std::vector<executor_info> client::executors() {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  return rt.svc.stores->with(
    [&](persistence::store& db) { return db.list_executors(); });
}

std::vector<queue_info> client::queues() {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  return rt.svc.stores->with(
    [&](persistence::store& db) { return db.list_queues(); });
}

std::string client::not_ready() {
  auto& rt = *impl_;
  if (!rt.running())
    return "not started (or stopped)";
  if (!rt.client_mode && rt.svc.runs->lease_lost())
    return "executor '" + rt.cfg.executor_id
           + "' lost its lease (stalled or cut off past lease_timeout) and "
             "has not got it back";
  try {
    detail::runtime_impl::client_call call{rt};
    (void)rt.svc.stores->with(
      [](persistence::store& db) { return db.schema_version(); });
  } catch (const std::exception& ex) {
    return std::string{"the store does not answer: "} + ex.what();
  }
  return {};
}

telemetry::snapshot client::metrics() {
  return impl_->metrics();
}

void client::read_metrics(telemetry::series_visitor& v) {
  impl_->read_metrics(v);
}

store_description client::store_info() {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  store_description out;
  rt.svc.stores->with([&](persistence::store& db) {
    out.dialect = db.dialect();
    out.schema_version = db.schema_version();
  });
  out.latest_schema_version
    = persistence::detail::sqlite_migrations().back().version;
  return out;
}

std::vector<version_report> client::versions() {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  return rt.svc.stores->with(
    [&](persistence::store& db) { return db.versions(); });
}

std::int64_t client::move_runs(const std::string& from_version,
                               const std::string& to_version,
                               const std::string& reason) {
  auto& rt = *impl_;
  detail::runtime_impl::client_call call{rt};
  if (from_version == to_version)
    throw error(errc::invalid_argument,
                "move runs between two different app versions");
  auto moved = rt.svc.stores->with([&](persistence::store& db) {
    return db.move_runs(from_version, to_version, rt.svc.clock->now_ms(),
                        reason);
  });
  rt.log().info("perdure: {} runs moved from app version '{}' to '{}'",
                moved, from_version, to_version);
  return moved;
}

namespace {

/// Throws `payload_too_large` if `bytes` exceed the configured limit.
void check_payload(const config& cfg, const std::string& bytes,
                   const char* what) {
  if (bytes.size() > cfg.max_payload_bytes)
    throw error(errc::payload_too_large,
                std::string{what} + " of " + std::to_string(bytes.size())
                  + " bytes exceeds the limit of "
                  + std::to_string(cfg.max_payload_bytes));
}

/// Stores `r` and wakes its run; throws for unknown or repeated ones.
void store_resolution(detail::runtime_impl& rt, persistence::resolution& r,
                      bool ok, std::string bytes, const std::string& what) {
  r.result = ok ? persistence::outcome::value : persistence::outcome::terminal;
  if (ok)
    r.payload = std::move(bytes);
  else
    r.error = persistence::valid_text(bytes);
  r.at_ms = rt.svc.clock->now_ms();
  auto result = rt.svc.stores->with(
    [&](persistence::store& db) { return db.resolve(r); });
  switch (result) {
    case persistence::resolve_result::unknown_id:
      throw error(errc::not_found, "no " + what);
    case persistence::resolve_result::already_resolved:
      throw error(errc::already_resolved,
                  what + " was already resolved or rejected");
    case persistence::resolve_result::resolved:
      rt.svc.launcher->wake(r.run_id, -1);
      rt.svc.notices->announce(persistence::notice::woken(r.run_id));
      return;
  }
}

} // namespace

void client::resolve(const std::string& id, bool ok, std::string bytes) {
  detail::runtime_impl::client_call call{*impl_};
  check_payload(impl_->cfg, bytes, "awakeable value");
  // awk_<seq>_<run id>: the journal entry that created it.
  auto unknown = [&] {
    return error(errc::not_found, "no awakeable with id '"
                                    + persistence::valid_text(id) + "'");
  };
  auto parsed = detail::parse_awakeable_id(id);
  if (!parsed)
    throw unknown();
  auto& r = *parsed;
  store_resolution(*impl_, r, ok, std::move(bytes),
                   "awakeable with id '" + persistence::valid_text(id) + "'");
}

void client::complete_promise(const std::string& workflow_id,
                               const std::string& name, bool ok,
                               std::string bytes) {
  detail::runtime_impl::client_call call{*impl_};
  check_payload(impl_->cfg, bytes, "promise value");
  detail::check_name("workflow id", workflow_id);
  detail::check_name("promise name", name);
  persistence::resolution r;
  r.id = detail::promise_id(workflow_id, name);
  r.run_id = workflow_id;
  r.seq = -1;
  store_resolution(*impl_, r, ok, std::move(bytes),
                   "workflow run '" + workflow_id + "' (promise '" + name
                     + "')");
}

void client::send_bytes(const std::string& workflow_id,
                         const std::string& topic, std::string bytes) {
  detail::runtime_impl::client_call call{*impl_};
  check_payload(impl_->cfg, bytes, "message");
  detail::check_name("workflow id", workflow_id);
  detail::check_name("topic", topic);
  auto sent = impl_->svc.stores->with([&](persistence::store& db) {
    return db.send_message(workflow_id, topic, bytes, impl_->svc.clock->now_ms());
  });
  if (!sent)
    throw error(errc::not_found, "no workflow run with id '"
                                   + persistence::valid_text(workflow_id) + "'");
  impl_->svc.launcher->wake(workflow_id, -1);
  impl_->svc.notices->announce(persistence::notice::woken(workflow_id));
}

std::optional<std::string>
client::event_bytes(const std::string& workflow_id, const std::string& key,
                     std::chrono::milliseconds timeout) {
  detail::check_name("workflow id", workflow_id);
  detail::check_name("event key", key);
  auto until = detail::saturating_deadline(timeout);
  auto pause = std::chrono::milliseconds{5};
  for (;;) {
    {
      detail::runtime_impl::client_call call{*impl_};
      auto value = impl_->svc.stores->with(
        [&](persistence::store& db) { return db.get_event(workflow_id, key); });
      if (value)
        return value;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= until)
      return std::nullopt;
    // Polling, backing off from 5 ms to `poll_interval`: events are read
    // far less often than steps are written.
    std::this_thread::sleep_for(
      std::min<std::chrono::steady_clock::duration>(until - now, pause));
    pause = std::min(pause * 2, std::max(impl_->cfg.poll_interval,
                                         std::chrono::milliseconds{5}));
  }
}

// -- client_access ----------------------------------------------------------------

detail::runtime_services& detail::client_access::services(const client& c) {
  return c.impl_->svc;
}

detail::run_outcome detail::client_access::await(const client& c,
                                         const std::string& id,
                                         std::chrono::milliseconds timeout) {
  return detail::await_run(*c.impl_, id, timeout);
}

void detail::client_access::set_queue_hooks(
  const client& c, std::shared_ptr<queue_hooks> hooks) {
  c.impl_->set_queue_hooks(std::move(hooks));
}

} // namespace perdure
