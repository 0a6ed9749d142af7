#include "perdure/schedules/detail/stored_schedule.hpp"

#include <chrono>

#include "perdure/detail/runtime/ids.hpp"
#include "perdure/error.hpp"

namespace perdure::schedules::detail {

namespace {

using namespace std::chrono;

std::int64_t to_ms(time_point t) {
  return duration_cast<milliseconds>(t.time_since_epoch()).count();
}

time_point from_ms(std::int64_t ms) {
  return time_point{duration_cast<time_point::duration>(milliseconds{ms})};
}

[[noreturn]] void refuse(const schedule_spec& s, const std::string& why) {
  throw perdure::error(errc::invalid_argument,
                       "schedule '" + s.name + "': " + why);
}

overlap overlap_of(const std::string& text) {
  for (auto o : {overlap::skip, overlap::buffer_one, overlap::buffer_all,
                 overlap::cancel_other, overlap::allow_all})
    if (text == to_string(o))
      return o;
  return overlap::skip;
}

} // namespace

const char* to_string(overlap o) {
  switch (o) {
    case overlap::skip: return "skip";
    case overlap::buffer_one: return "buffer_one";
    case overlap::buffer_all: return "buffer_all";
    case overlap::cancel_other: return "cancel_other";
    case overlap::allow_all: return "allow_all";
  }
  return "skip";
}

const char* to_string(catchup c) {
  return c == catchup::all ? "all" : "latest";
}

persistence::schedule_record record_of(const schedule_spec& s) {
  // The name is part of every tick's run id (`sched:<name>:<tick>`): no
  // `:` (two schedules' ids could meet), nothing a shell or URL quotes.
  bool plain = !s.name.empty() && s.name.size() <= 100;
  for (char ch : s.name)
    plain = plain
            && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
                || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_'
                || ch == '-');
  if (!plain)
    refuse(s, "a schedule's name is 1 to 100 letters, digits, '.', '_' or "
              "'-' (it is part of its runs' ids)");
  if (s.workflow.empty())
    refuse(s, "it names no workflow (set `workflow`)");
  if (!s.queue.empty())
    perdure::detail::check_name("queue name", s.queue);
  // Parsed and placed in its zone now: a bad expression or zone is
  // refused here, never met by a firing pass.
  fire_times times{cron_expression::parse(s.cron), s.time_zone, s.repeat};
  if (s.catchup_window < seconds{1})
    refuse(s, "its catch-up window is under a second (a tick is always a "
              "little late; give it at least 1 s)");
  if (s.jitter < milliseconds{0} || s.jitter >= s.catchup_window)
    refuse(s, "its jitter must be at least 0 and less than its catch-up "
              "window (a tick delayed past the window would be missed)");
  if (s.start_at && s.end_at && *s.end_at < *s.start_at)
    refuse(s, "its end is before its start");
  // It fires at all, and its jitter is shorter than its ticks' spacing
  // (a tick delayed past the next one would come after it).
  auto from = std::chrono::floor<seconds>(s.start_at.value_or(
    std::chrono::system_clock::now()));
  auto t = times.next_after(from);
  if (!t)
    refuse(s, "'" + s.cron + "' never fires (a day no month has?)");
  auto shortest = std::chrono::milliseconds::max();
  for (int i = 0; i < 64 && t; ++i) {
    auto next = times.next_after(*t);
    if (next)
      shortest = std::min<std::chrono::milliseconds>(shortest, *next - *t);
    t = next;
  }
  if (s.jitter >= shortest)
    refuse(s, "its jitter (" + std::to_string(s.jitter.count())
                + " ms) is not shorter than the time between its ticks ("
                + std::to_string(shortest.count()) + " ms)");
  persistence::schedule_record r;
  r.name = s.name;
  r.workflow = s.workflow;
  r.queue = s.queue;
  r.cron = s.cron;
  r.time_zone = s.time_zone;
  r.dst_repeat = s.repeat == dst_repeat::both ? "both" : "first";
  r.inputs = s.input;
  r.overlap = to_string(s.on_overlap);
  r.catchup = to_string(s.catch_up);
  r.catchup_window_ms = s.catchup_window.count();
  r.jitter_ms = s.jitter.count();
  if (s.start_at)
    r.start_ms = to_ms(*s.start_at);
  if (s.end_at)
    r.end_ms = to_ms(*s.end_at);
  r.paused = s.paused;
  return r;
}

schedule_spec spec_of(const persistence::schedule_record& r) {
  schedule_spec s;
  s.name = r.name;
  s.workflow = r.workflow;
  s.queue = r.queue;
  s.cron = r.cron;
  s.time_zone = r.time_zone;
  s.repeat = r.dst_repeat == "both" ? dst_repeat::both : dst_repeat::first;
  s.input = r.inputs;
  s.on_overlap = overlap_of(r.overlap);
  s.catch_up = r.catchup == "all" ? catchup::all : catchup::latest;
  s.catchup_window = milliseconds{r.catchup_window_ms};
  s.jitter = milliseconds{r.jitter_ms};
  if (r.start_ms)
    s.start_at = from_ms(*r.start_ms);
  if (r.end_ms)
    s.end_at = from_ms(*r.end_ms);
  s.paused = r.paused;
  return s;
}

fire_times times_of(const persistence::schedule_record& r) {
  return fire_times{cron_expression::parse(r.cron), r.time_zone,
                    r.dst_repeat == "both" ? dst_repeat::both
                                           : dst_repeat::first};
}

} // namespace perdure::schedules::detail
