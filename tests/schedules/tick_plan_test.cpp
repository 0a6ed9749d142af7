// A firing pass's decisions, without a database: catch-up and its window,
// each overlap policy, jitter, the end time, the per-pass limit, and over
// 10 000 ticks in three zones across daylight-saving changes, every tick
// decided exactly once.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "perdure/schedules/detail/planning/tick_plan.hpp"

namespace perdure::schedules::detail {
namespace {

using namespace std::chrono;

constexpr std::int64_t minute = 60'000;
constexpr std::int64_t hour = 60 * minute;

std::int64_t ms(int y, unsigned m, unsigned d, int h = 0, int mi = 0) {
  return duration_cast<milliseconds>(
           (sys_days{year{y} / month{m} / day{d}} + hours{h} + minutes{mi})
             .time_since_epoch())
    .count();
}

fire_times hourly() {
  return fire_times{cron_expression::parse("0 * * * *"), "UTC"};
}

tick_state at_tick(std::int64_t t) {
  tick_state s;
  s.name = "report";
  s.next_tick_ms = t;
  return s;
}

TEST(TickPlan, AnOnTimeTickStartsAndTheCursorMovesOn) {
  auto t = ms(2026, 6, 1, 2);
  auto p = plan_ticks(at_tick(t), hourly(), t + 10);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t});
  EXPECT_EQ(p.next_tick_ms, t + hour);
  EXPECT_EQ(p.due_ms, t + hour);
  EXPECT_EQ(p.decided, 1);
  EXPECT_EQ(p.missed + p.skipped + p.caught_up, 0);
  // Before its time, nothing.
  auto early = plan_ticks(at_tick(t), hourly(), t - 1);
  EXPECT_TRUE(early.start.empty());
  EXPECT_EQ(early.next_tick_ms, t);
  EXPECT_EQ(early.decided, 0);
}

TEST(TickPlan, LatestCatchUpFiresTheNewestAndCountsTheRestMissed) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.catchup_window_ms = 24 * hour;
  auto p = plan_ticks(s, hourly(), t + 4 * hour + 5);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t + 4 * hour});
  EXPECT_EQ(p.missed, 4);
  EXPECT_EQ(p.caught_up, 0);
  EXPECT_EQ(p.next_tick_ms, t + 5 * hour);
}

TEST(TickPlan, AllCatchUpFiresEachInsideTheWindowOldestFirst) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.catch_up = catchup::all;
  s.on_overlap = overlap::allow_all;
  s.catchup_window_ms = 2 * hour + 30 * minute;
  auto p = plan_ticks(s, hourly(), t + 4 * hour + 5);
  // 02:00 and 03:00 are older than the window: missed.
  EXPECT_EQ(p.start, (std::vector<std::int64_t>{t + 2 * hour, t + 3 * hour,
                                                t + 4 * hour}));
  EXPECT_EQ(p.missed, 2);
  EXPECT_EQ(p.caught_up, 2);
}

TEST(TickPlan, SkipLeavesARunningRunAlone) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.last_active = true;
  auto p = plan_ticks(s, hourly(), t + 5);
  EXPECT_TRUE(p.start.empty());
  EXPECT_EQ(p.skipped, 1);
  EXPECT_EQ(p.next_tick_ms, t + hour);
  // With catch-up of all, a first start makes the rest overlap.
  s.last_active = false;
  s.catch_up = catchup::all;
  s.catchup_window_ms = 24 * hour;
  p = plan_ticks(s, hourly(), t + 2 * hour + 5);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t});
  EXPECT_EQ(p.skipped, 2);
}

TEST(TickPlan, BufferOneWaitsForTheEndThenStarts) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.on_overlap = overlap::buffer_one;
  s.catch_up = catchup::all;
  s.catchup_window_ms = 24 * hour;
  s.last_active = true;
  auto p = plan_ticks(s, hourly(), t + 2 * hour + 5);
  EXPECT_TRUE(p.start.empty());
  EXPECT_EQ(p.buffered, std::vector<std::int64_t>{t});
  EXPECT_EQ(p.skipped, 2);
  EXPECT_EQ(p.due_ms, t + 2 * hour + 5 + buffered_recheck_ms);
  // The run ends: the buffered tick starts, before any new one.
  s.buffered = p.buffered;
  s.next_tick_ms = p.next_tick_ms;
  s.last_active = false;
  auto q = plan_ticks(s, hourly(), t + 2 * hour + 500);
  EXPECT_EQ(q.start, std::vector<std::int64_t>{t});
  EXPECT_TRUE(q.buffered.empty());
}

