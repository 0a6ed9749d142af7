// The collecting loop of one process: every `interval`, if it has the
// turn, collects what is past its policy (oldest end first, workflow by
// workflow, status by status), then frees the ids whose tombstones
// expired. Each batch is one transaction and renews the turn; a kill
// loses at most the batch in flight (rolled back), and whoever collects
// next starts from what is still there.

#include "perdure/retention/collector.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/logger.h>

#include "perdure/clock.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/client_access.hpp"
#include "perdure/detail/runtime/client_gate.hpp"
#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::retention {

using perdure::detail::client_access;

namespace {

constexpr run_status ended_statuses[] = {
  run_status::success,          run_status::error,
  run_status::cancelled,        run_status::retries_exceeded,
  run_status::compensated,      run_status::compensation_failed,
  run_status::dead_letter,
};

/// `now - d`, not below the epoch's start (a keep of years on a young
/// clock, or `milliseconds::max()`: for ever).
std::int64_t before(std::int64_t now, std::chrono::milliseconds d) {
  return d.count() > now ? 0 : now - d.count();
}

/// `a + b`, saturating (`max()` is "for ever").
std::chrono::milliseconds plus(std::chrono::milliseconds a,
                               std::chrono::milliseconds b) {
  auto max = std::chrono::milliseconds::max();
  return a > max - b ? max : a + b;
}

} // namespace

struct collector::impl {
  client& c;
  policies pols;
  collector_options opts;
  std::string holder = "retention-" + perdure::detail::process_executor_id();
  std::mutex mtx;
  std::condition_variable wake;
  std::mutex pass_mtx; // one pass at a time (the loop's, collect_now's)
  bool stopping = false;
  std::thread thread;
  /// Roots per transaction now: halved when one took over `batch_time`,
  /// grown back (to `batch`) when under half of it.
  std::int64_t size = 0;
  telemetry::family<telemetry::counter>& collected;
  telemetry::family<telemetry::counter>& expired;
  telemetry::counter& archive_failures;

  impl(client& c, policies p, collector_options o)
    : c(c),
      pols(std::move(p)),
      opts(std::move(o)),
      collected(registry().counter_family(
        "perdure_retention_collected_total",
        "Ended runs retention collected here (roots; their descendants go "
        "with them), by workflow and status.",
        {"workflow", "status"})),
      expired(registry().counter_family(
        "perdure_retention_ids_expired_total",
        "Tombstones retention deleted here (their ids free again), by "
        "workflow.",
        {"workflow"})),
      archive_failures(registry()
                         .counter_family("perdure_retention_archive_failures_"
                                         "total",
                                         "Runs the archive hook threw for "
                                         "(left for the next pass).",
                                         {})
                         .with()) {}

  telemetry::registry& registry() {
    return client_access::services(c).metrics.registry;
  }

  bool stopped() {
    std::lock_guard guard{mtx};
    return stopping;
  }

  /// Fits the batch size to `write`, what the last transaction took. Not
  /// below 50 roots: a wait for a connection or the writer's lock, which
  /// no smaller batch shortens, must not shrink it to nothing.
  void fit(std::chrono::steady_clock::duration write) {
    auto floor = std::min<std::int64_t>(50, opts.batch);
    if (write > opts.batch_time)
      size = std::max(floor, size / 2);
    else if (write * 2 < opts.batch_time)
      size = std::min(opts.batch, size + size / 2 + 1);
  }

  /// Sleeps so that the batch that took `took` is `duty` of the time.
  void pace(std::chrono::steady_clock::duration took) {
    if (opts.duty >= 1.0)
      return;
    auto rest = std::chrono::duration_cast<std::chrono::microseconds>(
      took * ((1.0 - opts.duty) / opts.duty));
    std::unique_lock guard{mtx};
    wake.wait_for(guard, rest, [&] { return stopping; });
  }

  /// `f(store)` with a connection of the pool, held for that call only
  /// (a pass pauses between batches).
  /// The client's gate is held for that call too: stopping the runtime
  /// waits for a statement, not for a pass.
  template <class F>
  auto with_db(F&& f) {
    auto& rt = client_access::services(c);
    perdure::detail::client_gate::call call{*rt.gate};
    return rt.stores->with(std::forward<F>(f));
  }

