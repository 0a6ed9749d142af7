// Schedules (schedule_store.hpp), written once for both stores: the
// definition and the cursor in one row, a firing pass that locks the row,
// starts the tick runs and moves the cursor in one transaction.

#include <charconv>
#include <string>
#include <vector>

#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_bytes;
using detail::sql_dialect;
using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;
using detail::sql_value;

namespace {

constexpr const char* schedule_columns
  = "name, workflow, queue_name, cron, time_zone, dst_repeat, inputs, "
    "overlap, catchup, catchup_window_ms, jitter_ms, start_at, end_at, "
    "paused, owner, next_tick, due_at, buffered, last_run_id, last_tick, "
    "started, skipped, missed, caught_up, created_at, updated_at";

/// `a,b,c` (ms ticks waiting for the previous run's end).
std::string join(const std::vector<std::int64_t>& ticks) {
  std::string out;
  for (auto t : ticks) {
    if (!out.empty())
      out += ',';
    out += std::to_string(t);
  }
  return out;
}

std::vector<std::int64_t> split(std::string_view text) {
  std::vector<std::int64_t> out;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto item = text.substr(0, comma);
    std::int64_t v = 0;
    if (std::from_chars(item.data(), item.data() + item.size(), v).ec
        == std::errc{})
      out.push_back(v);
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
  }
  return out;
}

schedule_record read_schedule(const sql_row& r) {
  schedule_record s;
  int c = 0;
  s.name = r.text(c++);
  s.workflow = r.text(c++);
  s.queue = r.text(c++);
  s.cron = r.text(c++);
  s.time_zone = r.text(c++);
  s.dst_repeat = r.text(c++);
  s.inputs = r.bytes(c++);
  s.overlap = r.text(c++);
  s.catchup = r.text(c++);
  s.catchup_window_ms = r.int64(c++);
  s.jitter_ms = r.int64(c++);
  s.start_ms = r.opt_int64(c++);
  s.end_ms = r.opt_int64(c++);
  s.paused = r.int64(c++) != 0;
  s.owner = r.text(c++);
  s.next_tick_ms = r.opt_int64(c++);
  s.due_ms = r.opt_int64(c++);
  s.buffered = split(r.text(c++));
  s.last_run_id = r.text(c++);
  s.last_tick_ms = r.opt_int64(c++);
  s.started = r.int64(c++);
  s.skipped = r.int64(c++);
  s.missed = r.int64(c++);
  s.caught_up = r.int64(c++);
  s.created_at_ms = r.int64(c++);
  s.updated_at_ms = r.int64(c++);
  return s;
}

/// Inserts schedule `s`'s run `id` (started directly, or enqueued in its
/// queue) unless a run of that id exists; announces it. Returns whether
/// it was inserted.
bool insert_tick_run(sql_tx& tx, const schedule_record& s,
                     std::string_view id, std::int64_t at_ms) {
  static const sql_query pending{
    "schedule_start",
    "INSERT INTO {s}runs (id, name, status, inputs, executor, epoch, "
    "app_version, created_at, updated_at) VALUES ($1, $2, 'PENDING', $3, "
    "'', 0, '', $4, $4) ON CONFLICT (id) DO NOTHING"};
  // Queue items take their place in the inbox sequence on PostgreSQL (as
  // every enqueue does).
  static const sql_query enqueued_pg{
    "schedule_enqueue",
    "INSERT INTO {s}runs (id, name, status, inputs, executor, epoch, "
    "app_version, created_at, updated_at, queue_name, priority, "
    "partition_key, inbox_seq) VALUES ($1, $2, 'ENQUEUED', $3, '', 0, '', "
    "$4, $4, $5, 0, '', nextval('{s}inbox_seq')) ON CONFLICT (id) DO "
    "NOTHING"};
  static const sql_query enqueued_sqlite{
    "schedule_enqueue_sqlite",
    "INSERT INTO {s}runs (id, name, status, inputs, executor, epoch, "
    "app_version, created_at, updated_at, queue_name, priority, "
    "partition_key) VALUES ($1, $2, 'ENQUEUED', $3, '', 0, '', $4, $4, $5, "
    "0, '') ON CONFLICT (id) DO NOTHING"};
  if (s.queue.empty()) {
    if (tx.run(pending, {id, std::string_view{s.workflow},
                         sql_bytes{s.inputs}, at_ms})
        == 0)
      return false;
    tx.notify(notice::created(std::string{id}).encode());
    return true;
  }
  auto& q = tx.dialect() == sql_dialect::postgresql ? enqueued_pg
                                                     : enqueued_sqlite;
  if (tx.run(q, {id, std::string_view{s.workflow}, sql_bytes{s.inputs}, at_ms,
                 std::string_view{s.queue}})
      == 0)
    return false;
  tx.notify(notice::queued(s.queue).encode());
  return true;
}

