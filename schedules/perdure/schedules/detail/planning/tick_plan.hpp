#pragma once

// What one firing pass does with a schedule, decided without the database:
// which ticks start, which wait or are skipped or missed, and where the
// cursor goes. The store applies the plan in the same transaction that
// read the state, so a plan is applied once or not at all.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/schedules/fire_times.hpp"
#include "perdure/schedules/policies.hpp"

namespace perdure::schedules::detail {

/// A schedule as a firing pass reads it (times in ms since the epoch).
struct tick_state {
  std::string name;
  overlap on_overlap = overlap::skip;
  catchup catch_up = catchup::latest;
  std::int64_t catchup_window_ms = 60'000;
  std::int64_t jitter_ms = 0;
  std::optional<std::int64_t> end_ms; // no tick after it
  /// The cursor: the next tick not yet decided (none: no more ticks).
  std::optional<std::int64_t> next_tick_ms;
  /// Ticks waiting for the previous run's end (buffer policies).
  std::vector<std::int64_t> buffered;
  /// Whether the last run started has not ended yet.
  bool last_active = false;
};

struct tick_plan {
  /// Ticks to start now, in order (the last is the schedule's last run).
  std::vector<std::int64_t> start;
  /// Cancel the last run before starting (cancel_other).
  bool cancel_last = false;
  std::vector<std::int64_t> buffered;
  std::int64_t skipped = 0;   // by the overlap policy
  std::int64_t missed = 0;    // outside the catch-up window, or older than
                              // the latest under catchup::latest
  std::int64_t caught_up = 0; // started although a newer tick was due too
  /// Ticks decided in this pass (started, buffered, skipped or missed).
  std::int64_t decided = 0;
  std::optional<std::int64_t> next_tick_ms;
  /// When a pass should look at it again (none: never, it has ended).
  std::optional<std::int64_t> due_ms;
};

/// How long a buffered tick waits between looks at its previous run.
inline constexpr std::int64_t buffered_recheck_ms = 1'000;
/// At most this many ticks decided per pass (a long outage is caught up
/// over several, each a short transaction).
inline constexpr std::int64_t max_ticks_per_pass = 1'000;
/// At most this many ticks wait under overlap::buffer_all.
inline constexpr std::size_t max_buffered = 1'000;

/// The delay a tick fires after its time: the same in every process (a
/// hash of the schedule and the tick), in [0, jitter_ms].
std::int64_t jitter_of(std::string_view name, std::int64_t tick_ms,
                       std::int64_t jitter_ms);

/// Decides the ticks due by `now_ms`.
tick_plan plan_ticks(const tick_state& s, const fire_times& times,
                     std::int64_t now_ms);

/// The run id of `name`'s tick at `tick_ms`:
/// `sched:<name>:<UTC time, ISO 8601>` (`...T02:00:00Z`; milliseconds
/// only if the tick has them).
std::string tick_run_id(std::string_view name, std::int64_t tick_ms);

/// The first tick of a schedule after `after_ms` (none if it never fires
/// again or only after `end_ms`).
std::optional<std::int64_t> next_tick_after(const fire_times& times,
                                            std::int64_t after_ms,
                                            std::optional<std::int64_t> end_ms);

} // namespace perdure::schedules::detail