  /// Renews the turn; false if it was lost (another process took it).
  bool renew(std::int64_t now) {
    return with_db([&](persistence::store& db) {
      return db.claim_retention(holder, now, now + opts.turn.count());
    });
  }

  /// After a batch begun at `started`: renews the turn and pauses; false
  /// if the turn was lost.
  bool between_batches(std::chrono::steady_clock::time_point started) {
    if (!renew(client_access::services(c).clock->now_ms()))
      return false;
    pace(std::chrono::steady_clock::now() - started);
    return true;
  }

  /// Hands `runs` to the archive; returns the ids it took (stops at the
  /// first failure: what follows waits for the next pass, in order).
  std::vector<std::string> archive(const std::vector<persistence::run_record>& runs,
                                   pass_result& out) {
    std::vector<std::string> ids;
    for (auto& r : runs) {
      try {
        archived_run a;
        a.id = r.id;
        a.workflow = r.name;
        a.status = std::string{to_string(r.status)};
        a.created_at_ms = r.created_at_ms;
        a.ended_at_ms = r.updated_at_ms;
        a.inputs = r.inputs;
        a.output = r.output;
        a.error = r.error.value_or(std::string{});
        a.export_json = c.export_run(r.id);
        opts.archive(a);
        ids.push_back(r.id);
      } catch (const std::exception& ex) {
        ++out.archive_failures;
        archive_failures.add();
        client_access::services(c).logger.warn(
          "perdure: retention's archive failed for run {} ({}); it is kept "
          "and offered again next pass",
          r.id, ex.what());
        break;
      }
    }
    return ids;
  }

  /// Collects workflow `name`'s runs that ended `status` before `cutoff`.
  /// False once the turn is lost or the collector stops.
  bool collect(const std::string& name,
               run_status status, std::int64_t cutoff, pass_result& out) {
    auto& rt = client_access::services(c);
    auto status_text = to_string(status);
    // Where this walk is, in (end, id) order: roots the collection left
    // (a descendant still going) are not met again this pass.
    std::int64_t after_ms = -1;
    std::string after_id;
    while (!stopped()) {
      auto started = std::chrono::steady_clock::now();
      auto asked = size;
      auto runs = with_db([&](persistence::store& db) {
        return db.collectable_runs(name, status_text, cutoff, asked,
                                   static_cast<bool>(opts.archive), after_ms,
                                   after_id);
      });
      if (runs.empty())
        return true;
      after_ms = runs.back().updated_at_ms;
      after_id = runs.back().id;
      std::vector<std::string> ids;
      if (opts.archive)
        ids = archive(runs, out);
      else
        for (auto& r : runs)
          ids.push_back(r.id);
      auto now = rt.clock->now_ms();
      std::int64_t rows = 0;
      auto write = std::chrono::steady_clock::now();
      auto roots = with_db([&](persistence::store& db) {
        return db.collect_runs(ids, now, &rows);
      });
      if (!ids.empty())
        fit(std::chrono::steady_clock::now() - write);
      out.collected += static_cast<std::int64_t>(roots.size());
      out.rows += rows;
      if (!roots.empty())
        collected.with({name, std::string{status_text}})
          .add(static_cast<std::uint64_t>(roots.size()));
      if (!between_batches(started))
        return false;
      // Fewer than asked: the rest is younger. An archive that failed
      // stops the walk: what follows waits for the next pass, in order.
      if (ids.size() < runs.size()
          || static_cast<std::int64_t>(runs.size()) < asked)
        return true;
    }
    return false;
  }

  /// Frees the ids of workflow `name`'s tombstones that ended `status`
  /// before `cutoff`. False once the turn is lost or the collector stops.
  bool expire(const std::string& name,
              run_status status, std::int64_t cutoff, pass_result& out) {
    auto& rt = client_access::services(c);
    while (!stopped()) {
      auto started = std::chrono::steady_clock::now();
      auto asked = size;
      auto n = with_db([&](persistence::store& db) {
        return db.expire_tombstones(name, to_string(status), cutoff, asked,
                                    rt.clock->now_ms());
      });
      fit(std::chrono::steady_clock::now() - started);
      out.expired += n;
      if (n > 0)
        expired.with({name}).add(static_cast<std::uint64_t>(n));
      if (!between_batches(started))
        return false;
      if (n < asked) // rows: a root's descendants count too
        return true;
    }
    return false;
  }