sql_value opt(const std::optional<std::int64_t>& v) {
  return v ? sql_value{*v} : sql_value{nullptr};
}

} // namespace

bool sql_store::create_schedule(const schedule_record& s) {
  static const sql_query q{
    "schedule_create",
    std::string{"INSERT INTO {s}schedules ("} + schedule_columns
      + ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, "
        "$14, $15, $16, $17, '', '', NULL, 0, 0, 0, 0, $18, $18) ON "
        "CONFLICT (name) DO NOTHING"};
  std::int64_t n = 0;
  write([&](sql_tx& tx) {
    n = tx.run(q, {std::string_view{s.name}, std::string_view{s.workflow},
                   std::string_view{s.queue}, std::string_view{s.cron},
                   std::string_view{s.time_zone},
                   std::string_view{s.dst_repeat}, sql_bytes{s.inputs},
                   std::string_view{s.overlap}, std::string_view{s.catchup},
                   s.catchup_window_ms, s.jitter_ms, opt(s.start_ms),
                   opt(s.end_ms), std::int64_t{s.paused ? 1 : 0},
                   std::string_view{s.owner}, opt(s.next_tick_ms),
                   opt(s.due_ms), s.created_at_ms});
  });
  return n == 1;
}

bool sql_store::update_schedule(const schedule_record& s) {
  static const sql_query q{
    "schedule_update",
    "UPDATE {s}schedules SET workflow = $2, queue_name = $3, cron = $4, "
    "time_zone = $5, dst_repeat = $6, inputs = $7, overlap = $8, catchup = "
    "$9, catchup_window_ms = $10, jitter_ms = $11, start_at = $12, end_at = "
    "$13, paused = $14, owner = $15, next_tick = $16, due_at = $17, "
    "buffered = $18, updated_at = $19 WHERE name = $1"};
  std::int64_t n = 0;
  write([&](sql_tx& tx) {
    n = tx.run(q, {std::string_view{s.name}, std::string_view{s.workflow},
                   std::string_view{s.queue}, std::string_view{s.cron},
                   std::string_view{s.time_zone},
                   std::string_view{s.dst_repeat}, sql_bytes{s.inputs},
                   std::string_view{s.overlap}, std::string_view{s.catchup},
                   s.catchup_window_ms, s.jitter_ms, opt(s.start_ms),
                   opt(s.end_ms), std::int64_t{s.paused ? 1 : 0},
                   std::string_view{s.owner}, opt(s.next_tick_ms),
                   opt(s.due_ms), std::string_view{join(s.buffered)},
                   s.updated_at_ms});
  });
  return n == 1;
}

bool sql_store::set_schedule_paused(std::string_view name, bool paused,
                                    std::optional<std::int64_t> next_tick_ms,
                                    std::optional<std::int64_t> due_ms,
                                    std::int64_t at_ms) {
  static const sql_query q{
    "schedule_pause",
    "UPDATE {s}schedules SET paused = $2, next_tick = $3, due_at = $4, "
    "updated_at = $5 WHERE name = $1"};
  std::int64_t n = 0;
  write([&](sql_tx& tx) {
    n = tx.run(q, {name, std::int64_t{paused ? 1 : 0}, opt(next_tick_ms),
                   opt(due_ms), at_ms});
  });
  return n == 1;
}

bool sql_store::remove_schedule(std::string_view name) {
  static const sql_query q{"schedule_remove",
                           "DELETE FROM {s}schedules WHERE name = $1"};
  std::int64_t n = 0;
  write([&](sql_tx& tx) { n = tx.run(q, {name}); });
  return n == 1;
}

std::optional<schedule_record> sql_store::get_schedule(std::string_view name) {
  static const sql_query q{"schedule_get",
                           std::string{"SELECT "} + schedule_columns
                             + " FROM {s}schedules WHERE name = $1"};
  std::optional<schedule_record> out;
  read([&](sql_tx& tx) { out = tx.first(q, {name}, read_schedule); });
  return out;
}