TEST(TickPlan, BufferAllKeepsEveryTickInOrderUpToItsBound) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.on_overlap = overlap::buffer_all;
  s.catch_up = catchup::all;
  s.catchup_window_ms = 24 * hour;
  s.last_active = true;
  auto p = plan_ticks(s, hourly(), t + 3 * hour + 5);
  EXPECT_EQ(p.buffered, (std::vector<std::int64_t>{t, t + hour, t + 2 * hour,
                                                   t + 3 * hour}));
  s.buffered.assign(max_buffered, t - hour);
  p = plan_ticks(s, hourly(), t + 3 * hour + 5);
  EXPECT_EQ(p.buffered.size(), max_buffered);
  EXPECT_EQ(p.skipped, 4);
}

TEST(TickPlan, CancelOtherCancelsTheRunningOneOnce) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.on_overlap = overlap::cancel_other;
  s.last_active = true;
  auto p = plan_ticks(s, hourly(), t + 5);
  EXPECT_TRUE(p.cancel_last);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t});
  s.catch_up = catchup::all;
  s.catchup_window_ms = 24 * hour;
  p = plan_ticks(s, hourly(), t + 2 * hour + 5);
  EXPECT_TRUE(p.cancel_last);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t + 2 * hour});
  EXPECT_EQ(p.skipped, 2);
}

TEST(TickPlan, CancelOtherStartsNothingAPassLaterCancels) {
  auto t = ms(2026, 1, 1);
  auto s = at_tick(t);
  s.on_overlap = overlap::cancel_other;
  s.catch_up = catchup::all;
  s.catchup_window_ms = 10'000 * hour;
  auto now = t + 1'499 * hour + 5; // more than one pass's ticks due
  auto p = plan_ticks(s, hourly(), now);
  EXPECT_TRUE(p.start.empty());
  EXPECT_FALSE(p.cancel_last);
  EXPECT_EQ(p.skipped, max_ticks_per_pass);
  s.next_tick_ms = p.next_tick_ms;
  p = plan_ticks(s, hourly(), now);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t + 1'499 * hour});
}

TEST(TickPlan, TheWindowCountsFromTheJitteredDueTime) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.jitter_ms = 50'000;
  s.catchup_window_ms = 60'000;
  auto due = t + jitter_of("report", t, 50'000);
  EXPECT_EQ(plan_ticks(s, hourly(), due + 60'000).start,
            std::vector<std::int64_t>{t});
  EXPECT_EQ(plan_ticks(s, hourly(), due + 60'001).missed, 1);
}

TEST(TickPlan, AllowAllStartsAlongside) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.on_overlap = overlap::allow_all;
  s.last_active = true;
  auto p = plan_ticks(s, hourly(), t + 5);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t});
  EXPECT_FALSE(p.cancel_last);
}

TEST(TickPlan, NoTickAfterTheEnd) {
  auto t = ms(2026, 6, 1, 2);
  auto s = at_tick(t);
  s.end_ms = t + hour;
  auto p = plan_ticks(s, hourly(), t + 5);
  EXPECT_EQ(p.next_tick_ms, t + hour); // the end itself still fires
  s.next_tick_ms = p.next_tick_ms;
  p = plan_ticks(s, hourly(), t + hour + 5);
  EXPECT_EQ(p.start, std::vector<std::int64_t>{t + hour});
  EXPECT_EQ(p.next_tick_ms, std::nullopt);
  EXPECT_EQ(p.due_ms, std::nullopt);
}

