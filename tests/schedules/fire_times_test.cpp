// Fire instants in time zones, across daylight-saving changes: a skipped
// local time fires once at the gap's end, a repeated one once (or twice
// with dst_repeat::both), and nothing else moves.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "perdure/error.hpp"
#include "perdure/schedules/fire_times.hpp"

namespace perdure::schedules {
namespace {

using namespace std::chrono;

sys_seconds utc(int y, unsigned m, unsigned d, int h = 0, int mi = 0,
                int s = 0) {
  return sys_days{year{y} / month{m} / day{d}} + hours{h} + minutes{mi}
         + seconds{s};
}

std::vector<sys_seconds> fires(const fire_times& f, sys_seconds from,
                               sys_seconds to) {
  std::vector<sys_seconds> out;
  for (auto t = f.next_after(from); t && *t < to; t = f.next_after(*t))
    out.push_back(*t);
  return out;
}

fire_times in(const char* cron, const char* zone,
              dst_repeat r = dst_repeat::first) {
  return fire_times{cron_expression::parse(cron), zone, r};
}

TEST(FireTimes, UtcIsTheExpressionAsIs) {
  auto f = in("0 2 * * *", "UTC");
  EXPECT_EQ(f.next_after(utc(2026, 3, 8)), utc(2026, 3, 8, 2));
  EXPECT_EQ(f.next_after(utc(2026, 3, 8, 2)), utc(2026, 3, 9, 2));
}

// New York springs forward on 2026-03-08 at 02:00 EST (07:00 UTC) to
// 03:00 EDT, and falls back on 2026-11-01 at 02:00 EDT (06:00 UTC).
TEST(FireTimes, ASkippedLocalTimeFiresOnceAtTheGapsEnd) {
  auto f = in("30 2 * * *", "America/New_York");
  auto got = fires(f, utc(2026, 3, 6), utc(2026, 3, 11));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], utc(2026, 3, 6, 7, 30));  // 02:30 EST
  EXPECT_EQ(got[1], utc(2026, 3, 7, 7, 30));
  EXPECT_EQ(got[2], utc(2026, 3, 8, 7, 0));   // 03:00 EDT: the gap's end
  EXPECT_EQ(got[3], utc(2026, 3, 9, 6, 30));  // 02:30 EDT
  EXPECT_EQ(got[4], utc(2026, 3, 10, 6, 30));
}

TEST(FireTimes, SeveralSkippedTimesFireOnceTogether) {
  auto f = in("*/15 * * * *", "America/New_York");
  auto got = fires(f, utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7, 31));
  // 01:30 01:45 EST, then 02:00..02:45 all at 03:00 EDT once, then 03:15...
  std::vector<sys_seconds> want{utc(2026, 3, 8, 6, 45), utc(2026, 3, 8, 7, 0),
                                utc(2026, 3, 8, 7, 15), utc(2026, 3, 8, 7, 30)};
  EXPECT_EQ(got, want);
}

TEST(FireTimes, ARepeatedLocalTimeFiresOnceAtItsFirstPass) {
  auto f = in("30 1 * * *", "America/New_York");
  auto got = fires(f, utc(2026, 10, 31), utc(2026, 11, 3));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], utc(2026, 10, 31, 5, 30)); // EDT
  EXPECT_EQ(got[1], utc(2026, 11, 1, 5, 30));  // the first 01:30 (EDT)
  EXPECT_EQ(got[2], utc(2026, 11, 2, 6, 30));  // EST
  // From inside the second pass, the next fire is the next day's.
  EXPECT_EQ(f.next_after(utc(2026, 11, 1, 6, 0)), utc(2026, 11, 2, 6, 30));
}

TEST(FireTimes, BothFiresARepeatedTimeAtEachPass) {
  auto f = in("30 1 * * *", "America/New_York", dst_repeat::both);
  auto got = fires(f, utc(2026, 10, 31, 12), utc(2026, 11, 2, 12));
  std::vector<sys_seconds> want{utc(2026, 11, 1, 5, 30),
                                utc(2026, 11, 1, 6, 30),
                                utc(2026, 11, 2, 6, 30)};
  EXPECT_EQ(got, want);
  // From between the passes, the second pass is next.
  EXPECT_EQ(f.next_after(utc(2026, 11, 1, 5, 30)), utc(2026, 11, 1, 6, 30));
}

