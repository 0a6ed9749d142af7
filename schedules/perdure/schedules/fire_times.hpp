#pragma once

// When a cron expression fires in a time zone, as instants. Daylight
// saving, as built (and tested in schedules/fire_times_test):
// - a local time the clocks skip (spring forward) fires once, at the
//   first instant after the gap: 02:30 in a 02:00->03:00 gap fires at
//   03:00; several skipped times (every 15 minutes) fire once, together;
// - a local time that happens twice (fall back) fires once, at its first
//   occurrence, unless `dst_repeat::both`: then at each. Note that this
//   holds for every expression: `*/5 * * * *` in a zone that falls back
//   does not fire during the repeated hour's second pass; an interval
//   schedule belongs in UTC (or takes `dst_repeat::both`).

#include <chrono>
#include <optional>
#include <string>

#include "perdure/schedules/cron.hpp"

namespace date {
class time_zone;
} // namespace date

namespace perdure::schedules {

enum class dst_repeat { first, both };

class fire_times {
public:
  /// `zone`: an IANA name ("Europe/Berlin", "UTC"). Throws perdure::error
  /// (invalid_argument) for a name the system's time zone data lacks.
  fire_times(cron_expression cron, const std::string& zone,
             dst_repeat repeat = dst_repeat::first);

  /// The first fire strictly after `after`; none if it never fires again.
  std::optional<std::chrono::sys_seconds>
  next_after(std::chrono::sys_seconds after) const;

  const cron_expression& cron() const noexcept { return cron_; }

private:
  enum class pick { earliest, latest };
  std::optional<std::chrono::sys_seconds>
  first_beyond(std::chrono::sys_seconds after, civil_seconds from,
               pick p) const;

  cron_expression cron_;
  const date::time_zone* zone_;
  dst_repeat repeat_;
};

} // namespace perdure::schedules
