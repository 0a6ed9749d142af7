// The firing loop of one process: sleeps until the earliest due tick (or a
// poll, or a manual clock's jump), then runs passes until none is due.

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <spdlog/logger.h>

#include "perdure/clock.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/runtime/client_access.hpp"
#include "perdure/detail/runtime/client_gate.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/schedules/detail/planning/tick_plan.hpp"
#include "perdure/schedules/detail/stored_schedule.hpp"
#include "perdure/schedules/schedule.hpp"

namespace perdure::schedules {

using perdure::detail::client_access;

struct ticker::impl {
  client& c;
  ticker_options opts;
  std::mutex mtx;
  std::condition_variable wake;
  std::mutex pass_mtx; // one pass at a time (the loop's, fire_due's)
  /// Schedules the last pass decided (not left as they were).
  std::int64_t last_effective = 0;
  bool stopping = false;
  bool jumped = false;
  std::thread thread;
  /// Fire times by cron, zone and repeat rule (parsed once each).
  std::map<std::tuple<std::string, std::string, std::string>, fire_times>
    times;
  /// Schedules this process could not read, left alone until then (steady
  /// clock): their rows stay as they are, for a process that can.
  std::map<std::string, std::chrono::steady_clock::time_point> unreadable;
  /// perdure_schedule_ticks_total and the lateness of the ticks started.
  telemetry::family<telemetry::counter>& ticks;
  telemetry::histogram& lateness;

  impl(client& c, ticker_options o)
    : c(c),
      opts(o),
      ticks(client_access::services(c).metrics.registry.counter_family(
        "perdure_schedule_ticks_total",
        "Schedule ticks decided here, by what became of them: started, "
        "skipped (the overlap policy), missed (outside the catch-up window, "
        "or older than the latest), caught_up (started late, as catch-up).",
        {"schedule", "outcome"})),
      lateness(client_access::services(c)
                 .metrics.registry
                 .histogram_family(
                   "perdure_schedule_lateness_seconds",
                   "From a tick's due time (its time and jitter) to the "
                   "commit that started its run.",
                   telemetry::latency_buckets())
                 .with()) {}

  void count(const std::string& schedule, const char* outcome,
             std::int64_t n) {
    if (n > 0)
      ticks.with({schedule, outcome}).add(static_cast<std::uint64_t>(n));
  }

  const fire_times& times_of(const persistence::schedule_record& r) {
    auto key = std::make_tuple(r.cron, r.time_zone, r.dst_repeat);
    auto it = times.find(key);
    if (it == times.end())
      it = times.emplace(key, detail::times_of(r)).first;
    return it->second;
  }

  persistence::schedule_decision decide(const persistence::schedule_record& r,
                                        bool last_active, std::int64_t now) {
    detail::tick_state s;
    s.name = r.name;
    auto spec = detail::spec_of(r);
    s.on_overlap = spec.on_overlap;
    s.catch_up = spec.catch_up;
    s.catchup_window_ms = r.catchup_window_ms;
    s.jitter_ms = r.jitter_ms;
    s.end_ms = r.end_ms;
    s.next_tick_ms = r.next_tick_ms;
    s.buffered = r.buffered;
    s.last_active = last_active;
    auto p = detail::plan_ticks(s, times_of(r), now);
    persistence::schedule_decision d;
    for (auto t : p.start)
      d.starts.push_back({detail::tick_run_id(r.name, t), t});
    d.next_tick_ms = p.next_tick_ms;
    d.due_ms = p.due_ms;
    d.buffered = std::move(p.buffered);
    d.skipped = p.skipped;
    d.missed = p.missed;
    d.caught_up = p.caught_up;
    if (p.cancel_last)
      d.cancel_run_id = r.last_run_id;
    return d;
  }