TEST(TickPlan, JitterDelaysATickTheSameEverywhere) {
  auto t = ms(2026, 6, 1, 2);
  auto j = jitter_of("report", t, 30'000);
  EXPECT_EQ(j, jitter_of("report", t, 30'000));
  EXPECT_GE(j, 0);
  EXPECT_LE(j, 30'000);
  std::set<std::int64_t> spread;
  for (int i = 0; i < 100; ++i)
    spread.insert(jitter_of("report", t + i * hour, 30'000));
  EXPECT_GT(spread.size(), 90u);
  auto s = at_tick(t);
  s.jitter_ms = 30'000;
  EXPECT_TRUE(plan_ticks(s, hourly(), t + j - 1).start.empty());
  EXPECT_EQ(plan_ticks(s, hourly(), t + j).start, std::vector<std::int64_t>{t});
  EXPECT_EQ(plan_ticks(s, hourly(), t + j).due_ms,
            t + hour + jitter_of("report", t + hour, 30'000));
}

TEST(TickPlan, ALongOutageIsDecidedOverSeveralPasses) {
  auto t = ms(2026, 1, 1);
  auto s = at_tick(t);
  s.catch_up = catchup::all;
  s.on_overlap = overlap::allow_all;
  s.catchup_window_ms = 10'000 * hour;
  auto now = t + 1'499 * hour + 5; // 1 500 ticks due
  auto p = plan_ticks(s, hourly(), now);
  EXPECT_EQ(p.decided, max_ticks_per_pass);
  EXPECT_EQ(p.start.size(), static_cast<std::size_t>(max_ticks_per_pass));
  EXPECT_EQ(p.caught_up, max_ticks_per_pass);
  s.next_tick_ms = p.next_tick_ms;
  auto q = plan_ticks(s, hourly(), now);
  EXPECT_EQ(q.decided, 500);
  EXPECT_EQ(q.start.front(), t + 1'000 * hour);
  EXPECT_EQ(q.start.back(), t + 1'499 * hour);
  EXPECT_EQ(q.caught_up, 499);
  // Under `latest`, only the newest of all 1 500 starts.
  s = at_tick(t);
  s.catchup_window_ms = 10'000 * hour;
  p = plan_ticks(s, hourly(), now);
  EXPECT_TRUE(p.start.empty());
  s.next_tick_ms = p.next_tick_ms;
  q = plan_ticks(s, hourly(), now);
  EXPECT_EQ(q.start, std::vector<std::int64_t>{t + 1'499 * hour});
  EXPECT_EQ(p.missed + q.missed, 1'499);
}

TEST(TickPlan, RunIdsNameTheTickInUtc) {
  EXPECT_EQ(tick_run_id("nightly", ms(2026, 11, 28, 2)),
            "sched:nightly:2026-11-28T02:00:00Z");
  EXPECT_EQ(tick_run_id("fast", ms(2026, 3, 8, 7) + 15'250),
            "sched:fast:2026-03-08T07:00:15.250Z");
}

/// 10 000+ ticks in three zones across both daylight-saving changes of
/// 2026, passes at random times (some after outages longer than the
/// window): every tick of the zone's sequence is decided exactly once;
/// the started ones are exactly those inside the window at their pass.
TEST(TickPlan, EveryTickIsDecidedOnceAcrossDaylightSaving) {
  std::mt19937_64 rng{26};
  std::int64_t total = 0;
  for (const char* zone :
       {"America/New_York", "Europe/Berlin", "Australia/Lord_Howe"}) {
    fire_times times{cron_expression::parse("*/30 * * * *"), zone};
    auto from = ms(2026, 3, 1), to = ms(2026, 11, 15);
    // The expected sequence.
    std::vector<std::int64_t> want;
    for (auto t = next_tick_after(times, from, std::nullopt); t && *t < to;
         t = next_tick_after(times, *t, std::nullopt))
      want.push_back(*t);
    tick_state s;
    s.name = zone;
    s.catch_up = catchup::all;
    s.on_overlap = overlap::allow_all;
    s.catchup_window_ms = 6 * hour;
    s.next_tick_ms = want.front();
    std::map<std::int64_t, int> started;
    std::int64_t missed = 0, expect_missed = 0;
    auto now = from;
    while (s.next_tick_ms && *s.next_tick_ms < to) {
      // Mostly on time; now and then an outage of up to 12 hours.
      now += rng() % 20 == 0 ? static_cast<std::int64_t>(rng() % (12 * hour))
                             : static_cast<std::int64_t>(rng() % (40 * minute));
      now = std::min(now, to - 1);
      for (auto t = s.next_tick_ms; t && *t <= now;
           t = next_tick_after(times, *t, std::nullopt))
        if (now - *t > s.catchup_window_ms)
          ++expect_missed;
      auto p = plan_ticks(s, times, now);
      for (auto t : p.start)
        ++started[t];
      missed += p.missed;
      s.next_tick_ms = p.next_tick_ms;
      if (now == to - 1)
        break;
    }
    std::int64_t starts = 0;
    for (auto t : want) {
      auto it = started.find(t);
      if (it != started.end()) {
        EXPECT_EQ(it->second, 1) << zone << " tick " << t << " started twice";
        ++starts;
      }
    }
    EXPECT_EQ(started.size(), static_cast<std::size_t>(starts))
      << zone << ": a start that is not a tick";
    EXPECT_EQ(missed, expect_missed) << zone;
    EXPECT_EQ(starts + missed, static_cast<std::int64_t>(want.size())) << zone;
    total += static_cast<std::int64_t>(want.size());
  }
  EXPECT_GE(total, 10'000);
}

} // namespace
} // namespace perdure::schedules::detail
