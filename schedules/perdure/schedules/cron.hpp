#pragma once

// A cron expression, parsed by our own parser: 5 fields (minute hour
// day-of-month month day-of-week), 6 with seconds first, or a macro
// (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly).
// It matches civil (local) times; where they fall in time is the time
// zone's business (perdure/schedules/fire_times.hpp).
//
// Each field is a comma-separated list of `*`, a value, a range `a-b`, or
// either with a step (`*/15`, `10-50/10`, `5/20` = 5 to the end by 20).
// Months and weekdays take names too (JAN-DEC, SUN-SAT); weekday 7 is
// Sunday, as 0; `?` is `*` in the day fields. As in Vixie cron, when both
// day fields are restricted a day matching either fires, and a day field
// written with a leading `*` counts as unrestricted (`*/2` included).

#include <bitset>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace perdure::schedules {

/// A civil time (no zone), whole seconds since 1970-01-01 00:00:00.
using civil_seconds = std::chrono::local_seconds;

class cron_expression {
public:
  /// Parses `text`. Throws perdure::error (invalid_argument) naming the
  /// field and what is wrong with it.
  static cron_expression parse(std::string_view text);

  /// Whether `t` matches every field.
  bool matches(civil_seconds t) const;

  /// The first matching time at or after `from`; none if nothing matches
  /// within the next 20 years (`0 0 30 2 *` never does).
  std::optional<civil_seconds> next(civil_seconds from) const;

  /// The text as given (macros as written).
  const std::string& text() const noexcept { return text_; }

  /// Whether the expression has a seconds field.
  bool has_seconds() const noexcept { return has_seconds_; }

private:
  bool day_matches(std::chrono::year_month_day d) const;

  std::string text_;
  bool has_seconds_ = false;
  std::bitset<60> seconds_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;     // 1-31
  std::bitset<13> months_;   // 1-12
  std::bitset<7> weekdays_;  // 0 = Sunday
  bool any_day_ = true;      // day-of-month written with a leading * or ?
  bool any_weekday_ = true;  // day-of-week written with a leading * or ?
};

} // namespace perdure::schedules