TEST(FireTimes, IntervalsThroughAFallBack) {
  // The repeated hour's second pass fires nothing by default...
  auto first = in("0 * * * *", "America/New_York");
  auto got = fires(first, utc(2026, 11, 1, 3, 30), utc(2026, 11, 1, 9, 30));
  // 00:00 EDT (04), 01:00 EDT (05), [01:00 EST skipped], 02:00 EST (07) ...
  std::vector<sys_seconds> want{utc(2026, 11, 1, 4), utc(2026, 11, 1, 5),
                                utc(2026, 11, 1, 7), utc(2026, 11, 1, 8),
                                utc(2026, 11, 1, 9)};
  EXPECT_EQ(got, want);
  // ...and every hour with both.
  auto both = in("0 * * * *", "America/New_York", dst_repeat::both);
  got = fires(both, utc(2026, 11, 1, 3, 30), utc(2026, 11, 1, 9, 30));
  want.insert(want.begin() + 2, utc(2026, 11, 1, 6));
  EXPECT_EQ(got, want);
}

TEST(FireTimes, BothFiresEveryTimeOfTheRepeatedHourTwice) {
  // 01:00 .. 01:45 EDT (05:00 .. 05:45 UTC), then again in EST (06:00 ..
  // 06:45 UTC), then 02:00 EST.
  auto f = in("*/15 * * * *", "America/New_York", dst_repeat::both);
  auto got = fires(f, utc(2026, 11, 1, 4, 50), utc(2026, 11, 1, 7, 1));
  std::vector<sys_seconds> want;
  for (int m = 0; m < 60; m += 15)
    want.push_back(utc(2026, 11, 1, 5, m));
  for (int m = 0; m < 60; m += 15)
    want.push_back(utc(2026, 11, 1, 6, m));
  want.push_back(utc(2026, 11, 1, 7, 0));
  EXPECT_EQ(got, want);
  // Every second as well, and from the middle of the first pass.
  auto s = in("* * * * * *", "America/New_York", dst_repeat::both);
  auto at = utc(2026, 11, 1, 5, 30);
  std::int64_t n = 0;
  for (auto t = s.next_after(at); t && *t <= utc(2026, 11, 1, 7); t = s.next_after(*t)) {
    EXPECT_EQ(*t, at + seconds{1}) << "a second skipped or repeated";
    at = *t;
    ++n;
  }
  EXPECT_EQ(n, 90 * 60);
}

// Lord Howe Island moves its clocks by half an hour: 02:00 -> 02:30 on
// 2026-10-04 (15:30 UTC on the 3rd, from +10:30 to +11), and back
// 02:00 -> 01:30 on 2026-04-05 (15:00 UTC on the 4th).
TEST(FireTimes, HalfHourShifts) {
  auto f = in("15 2 * * *", "Australia/Lord_Howe");
  EXPECT_EQ(f.next_after(utc(2026, 10, 3, 12)), utc(2026, 10, 3, 15, 30));
  auto g = in("45 1 * * *", "Australia/Lord_Howe");
  // 01:45 happens at 14:45 UTC (+11) and again at 15:15 UTC (+10:30).
  EXPECT_EQ(g.next_after(utc(2026, 4, 4, 12)), utc(2026, 4, 4, 14, 45));
  EXPECT_EQ(g.next_after(utc(2026, 4, 4, 14, 45)), utc(2026, 4, 5, 15, 15));
  auto h = in("45 1 * * *", "Australia/Lord_Howe", dst_repeat::both);
  EXPECT_EQ(h.next_after(utc(2026, 4, 4, 14, 45)), utc(2026, 4, 4, 15, 15));
}

/// Over a year in three zones, every fire is distinct, grows, matches the
/// expression in local time (or is a gap's end), and each local day has
/// exactly one fire of a daily schedule at any hour.
TEST(FireTimes, ADailyScheduleFiresOncePerLocalDayAllYear) {
  for (const char* zone :
       {"America/New_York", "Europe/Berlin", "Australia/Lord_Howe"}) {
    for (int hour = 0; hour < 24; ++hour) {
      auto text = "30 " + std::to_string(hour) + " * * *";
      fire_times f{cron_expression::parse(text), zone};
      auto got = fires(f, utc(2026, 1, 1), utc(2027, 1, 1));
      EXPECT_EQ(got.size(), 365u) << zone << " " << text;
      for (std::size_t i = 1; i < got.size(); ++i) {
        auto gap = got[i] - got[i - 1];
        EXPECT_GE(gap, hours{22}) << zone << " " << text;
        EXPECT_LE(gap, hours{26}) << zone << " " << text;
      }
    }
  }
}

TEST(FireTimes, AnUnknownZoneIsRefused) {
  try {
    in("0 0 * * *", "Mars/Olympus_Mons");
    FAIL() << "accepted";
  } catch (const perdure::error& e) {
    EXPECT_NE(std::string{e.what()}.find("not in this system's time zone"),
              std::string::npos);
  }
}

TEST(FireTimes, NeverIsNone) {
  EXPECT_EQ(in("0 0 30 2 *", "Europe/Berlin").next_after(utc(2026, 1, 1)),
            std::nullopt);
}

} // namespace
} // namespace perdure::schedules