  /// One pass: returns the schedules decided.
  std::int64_t pass() {
    std::lock_guard one{pass_mtx};
    auto& rt = client_access::services(c);
    perdure::detail::client_gate::call call{*rt.gate};
    auto now = rt.clock->now_ms();
    // Per schedule planned: its name, jitter, and whether it was left as
    // it was.
    struct planned {
      std::string name;
      std::int64_t jitter_ms;
      bool left;
    };
    std::vector<planned> due;
    auto decided = rt.stores->with([&](persistence::store& db) {
      return db.fire_schedules(
        now, opts.batch,
        [&](const persistence::schedule_record& r, bool active) {
          // Left as it was: the row's own cursor written back.
          auto unchanged = [&] {
            persistence::schedule_decision d;
            d.next_tick_ms = r.next_tick_ms;
            d.due_ms = r.due_ms;
            d.buffered = r.buffered;
            return d;
          };
          due.push_back({r.name, r.jitter_ms, true});
          auto skip = unreadable.find(r.name);
          if (skip != unreadable.end()) {
            if (std::chrono::steady_clock::now() < skip->second)
              return unchanged();
            unreadable.erase(skip);
          }
          try {
            auto d = decide(r, active, now);
            due.back().left = false;
            return d;
          } catch (const std::exception& ex) {
            // A row this process cannot read (a zone its tzdata lacks, an
            // expression an older parser refuses) is left to a process
            // that can, untouched; this one looks again in a minute.
            unreadable[r.name]
              = std::chrono::steady_clock::now() + std::chrono::minutes{1};
            rt.logger.error("perdure: schedule '{}' cannot be fired by this "
                            "process ({}); another process fires it, or "
                            "update it (looked at again in a minute)",
                            r.name, ex.what());
            return unchanged();
          }
        });
    });
    // A retried transaction planned again: the last attempt's schedules
    // are the last `decided.size()` of `due`.
    due.erase(due.begin(),
              due.end() - static_cast<std::ptrdiff_t>(
                            std::min(due.size(), decided.size())));
    auto committed = rt.clock->now_ms();
    std::int64_t effective = 0;
    for (std::size_t i = 0; i < decided.size() && i < due.size(); ++i) {
      auto& d = decided[i];
      auto& name = due[i].name;
      if (!due[i].left)
        ++effective;
      count(name, "started", d.started);
      count(name, "skipped", d.skipped);
      count(name, "missed", d.missed);
      count(name, "caught_up", d.caught_up);
      // One sample per tick started: from its due time (tick and jitter).
      for (auto& start : d.starts)
        lateness.observe(
          static_cast<double>(committed - start.tick_ms
                              - detail::jitter_of(name, start.tick_ms,
                                                  due[i].jitter_ms))
          / 1000.0);
    }
    last_effective = effective;
    for (auto& d : decided)
      if (!d.cancel_run_id.empty()) {
        // After the commit: the new run started; the old one is asked to
        // stop (an ended one says so, which is fine).
        try {
          c.cancel(d.cancel_run_id);
        } catch (const perdure::error&) {
        }
      }
    return static_cast<std::int64_t>(decided.size());
  }

  void run() {
    auto& rt = client_access::services(c);
    std::unique_lock guard{mtx};
    while (!stopping) {
      guard.unlock();
      std::optional<std::int64_t> due;
      std::int64_t last = 0;
      try {
        while ((last = pass()) == opts.batch) {
        } // more due: another pass at once
        due = rt.stores->with(
          [](persistence::store& db) { return db.next_schedule_due(); });
      } catch (const std::exception& ex) {
        rt.logger.warn("perdure: a schedule pass failed (tried again in {} "
                       "ms): {}",
                       opts.poll.count(), ex.what());
      }
      guard.lock();
      auto wait = opts.poll;
      if (due) {
        auto until = std::chrono::milliseconds{*due - rt.clock->now_ms()};
        wait = std::clamp(until, std::chrono::milliseconds{0}, opts.poll);
        // Due but not decided: another process holds the row (a long
        // catch-up), or it is one this process cannot read: look again
        // shortly (or at the poll), not at once.
        if (wait.count() == 0 && last == 0)
          wait = std::min(opts.poll, std::chrono::milliseconds{10});
        if (wait.count() == 0 && last_effective == 0)
          wait = opts.poll;
      }
      if (wait > std::chrono::milliseconds{0} && !jumped)
        wake.wait_for(guard, wait, [&] { return stopping || jumped; });
      jumped = false;
    }
  }
};

ticker::ticker(client& c, ticker_options opts)
  : impl_(std::make_shared<impl>(c, opts)) {
  if (opts.poll <= std::chrono::milliseconds{0} || opts.batch <= 0)
    throw perdure::error(errc::invalid_argument,
                         "ticker options: poll and batch must be positive");
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running,
                         "start the runtime before its schedule ticker");
  // A manual clock's jump wakes the loop (the clock may outlive us).
  std::weak_ptr<impl> weak = impl_;
  rt.clock->on_jump([weak] {
    if (auto self = weak.lock()) {
      std::lock_guard guard{self->mtx};
      self->jumped = true;
      self->wake.notify_all();
    }
  });
  impl_->thread = std::thread{[self = impl_.get()] { self->run(); }};
}

ticker::~ticker() {
  {
    std::lock_guard guard{impl_->mtx};
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

std::int64_t ticker::fire_due() {
  return impl_->pass();
}

} // namespace perdure::schedules
