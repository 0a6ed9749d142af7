#include "perdure/schedules/schedule.hpp"

#include <algorithm>

#include "perdure/clock.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/runtime/client_access.hpp"
#include "perdure/detail/runtime/client_gate.hpp"
#include "perdure/detail/runtime/ids.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/schedules/detail/planning/tick_plan.hpp"
#include "perdure/schedules/detail/stored_schedule.hpp"

namespace perdure::schedules {

using perdure::detail::client_access;
using perdure::detail::client_gate;
using namespace std::chrono;

namespace {

std::int64_t to_ms(time_point t) {
  return duration_cast<milliseconds>(t.time_since_epoch()).count();
}

time_point from_ms(std::int64_t ms) {
  return time_point{duration_cast<time_point::duration>(milliseconds{ms})};
}

/// Runs `f(store, now_ms)` inside `c`'s gate (a stopped runtime refuses).
template <class F>
auto with_store(client& c, F&& f) {
  auto& rt = client_access::services(c);
  if (!rt.runs->running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  client_gate::call call{*rt.gate};
  auto now = rt.clock->now_ms();
  return rt.stores->with(
    [&](persistence::store& db) { return f(db, now); });
}

[[noreturn]] void no_such(std::string_view name) {
  throw perdure::error(errc::not_found,
                       "no schedule '" + std::string{name}
                         + "' (schedules::list shows the schedules there are)");
}

/// The first tick of `s` at or after `from_ms` (and its start).
std::optional<std::int64_t> first_tick(const persistence::schedule_record& s,
                                       const fire_times& times,
                                       std::int64_t from_ms) {
  auto after = std::max(from_ms, s.start_ms ? *s.start_ms - 1 : from_ms);
  return detail::next_tick_after(times, after, s.end_ms);
}

void set_cursor(persistence::schedule_record& s, std::int64_t now_ms) {
  auto times = detail::times_of(s);
  s.next_tick_ms = first_tick(s, times, now_ms);
  s.due_ms.reset();
  if (s.next_tick_ms)
    s.due_ms = *s.next_tick_ms
               + detail::jitter_of(s.name, *s.next_tick_ms, s.jitter_ms);
}

schedule_info info_of(const persistence::schedule_record& r) {
  schedule_info out;
  out.spec = detail::spec_of(r);
  out.owner = r.owner;
  if (r.due_ms && !r.paused)
    out.next_fire = from_ms(*r.due_ms);
  if (r.last_tick_ms)
    out.last_fire = from_ms(*r.last_tick_ms);
  out.last_run_id = r.last_run_id;
  out.started = r.started;
  out.skipped = r.skipped;
  out.missed = r.missed;
  out.caught_up = r.caught_up;
  for (auto t : r.buffered)
    out.buffered.push_back(from_ms(t));
  out.created_at = from_ms(r.created_at_ms);
  out.updated_at = from_ms(r.updated_at_ms);
  return out;
}

/// Whether two records define the same schedule (what `apply` compares).
bool same_definition(const persistence::schedule_record& a,
                     const persistence::schedule_record& b) {
  return a.workflow == b.workflow && a.queue == b.queue && a.cron == b.cron
         && a.time_zone == b.time_zone && a.dst_repeat == b.dst_repeat
         && a.inputs == b.inputs && a.overlap == b.overlap
         && a.catchup == b.catchup
         && a.catchup_window_ms == b.catchup_window_ms
         && a.jitter_ms == b.jitter_ms && a.start_ms == b.start_ms
         && a.end_ms == b.end_ms && a.paused == b.paused;
}

} // namespace

void create(client& c, const schedule_spec& spec) {
  auto r = detail::record_of(spec); // validates
  with_store(c, [&](persistence::store& db, std::int64_t now) {
    r.created_at_ms = r.updated_at_ms = now;
    set_cursor(r, now);
    if (!db.create_schedule(r))
      throw perdure::error(errc::conflicting_id,
                           "schedule '" + spec.name
                             + "' exists (schedules::update changes it)");
  });
}

void update(client& c, const schedule_spec& spec) {
  auto r = detail::record_of(spec);
  with_store(c, [&](persistence::store& db, std::int64_t now) {
    auto old = db.get_schedule(spec.name);
    if (!old)
      no_such(spec.name);
    r.owner = old->owner;
    r.buffered = old->buffered;
    r.updated_at_ms = now;
    set_cursor(r, now);
    if (!db.update_schedule(r))
      no_such(spec.name);
  });
}

void pause(client& c, std::string_view name) {
  with_store(c, [&](persistence::store& db, std::int64_t now) {
    auto s = db.get_schedule(name);
    if (!s || !db.set_schedule_paused(name, true, s->next_tick_ms, s->due_ms,
                                      now))
      no_such(name);
  });
}

bool resume(client& c, std::string_view name) {
  return with_store(c, [&](persistence::store& db, std::int64_t now) {
    auto s = db.get_schedule(name);
    if (!s)
      no_such(name);
    if (!s->paused)
      return false; // its due ticks stay due (catch-up decides them)
    set_cursor(*s, now);
    if (!db.set_schedule_paused(name, false, s->next_tick_ms, s->due_ms, now))
      no_such(name);
    return true;
  });
}

std::string trigger(client& c, std::string_view name) {
  return with_store(c, [&](persistence::store& db, std::int64_t now) {
    auto id = detail::tick_run_id(name, now);
    id.insert(id.find(':', 6) + 1, "trigger:");
    if (!db.start_schedule_runs(name, {{id, now}}, now))
      no_such(name);
    return id;
  });
}

std::int64_t backfill(client& c, std::string_view name, time_point from,
                      time_point to) {
  constexpr std::int64_t most = 100'000;
  if (to < from)
    throw perdure::error(errc::invalid_argument,
                         "a backfill's end is before its start: give the "
                         "earlier time first");
  return with_store(c, [&](persistence::store& db, std::int64_t now) {
    auto s = db.get_schedule(name);
    if (!s)
      no_such(name);
    auto times = detail::times_of(*s);
    // Every tick first (a range too long is refused before any start).
    std::vector<persistence::schedule_decision::start> ticks;
    for (auto t = detail::next_tick_after(times, to_ms(from) - 1, to_ms(to));
         t; t = detail::next_tick_after(times, *t, to_ms(to))) {
      if (static_cast<std::int64_t>(ticks.size()) == most)
        throw perdure::error(errc::invalid_argument,
                             "a backfill of more than 100 000 ticks: split "
                             "the range (nothing was started)");
      ticks.push_back({detail::tick_run_id(name, *t), *t});
    }
    std::int64_t started = 0;
    for (std::size_t at = 0; at < ticks.size(); at += 1000) {
      std::vector<persistence::schedule_decision::start> chunk(
        ticks.begin() + static_cast<std::ptrdiff_t>(at),
        ticks.begin()
          + static_cast<std::ptrdiff_t>(std::min(at + 1000, ticks.size())));
      auto n = db.start_schedule_runs(name, chunk, now);
      if (!n)
        no_such(name);
      started += *n;
    }
    return started;
  });
}

void remove(client& c, std::string_view name) {
  with_store(c, [&](persistence::store& db, std::int64_t) {
    if (!db.remove_schedule(name))
      no_such(name);
  });
}

std::vector<schedule_info> list(client& c) {
  return with_store(c, [&](persistence::store& db, std::int64_t) {
    std::vector<schedule_info> out;
    for (auto& r : db.list_schedules())
      out.push_back(info_of(r));
    return out;
  });
}

schedule_info show(client& c, std::string_view name) {
  return with_store(c, [&](persistence::store& db, std::int64_t) {
    auto r = db.get_schedule(name);
    if (!r)
      no_such(name);
    return info_of(*r);
  });
}

apply_result apply(client& c, std::string_view owner,
                   const std::vector<schedule_spec>& specs) {
  if (owner.empty())
    throw perdure::error(errc::invalid_argument,
                         "apply needs an owner name (the code that owns "
                         "these schedules, e.g. \"billing-service\")");
  std::vector<persistence::schedule_record> wanted;
  for (auto& s : specs) {
    if (std::any_of(wanted.begin(), wanted.end(),
                    [&](auto& w) { return w.name == s.name; }))
      throw perdure::error(errc::invalid_argument,
                           "apply got schedule '" + s.name
                             + "' twice: give each schedule once");
    wanted.push_back(detail::record_of(s)); // all valid before any change
    wanted.back().owner = std::string{owner};
  }
  return with_store(c, [&](persistence::store& db, std::int64_t now) {
    apply_result out;
    auto existing = db.list_schedules();
    auto find = [&](const std::string& name) {
      return std::find_if(existing.begin(), existing.end(),
                          [&](auto& e) { return e.name == name; });
    };
    for (auto& w : wanted) {
      auto it = find(w.name);
      if (it != existing.end() && it->owner != owner)
        throw perdure::error(
          errc::conflicting_id,
          "schedule '" + w.name + "' belongs to "
            + (it->owner.empty() ? std::string{"no owner (made by create)"}
                                 : "owner '" + it->owner + "'")
            + ": remove it, or give it another name");
    }
    for (auto& w : wanted) {
      auto it = find(w.name);
      w.created_at_ms = w.updated_at_ms = now;
      if (it == existing.end()) {
        set_cursor(w, now);
        if (!db.create_schedule(w))
          throw perdure::error(errc::conflicting_id,
                               "schedule '" + w.name
                                 + "' was made meanwhile: apply again");
        ++out.created;
      } else if (same_definition(*it, w)) {
        ++out.unchanged;
      } else {
        w.buffered = it->buffered;
        set_cursor(w, now);
        if (!db.update_schedule(w))
          throw perdure::error(errc::conflicting_id,
                               "schedule '" + w.name
                                 + "' was removed meanwhile: apply again");
        ++out.updated;
      }
    }
    for (auto& e : existing)
      if (e.owner == owner
          && std::none_of(wanted.begin(), wanted.end(),
                          [&](auto& w) { return w.name == e.name; })) {
        db.remove_schedule(e.name);
        ++out.removed;
      }
    return out;
  });
}

} // namespace perdure::schedules
