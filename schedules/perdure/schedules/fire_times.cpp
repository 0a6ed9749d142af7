#include "perdure/schedules/fire_times.hpp"

#include <date/tz.h>

#include "perdure/error.hpp"

namespace perdure::schedules {

namespace {

using std::chrono::seconds;
using std::chrono::sys_seconds;

date::local_seconds to_date(civil_seconds t) {
  return date::local_seconds{t.time_since_epoch()};
}

civil_seconds to_civil(date::local_seconds t) {
  return civil_seconds{t.time_since_epoch()};
}

} // namespace

fire_times::fire_times(cron_expression cron, const std::string& zone,
                       dst_repeat repeat)
  : cron_(std::move(cron)), repeat_(repeat) {
  try {
    zone_ = date::locate_zone(zone);
  } catch (const std::exception&) {
    throw perdure::error(errc::invalid_argument,
                         "time zone '" + zone
                           + "' is not in this system's time zone data "
                             "(an IANA name such as Europe/Berlin or UTC; "
                             "see /usr/share/zoneinfo, package tzdata)");
  }
}

std::optional<sys_seconds> fire_times::next_after(sys_seconds after) const {
  // The local time `after` shows: no matching local time before it can
  // fire after it, except (with both) the second pass of the time itself.
  auto shown = to_civil(zone_->to_local(after));
  auto info = zone_->get_info(after);
  // In the second pass of a repeated hour, no first pass of a time before
  // the end of the repeat comes after `after`: start there (not a walk
  // through the rest of the hour).
  auto from = shown + seconds{1};
  // (Only near a change: a zone without one has `begin` and `end` at the
  // ends of time.)
  constexpr std::chrono::hours near{24};
  auto before = after - info.begin <= near
                  ? zone_->get_info(info.begin - seconds{1})
                  : info;
  if (before.offset > info.offset) {
    auto repeat_end = civil_seconds{(info.begin + before.offset).time_since_epoch()};
    if (shown < repeat_end)
      from = std::max(from, repeat_end);
  }
  auto first = first_beyond(after, from, pick::earliest);
  if (repeat_ == dst_repeat::first)
    return first;
  // A repeated time's second pass can come after `after` although the
  // time lies before `shown` (at 01:45 EDT, 01:00 EST is still to come):
  // if the clocks go back next, start at the repeat's first local time.
  auto second_from = shown;
  auto next = info.end - after <= near ? zone_->get_info(info.end) : info;
  if (next.offset < info.offset)
    second_from = std::min(
      shown, civil_seconds{(info.end + next.offset).time_since_epoch()});
  auto second = first_beyond(after, second_from, pick::latest);
  if (!first)
    return second;
  if (!second)
    return first;
  return std::min(*first, *second);
}

/// The first fire after `after` among matching local times from `from`
/// on, each placed at one instant (`p` for a repeated one, the gap's end
/// for a skipped one). Placed so, instants grow with local times, so the
/// first match placed after `after` is the answer.
std::optional<sys_seconds> fire_times::first_beyond(sys_seconds after,
                                                    civil_seconds from,
                                                    pick p) const {
  for (auto local = cron_.next(from); local; local = cron_.next(*local + seconds{1})) {
    auto info = zone_->get_info(to_date(*local));
    sys_seconds at;
    switch (info.result) {
      case date::local_info::unique:
        at = sys_seconds{local->time_since_epoch() - info.first.offset};
        break;
      case date::local_info::nonexistent:
        at = info.second.begin;
        break;
      case date::local_info::ambiguous:
        at = sys_seconds{local->time_since_epoch()
                         - (p == pick::earliest ? info.first.offset
                                                : info.second.offset)};
        break;
    }
    if (at > after)
      return at;
  }
  return std::nullopt;
}

} // namespace perdure::schedules