std::vector<schedule_record> sql_store::list_schedules() {
  static const sql_query q{"schedule_list",
                           std::string{"SELECT "} + schedule_columns
                             + " FROM {s}schedules ORDER BY name"};
  std::vector<schedule_record> out;
  read([&](sql_tx& tx) {
    out.clear();
    tx.run(q, {}, [&](const sql_row& r) { out.push_back(read_schedule(r)); });
  });
  return out;
}

std::optional<std::int64_t> sql_store::next_schedule_due() {
  static const sql_query q{
    "schedule_next_due",
    "SELECT min(due_at) FROM {s}schedules WHERE paused = 0"};
  std::optional<std::int64_t> out;
  read([&](sql_tx& tx) {
    out = tx.first(q, {}, [](const sql_row& r) { return r.opt_int64(0); })
            .value_or(std::nullopt);
  });
  return out;
}

std::vector<schedule_decision>
sql_store::fire_schedules(std::int64_t now_ms, std::int64_t limit,
                          const schedule_planner& plan) {
  // Through the partial index on due times; a row another process holds
  // is its to fire (PostgreSQL); SQLite's write transaction is alone.
  static const sql_query due_pg{
    "schedule_due",
    std::string{"SELECT "} + schedule_columns
      + " FROM {s}schedules WHERE paused = 0 AND due_at <= $1 ORDER BY "
        "due_at LIMIT $2 FOR UPDATE SKIP LOCKED"};
  static const sql_query due_sqlite{
    "schedule_due_sqlite",
    std::string{"SELECT "} + schedule_columns
      + " FROM {s}schedules WHERE paused = 0 AND due_at <= $1 ORDER BY "
        "due_at LIMIT $2"};
  static const sql_query active{
    "schedule_last_active",
    "SELECT 1 FROM {s}runs WHERE id = $1 AND status IN ('PENDING', "
    "'ENQUEUED', 'BLOCKED')"};
  static const sql_query advance{
    "schedule_advance",
    "UPDATE {s}schedules SET next_tick = $2, due_at = $3, buffered = $4, "
    "last_run_id = $5, last_tick = $6, started = started + $7, skipped = "
    "skipped + $8, missed = missed + $9, caught_up = caught_up + $10, "
    "updated_at = $11 WHERE name = $1"};
  std::vector<schedule_decision> out;
  write([&](sql_tx& tx) {
    out.clear();
    std::vector<schedule_record> due;
    auto& q = tx.dialect() == sql_dialect::postgresql ? due_pg : due_sqlite;
    tx.run(q, {now_ms, limit},
           [&](const sql_row& r) { due.push_back(read_schedule(r)); });
    for (auto& s : due) {
      bool last_active
        = !s.last_run_id.empty()
          && tx.first(active, {std::string_view{s.last_run_id}},
                      [](const sql_row&) { return true; })
               .has_value();
      auto d = plan(s, last_active);
      std::int64_t started = 0;
      auto last_run = s.last_run_id;
      auto last_tick = s.last_tick_ms;
      for (auto& start : d.starts) {
        // A tick a backfill started already is not started twice.
        if (insert_tick_run(tx, s, start.run_id, now_ms))
          ++started;
        last_run = start.run_id;
        last_tick = start.tick_ms;
      }
      tx.run(advance,
             {std::string_view{s.name}, opt(d.next_tick_ms), opt(d.due_ms),
              std::string_view{join(d.buffered)}, std::string_view{last_run},
              opt(last_tick), started, d.skipped, d.missed, d.caught_up,
              now_ms});
      d.started = started;
      out.push_back(std::move(d));
    }
  });
  return out;
}

std::optional<std::int64_t> sql_store::start_schedule_runs(
  std::string_view name, const std::vector<schedule_decision::start>& starts,
  std::int64_t at_ms) {
  static const sql_query get{"schedule_get_for_start",
                             std::string{"SELECT "} + schedule_columns
                               + " FROM {s}schedules WHERE name = $1"};
  static const sql_query counted{
    "schedule_count_started",
    "UPDATE {s}schedules SET started = started + $2, updated_at = $3 WHERE "
    "name = $1"};
  std::optional<std::int64_t> out;
  write([&](sql_tx& tx) {
    out.reset();
    auto s = tx.first(get, {name}, read_schedule);
    if (!s)
      return;
    std::int64_t n = 0;
    for (auto& start : starts)
      if (insert_tick_run(tx, *s, start.run_id, at_ms))
        ++n;
    tx.run(counted, {name, n, at_ms});
    out = n;
  });
  return out;
}

} // namespace perdure::persistence
