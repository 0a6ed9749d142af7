#pragma once

// Cron schedules: a workflow (or a queue's item) started at each tick of a
// cron expression in a time zone, exactly once per tick. A schedule is a
// row with a durable cursor (the next tick not yet decided); a firing pass
// locks the row, starts the tick's run (its id derived from the schedule
// and the tick: `sched:<name>:<UTC time>`) and moves the cursor in one
// transaction. Any process with a `ticker` fires any schedule; a process
// killed mid-pass leaves the row as it was, for the next pass anywhere.
// See README "Schedules" and docs/architecture.md.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/client.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/schedules/fire_times.hpp"
#include "perdure/schedules/policies.hpp"

namespace perdure::schedules {

using time_point = std::chrono::system_clock::time_point;

struct schedule_spec {
  /// Letters, digits, `.`, `_`, `-` (as workflow ids).
  std::string name;
  /// The workflow each tick starts.
  std::string workflow;
  /// Empty: each tick's run starts at once; else it is enqueued here.
  std::string queue;
  /// 5 or 6 fields, or a macro (perdure/schedules/cron.hpp).
  std::string cron;
  /// An IANA time zone the cron expression reads in.
  std::string time_zone = "UTC";
  dst_repeat repeat = dst_repeat::first;
  /// The runs' input, encoded (`input_of`); empty: none.
  std::string input;
  overlap on_overlap = overlap::skip;
  catchup catch_up = catchup::latest;
  /// Ticks older than this when a pass decides them are missed (at least
  /// a second, and more than `jitter`).
  std::chrono::milliseconds catchup_window{std::chrono::minutes{1}};
  /// Each tick fires up to this much after its time (the same delay in
  /// every process), to spread many schedules' ticks.
  std::chrono::milliseconds jitter{0};
  /// No tick before `start_at` or after `end_at`.
  std::optional<time_point> start_at;
  std::optional<time_point> end_at;
  bool paused = false;
};

/// `input` encoded as `c`'s runs expect it (for `schedule_spec::input`).
template <class A>
std::string input_of(client& c, const A& input) {
  return persistence::encode(input, c.cfg().payload_encoding);
}

struct schedule_info {
  schedule_spec spec;
  /// Who applied it (`apply`), or empty.
  std::string owner;
  /// When the next tick fires (its time plus its jitter); none if it has
  /// ended (past `end_at`) or never fires again.
  std::optional<time_point> next_fire;
  /// The tick of the last run started, and that run.
  std::optional<time_point> last_fire;
  std::string last_run_id;
  /// Ticks started, skipped by the overlap policy, missed (outside the
  /// catch-up window, or older than the latest under catchup::latest),
  /// and started late while newer ones were due (catch-up).
  std::int64_t started = 0;
  std::int64_t skipped = 0;
  std::int64_t missed = 0;
  std::int64_t caught_up = 0;
  /// Ticks waiting for the last run's end (buffer policies).
  std::vector<time_point> buffered;
  time_point created_at;
  time_point updated_at;
};

/// Stores a new schedule; it fires from its first tick after now (or
/// after `start_at`). Throws perdure::error: `invalid_argument` (a bad
/// name, cron expression, time zone or window, with what to write
/// instead), `conflicting_id` (the name is taken).
void create(client& c, const schedule_spec& spec);

/// Replaces schedule `spec.name`'s definition; its cursor starts again
/// from now (ticks of the old definition not yet fired are not), what it
/// has done is kept. Throws `not_found`, `invalid_argument`.
void update(client& c, const schedule_spec& spec);

/// Stops firing until `resume`; ticks meanwhile are neither started nor
/// counted. Throws `not_found`.
void pause(client& c, std::string_view name);

/// Fires again from the first tick after now; returns false (and changes
/// nothing) if it was not paused. Throws `not_found`.
bool resume(client& c, std::string_view name);

/// Starts a run now, outside the cursor (`sched:<name>:trigger:<time>`),
/// whatever the overlap policy; returns its id. Throws `not_found`.
std::string trigger(client& c, std::string_view name);

/// Starts the run of every tick in [from, to] that has none yet (a tick
/// the cursor fired, or an earlier backfill started, is not started
/// twice), oldest first, whatever the overlap policy; at most 100 000
/// ticks. Returns how many started. Throws `not_found`,
/// `invalid_argument`.
std::int64_t backfill(client& c, std::string_view name, time_point from,
                      time_point to);

/// Removes a schedule (its runs stay). Throws `not_found`.
void remove(client& c, std::string_view name);

/// Every schedule, by name.
std::vector<schedule_info> list(client& c);

/// One schedule. Throws `not_found`.
schedule_info show(client& c, std::string_view name);

struct apply_result {
  int created = 0;
  int updated = 0;
  int removed = 0;
  int unchanged = 0;
};

/// Makes the schedules owned by `owner` exactly `specs` (declarative, for
/// schedules owned by code): creates the new, updates the changed (their
/// cursors start again from now), removes the ones `owner` applied before
/// and `specs` lacks. Throws `conflicting_id` for a name another owner (or
/// `create`) holds, `invalid_argument` for a bad spec; then nothing is
/// changed.
apply_result apply(client& c, std::string_view owner,
                   const std::vector<schedule_spec>& specs);

struct ticker_options {
  /// How often a pass looks for schedules made or changed elsewhere (it
  /// wakes at the next due tick anyway).
  std::chrono::milliseconds poll{std::chrono::seconds{1}};
  /// Schedules decided per transaction.
  std::int64_t batch = 100;
};

/// Fires due schedules from this process while it lives: construct it
/// after the runtime (or client) started, destroy it before it stops. Any
/// number of processes may run one; each tick starts once.
class ticker {
public:
  explicit ticker(client& c, ticker_options opts = {});
  ~ticker();
  ticker(const ticker&) = delete;
  ticker& operator=(const ticker&) = delete;

  /// Runs one pass now (tests, and a manual clock's advance); returns how
  /// many schedules it decided.
  std::int64_t fire_due();

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

} // namespace perdure::schedules
