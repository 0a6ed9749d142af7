#pragma once

// Schedules as the store keeps them: a definition and a durable cursor
// (the next tick not yet decided). A firing pass locks a due schedule's
// row, reads whether its last run is still going, lets the caller decide
// (perdure/schedules/detail/planning), and in the same transaction starts
// the tick runs (ids derived from the tick: a tick never starts twice)
// and moves the cursor. One role of `store`.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perdure::persistence {

struct schedule_record {
  // -- the definition
  std::string name;
  std::string workflow;
  std::string queue; ///< empty: runs start directly
  std::string cron;
  std::string time_zone;
  std::string dst_repeat; ///< "first" or "both"
  std::string inputs;     ///< encoded
  std::string overlap;    ///< "skip", "buffer_one", ...
  std::string catchup;    ///< "latest" or "all"
  std::int64_t catchup_window_ms = 0;
  std::int64_t jitter_ms = 0;
  std::optional<std::int64_t> start_ms;
  std::optional<std::int64_t> end_ms;
  bool paused = false;
  std::string owner; ///< who applied it (declarative `apply`), or empty
  // -- the cursor and what it has done
  std::optional<std::int64_t> next_tick_ms;
  std::optional<std::int64_t> due_ms;
  std::vector<std::int64_t> buffered;
  std::string last_run_id;
  std::optional<std::int64_t> last_tick_ms;
  std::int64_t started = 0;
  std::int64_t skipped = 0;
  std::int64_t missed = 0;
  std::int64_t caught_up = 0;
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;
};

/// What a pass does with one schedule.
struct schedule_decision {
  /// Runs to start, in order: their ids (the last is the schedule's last
  /// run) and ticks.
  struct start {
    std::string run_id;
    std::int64_t tick_ms = 0;
  };
  std::vector<start> starts;
  std::optional<std::int64_t> next_tick_ms;
  std::optional<std::int64_t> due_ms;
  std::vector<std::int64_t> buffered;
  std::int64_t skipped = 0;
  std::int64_t missed = 0;
  std::int64_t caught_up = 0;
  /// The run that was going, to cancel once this commits (cancel_other).
  std::string cancel_run_id;
  /// Set by the store: how many of `starts` had no run yet, and started.
  std::int64_t started = 0;
};

/// `decide(schedule, last_run_active)`.
using schedule_planner
  = std::function<schedule_decision(const schedule_record&, bool)>;

class schedule_store {
public:
  virtual ~schedule_store() = default;

  /// Stores a new schedule; false if the name is taken.
  virtual bool create_schedule(const schedule_record& s) = 0;

  /// Replaces a schedule's definition and cursor (what it has done is
  /// kept); false if there is none of that name.
  virtual bool update_schedule(const schedule_record& s) = 0;

  /// Pauses or resumes, the cursor set to `next_tick_ms` / `due_ms`;
  /// false if there is none of that name.
  virtual bool set_schedule_paused(std::string_view name, bool paused,
                                   std::optional<std::int64_t> next_tick_ms,
                                   std::optional<std::int64_t> due_ms,
                                   std::int64_t at_ms) = 0;

  /// Removes a schedule (its runs stay); false if there was none.
  virtual bool remove_schedule(std::string_view name) = 0;

  virtual std::optional<schedule_record> get_schedule(std::string_view name) = 0;

  /// Every schedule, by name.
  virtual std::vector<schedule_record> list_schedules() = 0;

  /// The earliest time a schedule that is not paused is due.
  virtual std::optional<std::int64_t> next_schedule_due() = 0;

  /// One firing pass: up to `limit` schedules due by `now_ms`, each locked
  /// (PostgreSQL skips one another process holds), decided by `plan` and
  /// applied in the same transaction. Returns the decisions applied.
  virtual std::vector<schedule_decision>
  fire_schedules(std::int64_t now_ms, std::int64_t limit,
                 const schedule_planner& plan) = 0;

  /// Starts runs of schedule `name` outside its cursor (a trigger, a
  /// backfill): each of `starts` whose id no run has yet. Returns how
  /// many started; nothing if there is no such schedule.
  virtual std::optional<std::int64_t>
  start_schedule_runs(std::string_view name,
                      const std::vector<schedule_decision::start>& starts,
                      std::int64_t at_ms) = 0;
};

} // namespace perdure::persistence
