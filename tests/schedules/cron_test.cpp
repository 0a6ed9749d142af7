// The cron parser and matcher: what each field form means, which texts
// are refused (with what message), and `next` against a brute-force walk.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "perdure/error.hpp"
#include "perdure/schedules/cron.hpp"

namespace perdure::schedules {
namespace {

using namespace std::chrono;

civil_seconds at(int y, unsigned m, unsigned d, int h = 0, int mi = 0,
                 int s = 0) {
  return civil_seconds{
    (sys_days{year{y} / month{m} / day{d}} + hours{h} + minutes{mi}
     + seconds{s})
      .time_since_epoch()};
}

std::string refusal(const std::string& text) {
  try {
    cron_expression::parse(text);
  } catch (const perdure::error& e) {
    return e.what();
  }
  return "";
}

TEST(Cron, FiveFieldsFireOnTheMinute) {
  auto c = cron_expression::parse("30 2 * * *");
  EXPECT_FALSE(c.has_seconds());
  EXPECT_EQ(c.next(at(2026, 3, 1)), at(2026, 3, 1, 2, 30));
  EXPECT_EQ(c.next(at(2026, 3, 1, 2, 30)), at(2026, 3, 1, 2, 30));
  EXPECT_EQ(c.next(at(2026, 3, 1, 2, 30, 1)), at(2026, 3, 2, 2, 30));
  EXPECT_EQ(c.next(at(2026, 12, 31, 23)), at(2027, 1, 1, 2, 30));
}

TEST(Cron, SixFieldsTakeSecondsFirst) {
  auto c = cron_expression::parse("*/20 * * * * *");
  EXPECT_TRUE(c.has_seconds());
  EXPECT_EQ(c.next(at(2026, 3, 1, 0, 0, 1)), at(2026, 3, 1, 0, 0, 20));
  EXPECT_EQ(c.next(at(2026, 3, 1, 0, 0, 41)), at(2026, 3, 1, 0, 1, 0));
}

TEST(Cron, ListsRangesStepsAndNames) {
  auto c = cron_expression::parse("0 9-17/4 * JAN,jul MON-FRI");
  // 2026-07-03 is a Friday, 07-04 a Saturday.
  EXPECT_EQ(c.next(at(2026, 7, 3, 13, 1)), at(2026, 7, 3, 17));
  EXPECT_EQ(c.next(at(2026, 7, 3, 17, 1)), at(2026, 7, 6, 9));
  EXPECT_EQ(c.next(at(2026, 8, 1)), at(2027, 1, 1, 9)); // a Friday
  auto single_step = cron_expression::parse("5/20 * * * *");
  EXPECT_EQ(single_step.next(at(2026, 1, 1, 0, 6)), at(2026, 1, 1, 0, 25));
  EXPECT_EQ(single_step.next(at(2026, 1, 1, 0, 46)), at(2026, 1, 1, 1, 5));
}

TEST(Cron, SundayIsZeroAndSeven) {
  auto zero = cron_expression::parse("0 0 * * 0");
  auto seven = cron_expression::parse("0 0 * * 7");
  auto range = cron_expression::parse("0 0 * * 5-7");
  for (int d = 0; d < 14; ++d) {
    auto t = at(2026, 3, 1) + days{d};
    EXPECT_EQ(zero.matches(t), seven.matches(t));
  }
  // 2026-03-06 Fri, 07 Sat, 08 Sun, 09 Mon.
  EXPECT_TRUE(range.matches(at(2026, 3, 6)));
  EXPECT_TRUE(range.matches(at(2026, 3, 7)));
  EXPECT_TRUE(range.matches(at(2026, 3, 8)));
  EXPECT_FALSE(range.matches(at(2026, 3, 9)));
}

TEST(Cron, BothDayFieldsRestrictedMatchEither) {
  // The 13th, or any Friday (Vixie cron's rule).
  auto c = cron_expression::parse("0 0 13 * FRI");
  EXPECT_TRUE(c.matches(at(2026, 3, 13)));  // a Friday the 13th
  EXPECT_TRUE(c.matches(at(2026, 4, 13)));  // a Monday
  EXPECT_TRUE(c.matches(at(2026, 4, 17)));  // a Friday
  EXPECT_FALSE(c.matches(at(2026, 4, 14)));
  // A leading * leaves the field unrestricted: the 13th only if Friday.
  auto both = cron_expression::parse("0 0 */1 * FRI");
  EXPECT_FALSE(both.matches(at(2026, 4, 13)));
  EXPECT_TRUE(both.matches(at(2026, 4, 17)));
}

TEST(Cron, Macros) {
  EXPECT_EQ(cron_expression::parse("@daily").next(at(2026, 5, 5, 0, 0, 1)),
            at(2026, 5, 6));
  EXPECT_EQ(cron_expression::parse("@Hourly").next(at(2026, 5, 5, 7, 1)),
            at(2026, 5, 5, 8));
  EXPECT_EQ(cron_expression::parse("@weekly").next(at(2026, 5, 5)),
            at(2026, 5, 10)); // Sunday
  EXPECT_EQ(cron_expression::parse("@monthly").next(at(2026, 5, 5)),
            at(2026, 6, 1));
  EXPECT_EQ(cron_expression::parse("@annually").next(at(2026, 5, 5)),
            at(2027, 1, 1));
  EXPECT_EQ(cron_expression::parse(" @midnight ").text(), " @midnight ");
}

TEST(Cron, LeapDaysAndNever) {
  auto leap = cron_expression::parse("0 12 29 2 *");
  EXPECT_EQ(leap.next(at(2026, 3, 1)), at(2028, 2, 29, 12));
  EXPECT_EQ(leap.next(at(2096, 3, 1)), at(2104, 2, 29, 12)); // 2100 is not
  EXPECT_EQ(cron_expression::parse("0 0 30 2 *").next(at(2026, 1, 1)),
            std::nullopt);
  EXPECT_EQ(cron_expression::parse("0 0 31 4,6,9,11 *").next(at(2026, 1, 1)),
            std::nullopt);
}

TEST(Cron, RefusesWithAReason) {
  EXPECT_NE(refusal("").find("has 0 fields"), std::string::npos);
  EXPECT_NE(refusal("* * * *").find("has 4 fields"), std::string::npos);
  EXPECT_NE(refusal("* * * * * * *").find("has 7 fields"), std::string::npos);
  EXPECT_NE(refusal("60 * * * *").find("minute 60 is out of range 0-59"),
            std::string::npos);
  EXPECT_NE(refusal("0 24 * * *").find("hour 24 is out of range"),
            std::string::npos);
  EXPECT_NE(refusal("0 0 0 * *").find("day-of-month 0 is out of range 1-31"),
            std::string::npos);
  EXPECT_NE(refusal("0 0 * 13 *").find("month 13"), std::string::npos);
  EXPECT_NE(refusal("0 0 * * 8").find("day-of-week 8"), std::string::npos);
  EXPECT_NE(refusal("0 0 * FOO *").find("neither a number nor a name"),
            std::string::npos);
  EXPECT_NE(refusal("*/0 * * * *").find("step 0"), std::string::npos);
  EXPECT_NE(refusal("*/x * * * *").find("not a whole number"),
            std::string::npos);
  EXPECT_NE(refusal("5-1 * * * *").find("runs backwards"), std::string::npos);
  EXPECT_NE(refusal("1,,2 * * * *").find("empty item"), std::string::npos);
  EXPECT_NE(refusal("? * * * *").find("only for the day fields"),
            std::string::npos);
  EXPECT_NE(refusal("@reboot").find("unknown macro"), std::string::npos);
  EXPECT_NE(refusal("1- * * * *").find("value is missing"), std::string::npos);
  EXPECT_NE(refusal("99999999999999999999 * * * *").find("out of range"),
            std::string::npos);
  // Every refusal says what a good one looks like.
  EXPECT_NE(refusal("bad").find("e.g. '0 2 * * *'"), std::string::npos);
}

/// `next` agrees with trying every second (5-field expressions: every
/// minute) from a random start, over random expressions.
TEST(Cron, NextAgreesWithAWalk) {
  std::mt19937 rng{2611};
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>{lo, hi}(rng);
  };
  auto field = [&](int lo, int hi) -> std::string {
    switch (pick(0, 4)) {
      case 0: return "*";
      case 1: return std::to_string(pick(lo, hi));
      case 2: {
        int a = pick(lo, hi), b = pick(a, hi);
        return std::to_string(a) + "-" + std::to_string(b);
      }
      case 3: return "*/" + std::to_string(pick(1, hi - lo + 1));
      default:
        return std::to_string(pick(lo, hi)) + "," + std::to_string(pick(lo, hi));
    }
  };
  for (int i = 0; i < 300; ++i) {
    auto text = field(0, 59) + " " + field(0, 23) + " " + field(1, 31) + " "
                + field(1, 12) + " " + field(0, 7);
    auto c = cron_expression::parse(text);
    auto from = at(2026, 1, 1) + minutes{pick(0, 400 * 24 * 60)};
    auto got = c.next(from);
    // A walk of up to two years, minute by minute.
    std::optional<civil_seconds> want;
    for (auto t = from; t < from + days{731}; t += minutes{1})
      if (c.matches(t)) {
        want = t;
        break;
      }
    if (want)
      EXPECT_EQ(got, want) << text;
    else
      EXPECT_TRUE(!got || *got >= from + days{731}) << text;
  }
}

} // namespace
} // namespace perdure::schedules
