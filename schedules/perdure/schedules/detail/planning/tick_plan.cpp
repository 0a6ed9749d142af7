#include "perdure/schedules/detail/planning/tick_plan.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace perdure::schedules::detail {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::sys_seconds;

std::int64_t to_ms(sys_seconds t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch())
    .count();
}

} // namespace

std::int64_t jitter_of(std::string_view name, std::int64_t tick_ms,
                       std::int64_t jitter_ms) {
  if (jitter_ms <= 0)
    return 0;
  // FNV-1a over the name, then splitmix64 with the tick: the same delay
  // in every process, spread over the range.
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name)
    h = (h ^ c) * 0x100000001b3ULL;
  std::uint64_t x = h + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(tick_ms);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<std::int64_t>(x % static_cast<std::uint64_t>(jitter_ms + 1));
}

std::optional<std::int64_t> next_tick_after(const fire_times& times,
                                            std::int64_t after_ms,
                                            std::optional<std::int64_t> end_ms) {
  // Ticks are whole seconds: the first after `after_ms` is the first
  // after its second.
  auto after = sys_seconds{std::chrono::floor<seconds>(milliseconds{after_ms})};
  auto next = times.next_after(after);
  if (!next)
    return std::nullopt;
  auto ms = to_ms(*next);
  if (end_ms && ms > *end_ms)
    return std::nullopt;
  return ms;
}

tick_plan plan_ticks(const tick_state& s, const fire_times& times,
                     std::int64_t now_ms) {
  tick_plan p;
  p.buffered = s.buffered;
  bool active = s.last_active;
  // A waiting tick goes first, once the run before it has ended.
  if (!active && !p.buffered.empty()) {
    p.start.push_back(p.buffered.front());
    p.buffered.erase(p.buffered.begin());
    active = true;
  }
  // The ticks due now, oldest first.
  std::vector<std::int64_t> due;
  auto tick = s.next_tick_ms;
  while (tick && *tick + jitter_of(s.name, *tick, s.jitter_ms) <= now_ms
         && static_cast<std::int64_t>(due.size()) < max_ticks_per_pass) {
    due.push_back(*tick);
    tick = next_tick_after(times, *tick, s.end_ms);
  }
  p.decided = static_cast<std::int64_t>(due.size());
  p.next_tick_ms = tick;
  // Outside the window: missed. Inside, catchup::latest keeps the newest.
  std::vector<std::int64_t> fire;
  for (auto t : due) {
    // Late by more than the window from when it was due (its jitter too).
    if (now_ms - (t + jitter_of(s.name, t, s.jitter_ms)) > s.catchup_window_ms)
      ++p.missed;
    else
      fire.push_back(t);
  }
  // A pass that stopped at the per-pass limit has newer ticks due: the
  // newest of this pass is not the newest due, but the next pass decides
  // those; under `latest` only the newest due overall must fire, so this
  // pass's are missed unless the cursor caught up.
  bool more_due = tick && *tick + jitter_of(s.name, *tick, s.jitter_ms) <= now_ms;
  if (s.catch_up == catchup::latest && !fire.empty()) {
    auto keep = more_due ? 0u : 1u;
    p.missed += static_cast<std::int64_t>(fire.size() - keep);
    fire.erase(fire.begin(), fire.end() - keep);
  }
  if (s.on_overlap == overlap::cancel_other && !fire.empty()) {
    // Each would cancel the one before: only the newest runs (and none of
    // this pass's if a newer tick is due, which the next pass starts).
    auto keep = more_due ? 0u : 1u;
    p.skipped += static_cast<std::int64_t>(fire.size() - keep);
    fire.erase(fire.begin(), fire.end() - keep);
  }
  for (std::size_t i = 0; i < fire.size(); ++i) {
    auto t = fire[i];
    bool newest = i + 1 == fire.size() && !more_due;
    if (active) {
      switch (s.on_overlap) {
        case overlap::skip:
          ++p.skipped;
          continue;
        case overlap::buffer_one:
          if (p.buffered.empty())
            p.buffered.push_back(t);
          else
            ++p.skipped;
          continue;
        case overlap::buffer_all:
          if (p.buffered.size() < max_buffered)
            p.buffered.push_back(t);
          else
            ++p.skipped;
          continue;
        case overlap::cancel_other:
          // Only the run that was going before this pass is cancelled;
          // one started by this pass is the buffered tick's, never cut.
          if (p.start.empty())
            p.cancel_last = true;
          else {
            ++p.skipped;
            continue;
          }
          break;
        case overlap::allow_all:
          break;
      }
    }
    p.start.push_back(t);
    if (!newest)
      ++p.caught_up;
    active = true;
  }
  if (p.next_tick_ms)
    p.due_ms = *p.next_tick_ms + jitter_of(s.name, *p.next_tick_ms, s.jitter_ms);
  if (!p.buffered.empty())
    p.due_ms = p.due_ms ? std::min(*p.due_ms, now_ms + buffered_recheck_ms)
                        : now_ms + buffered_recheck_ms;
  return p;
}

std::string tick_run_id(std::string_view name, std::int64_t tick_ms) {
  using namespace std::chrono;
  auto t = sys_time<milliseconds>{milliseconds{tick_ms}};
  auto day = floor<days>(t);
  year_month_day d{day};
  hh_mm_ss tod{t - day};
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d",
                        static_cast<int>(d.year()),
                        static_cast<unsigned>(d.month()),
                        static_cast<unsigned>(d.day()),
                        static_cast<int>(tod.hours().count()),
                        static_cast<int>(tod.minutes().count()),
                        static_cast<int>(tod.seconds().count()));
  std::string out = "sched:";
  out += name;
  out += ':';
  out.append(buf, static_cast<std::size_t>(n));
  if (auto ms = tod.subseconds().count(); ms != 0) {
    n = std::snprintf(buf, sizeof buf, ".%03d", static_cast<int>(ms));
    out.append(buf, static_cast<std::size_t>(n));
  }
  out += 'Z';
  return out;
}

} // namespace perdure::schedules::detail