  pass_result pass() {
    std::lock_guard one{pass_mtx};
    auto& rt = client_access::services(c);
    pass_result out;
    auto now = rt.clock->now_ms();
    if (!renew(now))
      return out;
    out.had_turn = true;
    auto names = [&](bool tombstones) {
      return with_db([&](persistence::store& db) {
        return db.retained_workflows(tombstones);
      });
    };
    for (auto& name : names(false)) {
      auto* p = pols.of(name);
      if (!p)
        continue;
      for (auto status : ended_statuses)
        if (auto* k = keep_of(*p, status))
          if (!collect(name, status, before(now, k->run), out))
            return out;
    }
    for (auto& name : names(true)) {
      auto* p = pols.of(name);
      if (!p)
        continue; // the policy was removed: its tombstones stay
      for (auto status : ended_statuses)
        if (auto* k = keep_of(*p, status))
          if (!expire(name, status, before(now, plus(k->run, k->tombstone)),
                      out))
            return out;
    }
    return out;
  }

  void run() {
    auto& rt = client_access::services(c);
    std::unique_lock guard{mtx};
    // The first pass after one interval (a process starting is busy).
    wake.wait_for(guard, opts.interval, [&] { return stopping; });
    while (!stopping) {
      guard.unlock();
      try {
        auto r = pass();
        if (r.collected > 0 || r.expired > 0)
          rt.logger.info("perdure: retention collected {} runs ({} rows) and "
                         "freed {} ids",
                         r.collected, r.rows, r.expired);
      } catch (const std::exception& ex) {
        rt.logger.warn("perdure: a retention pass failed (tried again in {} "
                       "ms): {}",
                       opts.interval.count(), ex.what());
      }
      guard.lock();
      wake.wait_for(guard, opts.interval, [&] { return stopping; });
    }
  }
};

collector::collector(client& c, policies p, collector_options opts) {
  validate(p);
  if (opts.interval <= std::chrono::milliseconds{0} || opts.batch <= 0
      || !(opts.duty > 0.0 && opts.duty <= 1.0)
      || opts.turn <= std::chrono::milliseconds{0}
      || opts.batch_time < std::chrono::milliseconds{0})
    throw perdure::error(errc::invalid_argument,
                         "retention collector options: interval, batch and "
                         "turn must be positive, batch_time not negative, "
                         "duty in (0, 1]");
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running,
                         "start the runtime before its retention collector");
  if (opts.batch_time.count() == 0) {
    // SQLite: a transaction holds the only writer's lock; PostgreSQL's
    // cost is the commit per batch, so its batches stay large.
    auto dialect = std::string{rt.stores->with(
      [](persistence::store& db) { return db.dialect(); })};
    opts.batch_time = dialect == "sqlite" ? std::chrono::milliseconds{10}
                                          : std::chrono::milliseconds{200};
  }
  impl_ = std::make_shared<impl>(c, std::move(p), std::move(opts));
  impl_->size = impl_->opts.batch;
  impl_->thread = std::thread{[self = impl_.get()] { self->run(); }};
}

collector::~collector() {
  {
    std::lock_guard guard{impl_->mtx};
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
  // The turn goes back at once: another process's collector need not
  // wait for it to run out.
  try {
    client_access::services(impl_->c).stores->with(
      [&](persistence::store& db) { db.release_retention(impl_->holder); });
  } catch (const std::exception&) {
    // it runs out by itself
  }
}

status read_status(client& c) {
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  perdure::detail::client_gate::call call{*rt.gate};
  auto p = rt.stores->with(
    [](persistence::store& db) { return db.retention_state(); });
  auto at = [](std::int64_t ms) {
    return ms > 0 ? std::optional{std::chrono::system_clock::time_point{
                      std::chrono::milliseconds{ms}}}
                  : std::nullopt;
  };
  return {p.holder,      at(p.held_until_ms), at(p.last_batch_at_ms),
          p.runs_collected, p.ids_expired,  p.ended_roots,
          p.tombstones};
}

pass_result collector::collect_now() {
  return impl_->pass();
}

} // namespace perdure::retention
