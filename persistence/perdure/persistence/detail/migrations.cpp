// The migrations of each backend, as data: two long lists (see
// migrations.hpp for the numbering rule).

#include "perdure/persistence/detail/migrations.hpp"

#include "perdure/persistence/detail/operator_views.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"

namespace perdure::persistence::detail {

namespace {

/// `statements`, then the operators' views (detail/operator_views.hpp).
std::vector<std::string> with_views(bool postgres, const std::string& s,
                                    std::vector<std::string> statements) {
  for (auto& v : operator_views(postgres, s))
    statements.push_back(std::move(v));
  return statements;
}

} // namespace

namespace {

/// `statements` and then `more`.
std::vector<std::string> with(std::vector<std::string> statements,
                              std::string more) {
  statements.push_back(std::move(more));
  return statements;
}

/// The schedules table (`prefix`: the PostgreSQL schema and a dot) and its
/// index of due times, for firing passes (paused ones never due).
std::vector<std::string> schedules_table(const std::string& prefix,
                                         const std::string& integer,
                                         const std::string& bytes) {
  return {
    "CREATE TABLE " + prefix + "schedules ("
    " name TEXT PRIMARY KEY,"
    " workflow TEXT NOT NULL,"
    " queue_name TEXT NOT NULL,"
    " cron TEXT NOT NULL,"
    " time_zone TEXT NOT NULL,"
    " dst_repeat TEXT NOT NULL,"
    " inputs " + bytes + " NOT NULL,"
    " overlap TEXT NOT NULL,"
    " catchup TEXT NOT NULL,"
    " catchup_window_ms " + integer + " NOT NULL,"
    " jitter_ms " + integer + " NOT NULL,"
    " start_at " + integer + ","
    " end_at " + integer + ","
    " paused " + integer + " NOT NULL,"
    " owner TEXT NOT NULL,"
    " next_tick " + integer + ","
    " due_at " + integer + ","
    " buffered TEXT NOT NULL,"
    " last_run_id TEXT NOT NULL,"
    " last_tick " + integer + ","
    " started " + integer + " NOT NULL,"
    " skipped " + integer + " NOT NULL,"
    " missed " + integer + " NOT NULL,"
    " caught_up " + integer + " NOT NULL,"
    " created_at " + integer + " NOT NULL,"
    " updated_at " + integer + " NOT NULL)",
    "CREATE INDEX schedules_due ON " + prefix
      + "schedules (due_at) WHERE paused = 0",
  };
}

/// Retention (migration 18): when a run was collected; its roots (runs
/// with no parent: children go with them) that ended and were not
/// collected, and the tombstones, each by workflow, status and end (a
/// run that ends enters the first; nothing live is in either, so the hot
/// path pays one index entry per ended root); awakeable outcomes by run;
/// and the collector's turn and totals (one process at a time).
std::vector<std::string> retention_schema(const std::string& prefix,
                                          const std::string& integer) {
  auto roots = std::string{" WHERE "} + ended_condition
               + " AND parent_id IS NULL";
  return {
    "ALTER TABLE " + prefix + "runs ADD COLUMN collected_at " + integer,
    "CREATE INDEX runs_ended ON " + prefix
      + "runs (name, status, updated_at, id)" + roots
      + " AND collected_at IS NULL",
    "CREATE INDEX runs_tombstones ON " + prefix
      + "runs (name, status, updated_at)" + roots
      + " AND collected_at IS NOT NULL",
    "CREATE INDEX resolutions_run ON " + prefix + "resolutions (run_id)",
    "CREATE TABLE " + prefix + "retention_state (id INTEGER PRIMARY KEY, "
      "holder TEXT NOT NULL, held_until " + integer + " NOT NULL, "
      "runs_collected " + integer + " NOT NULL, ids_expired " + integer
      + " NOT NULL, last_batch_at " + integer + " NOT NULL)",
    "INSERT INTO " + prefix + "retention_state VALUES (1, '', 0, 0, 0, 0)",
  };
}

} // namespace

std::vector<migration> sqlite_migrations() {
  return {
    {1,
     "runs and journal",
     {
       "CREATE TABLE runs ("
       " id TEXT PRIMARY KEY,"
       " name TEXT NOT NULL,"
       " status TEXT NOT NULL,"
       " inputs BLOB NOT NULL,"
       " output BLOB,"
       " error TEXT,"
       " executor TEXT NOT NULL,"
       " epoch INTEGER NOT NULL,"
       " recovery_attempts INTEGER NOT NULL DEFAULT 0,"
       " app_version TEXT NOT NULL DEFAULT '',"
       " created_at INTEGER NOT NULL,"
       " updated_at INTEGER NOT NULL)",
       // Recovery finds an executor's PENDING runs; nothing else may pick
       // this index over the primary key (see postgres_store.cpp).
       "CREATE INDEX runs_pending ON runs (executor) WHERE status = 'PENDING'",
       "CREATE TABLE journal ("
       " run_id TEXT NOT NULL,"
       " seq INTEGER NOT NULL,"
       " kind TEXT NOT NULL,"
       " name TEXT NOT NULL,"
       " outcome INTEGER NOT NULL,"
       " payload BLOB,"
       " error TEXT,"
       " created_at INTEGER NOT NULL,"
       " PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
     }},
    {2,
     "durable waits: wake-up times, parents, awakeable outcomes",
     {
       "ALTER TABLE runs ADD COLUMN wake_at INTEGER",
       "ALTER TABLE runs ADD COLUMN parent_id TEXT",
       "ALTER TABLE runs ADD COLUMN deadline INTEGER",
       "CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT "
       "NULL",
       "CREATE TABLE resolutions ("
       " id TEXT PRIMARY KEY,"
       " run_id TEXT NOT NULL,"
       " seq INTEGER NOT NULL,"
       " outcome INTEGER NOT NULL,"
       " payload BLOB,"
       " error TEXT,"
       " created_at INTEGER NOT NULL) WITHOUT ROWID",
       "CREATE TABLE messages ("
       " id INTEGER PRIMARY KEY AUTOINCREMENT,"
       " run_id TEXT NOT NULL,"
       " topic TEXT NOT NULL,"
       " payload BLOB NOT NULL,"
       " created_at INTEGER NOT NULL)",
       "CREATE INDEX messages_by_topic ON messages (run_id, topic, id)",
       "CREATE TABLE events ("
       " run_id TEXT NOT NULL,"
       " key TEXT NOT NULL,"
       " value BLOB NOT NULL,"
       " updated_at INTEGER NOT NULL,"
       " PRIMARY KEY (run_id, key)) WITHOUT ROWID",
     }},
    {3,
     "the runs delivered to while passivated, for the sweep",
     {
       "CREATE INDEX runs_delivered ON runs (executor) WHERE wake_at = 0",
     }},
    {4,
     "notices between processes sharing the file (SQLite has no NOTIFY)",
     {
       "CREATE TABLE notices ("
       " id INTEGER PRIMARY KEY AUTOINCREMENT,"
       " payload TEXT NOT NULL,"
       " created_at INTEGER NOT NULL)",
     }},
    {5,
     "executor leases, and runs listed newest first",
     {
       "CREATE TABLE executors ("
       " id TEXT PRIMARY KEY,"
       " lock_key INTEGER NOT NULL DEFAULT 0,"
       " epoch INTEGER NOT NULL DEFAULT 0,"
       " state TEXT NOT NULL DEFAULT 'stopped',"
       " instance TEXT NOT NULL DEFAULT '',"
       " app_version TEXT NOT NULL DEFAULT '',"
       " lease_ms INTEGER NOT NULL DEFAULT 10000,"
       " heartbeat_at INTEGER NOT NULL DEFAULT 0,"
       " started_at INTEGER NOT NULL DEFAULT 0)",
       // Runs of executors that never had a lease (before leases existed)
       // can be taken over like those of a stopped one.
       "INSERT INTO executors (id) SELECT DISTINCT executor FROM runs WHERE "
       "status = 'PENDING' AND executor <> ''",
       "CREATE INDEX runs_created ON runs (created_at, id)",
     }},
    {7,
     "virtual objects: their rows, and invocations as runs (the inbox)",
     {
       "ALTER TABLE runs ADD COLUMN object_type TEXT",
       "ALTER TABLE runs ADD COLUMN object_key TEXT",
       "ALTER TABLE runs ADD COLUMN call_chain TEXT",
       // A key's unended invocations in the order they were stored (rowid).
       "CREATE INDEX runs_inbox ON runs (object_type, object_key) WHERE "
       "object_type IS NOT NULL AND status IN ('ENQUEUED', 'PENDING')",
       "CREATE TABLE objects ("
       " type TEXT NOT NULL,"
       " key TEXT NOT NULL,"
       " state BLOB,"
       " version INTEGER NOT NULL DEFAULT 0,"
       " executor TEXT NOT NULL,"
       " epoch INTEGER NOT NULL,"
       " updated_at INTEGER NOT NULL,"
       " PRIMARY KEY (type, key)) WITHOUT ROWID",
     }},
    {8,
     "sagas: their phase, and cancellation as a signal they observe",
     {
       "ALTER TABLE runs ADD COLUMN saga_phase TEXT",
       "ALTER TABLE runs ADD COLUMN cancel_requested_at INTEGER",
       // The sweep's look for signals it may have missed: few rows.
       "CREATE INDEX runs_cancel_signalled ON runs (executor) WHERE "
       "cancel_requested_at IS NOT NULL AND saga_phase = 'FORWARD' AND "
       "status = 'PENDING'",
     }},
    {9,
     "queues: items as runs, with their scheduling, and a row per queue",
     {
       "ALTER TABLE runs ADD COLUMN queue_name TEXT",
       "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
       "ALTER TABLE runs ADD COLUMN partition_key TEXT NOT NULL DEFAULT ''",
       "ALTER TABLE runs ADD COLUMN dedup_id TEXT",
       "ALTER TABLE runs ADD COLUMN not_before INTEGER",
       "ALTER TABLE runs ADD COLUMN started_at INTEGER",
       "ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
       "ALTER TABLE runs ADD COLUMN timeout_ms INTEGER",
       // What waits, in claiming order (priority, then as stored: rowid);
       // a partition's head.
       "CREATE INDEX runs_queued ON runs (queue_name, priority) WHERE "
       "status = 'ENQUEUED' AND queue_name IS NOT NULL",
       "CREATE INDEX runs_queued_partition ON runs (queue_name, "
       "partition_key, priority) WHERE status = 'ENQUEUED' AND queue_name IS "
       "NOT NULL",
       // What runs (concurrency), and the dead letters.
       "CREATE INDEX runs_queue_running ON runs (queue_name, partition_key) "
       "WHERE status = 'PENDING' AND queue_name IS NOT NULL",
       "CREATE INDEX runs_dead_letters ON runs (queue_name) WHERE status = "
       "'DEAD_LETTER'",
       // Every start of a rate-limited queue's items, retries included
       // (what its limit counts); old ones are pruned by the claims.
       "CREATE TABLE queue_starts (queue_name TEXT NOT NULL, started_at "
       "INTEGER NOT NULL)",
       "CREATE INDEX queue_starts_by_queue ON queue_starts (queue_name, "
       "started_at)",
       // One item per dedup id while it is queued or running.
       "CREATE UNIQUE INDEX runs_dedup ON runs (queue_name, dedup_id) WHERE "
       "dedup_id IS NOT NULL AND status IN ('ENQUEUED', 'PENDING')",
       "CREATE TABLE queues (name TEXT PRIMARY KEY, concurrency INTEGER, "
       "partition_concurrency INTEGER, rate_limit INTEGER, rate_period_ms "
       "INTEGER NOT NULL, updated_at INTEGER NOT NULL)",
     }},
    {10,
     "sagas: a saga whose body returned (DONE) takes a cancellation as a "
     "signal too",
     {
       "DROP INDEX runs_cancel_signalled",
       "CREATE INDEX runs_cancel_signalled ON runs (executor) WHERE "
       "cancel_requested_at IS NOT NULL AND saga_phase IN ('FORWARD', "
       "'DONE') AND status = 'PENDING'",
     }},
    {11,
     "deploys: runs BLOCKED on code that no longer replays them",
     {
       // When the process that blocked it started: newer ones try again.
       "ALTER TABLE runs ADD COLUMN blocked_code_since INTEGER",
       "CREATE INDEX runs_blocked ON runs (blocked_code_since) WHERE status "
       "= 'BLOCKED'",
     }},
    {12,
     "deploys: the app versions processes ran, first and last seen",
     {
       // The report reads unended work through the partial indexes of
       // each status (an index of its own cost every write of a run: a
       // third of SQLite's object and queue throughput).
       "CREATE TABLE app_versions (version TEXT PRIMARY KEY, first_seen "
       "INTEGER NOT NULL, last_seen INTEGER NOT NULL)",
     }},
    {13,
     "operators: what was done to a run (resumed, forked, moved) and why",
     {
       // `seq`: the journal index the event came before (history's order).
       "CREATE TABLE run_events (run_id TEXT NOT NULL, at INTEGER NOT NULL, "
       "seq INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL, "
       "reason TEXT NOT NULL)",
       "CREATE INDEX run_events_run ON run_events (run_id, at)",
     }},
    {14, "operators: runs listed by status, and the views of the SQL contract",
     with_views(false, "",
                {std::string{"CREATE INDEX runs_failed ON runs (status, "
                             "created_at, id) WHERE "}
                 + failed_statuses_condition})},
    {15, "metrics: store-wide gauges computed by one process at a time",
     {
       // Measured: SQLite's object calls ran 20 % slower with migration
       // 14's partial index on failed statuses (7 900 against 6 400
       // calls/s, same binary, same file with and without it); an
       // embedded store's listing of failed runs scans newest first
       // instead (PostgreSQL keeps it: no cost measured there).
       "DROP INDEX IF EXISTS runs_failed",
       "CREATE TABLE store_gauges (gauge TEXT NOT NULL, label_a TEXT NOT "
       "NULL, label_b TEXT NOT NULL, value INTEGER NOT NULL)",
       "CREATE TABLE store_gauges_refresh (id INTEGER PRIMARY KEY, "
       "computed_at INTEGER NOT NULL, computed_by TEXT NOT NULL)",
       "INSERT INTO store_gauges_refresh VALUES (1, 0, '')",
     }},
    {16, "traces: the W3C trace context a run was started in",
     {"ALTER TABLE runs ADD COLUMN traceparent TEXT"}},
    {17, "schedules: a definition and a durable cursor per schedule",
     with(schedules_table("", "INTEGER", "BLOB"), schedule_view(false, ""))},
    {18, "retention: collected runs, tombstones, the collector's turn",
     retention_schema("", "INTEGER")},
    {19, "retention: v_runs shows when a run was collected",
     collected_runs_view(false, "")},
  };
}

namespace {

/// Returns `text` as an SQL string literal (the schema name is the user's).
std::string literal(const std::string& text) {
  std::string out = "'";
  for (char ch : text)
    out += ch == '\'' ? std::string{"''"} : std::string{ch};
  return out + "'";
}

} // namespace

std::vector<migration> postgres_migrations(const std::string& schema) {
  auto s = schema + ".";
  return {
    {1,
     "runs and journal",
     {
       "CREATE TABLE " + s + "runs ("
       " id TEXT PRIMARY KEY,"
       " name TEXT NOT NULL,"
       " status TEXT NOT NULL,"
       " inputs BYTEA NOT NULL,"
       " output BYTEA,"
       " error TEXT,"
       " executor TEXT NOT NULL,"
       " epoch BIGINT NOT NULL,"
       " recovery_attempts INT NOT NULL DEFAULT 0,"
       " app_version TEXT NOT NULL DEFAULT '',"
       " created_at BIGINT NOT NULL,"
       " updated_at BIGINT NOT NULL)",
       "CREATE INDEX runs_pending ON " + s
         + "runs (executor) WHERE status = 'PENDING'",
       "CREATE TABLE " + s + "journal ("
       " run_id TEXT NOT NULL,"
       " seq INT NOT NULL,"
       " kind TEXT NOT NULL,"
       " name TEXT NOT NULL,"
       " outcome SMALLINT NOT NULL,"
       " payload BYTEA,"
       " error TEXT,"
       " created_at BIGINT NOT NULL,"
       " PRIMARY KEY (run_id, seq))",
     }},
    {2,
     "durable waits: wake-up times, parents, awakeable outcomes",
     {
       "ALTER TABLE " + s + "runs ADD COLUMN wake_at BIGINT",
       "ALTER TABLE " + s + "runs ADD COLUMN parent_id TEXT",
       "ALTER TABLE " + s + "runs ADD COLUMN deadline BIGINT",
       "CREATE INDEX runs_parent ON " + s
         + "runs (parent_id) WHERE parent_id IS NOT NULL",
       "CREATE TABLE " + s + "resolutions ("
       " id TEXT PRIMARY KEY,"
       " run_id TEXT NOT NULL,"
       " seq INT NOT NULL,"
       " outcome SMALLINT NOT NULL,"
       " payload BYTEA,"
       " error TEXT,"
       " created_at BIGINT NOT NULL)",
       "CREATE TABLE " + s + "messages ("
       " id BIGSERIAL PRIMARY KEY,"
       " run_id TEXT NOT NULL,"
       " topic TEXT NOT NULL,"
       " payload BYTEA NOT NULL,"
       " created_at BIGINT NOT NULL)",
       "CREATE INDEX messages_by_topic ON " + s + "messages (run_id, topic, id)",
       "CREATE TABLE " + s + "events ("
       " run_id TEXT NOT NULL,"
       " key TEXT NOT NULL,"
       " value BYTEA NOT NULL,"
       " updated_at BIGINT NOT NULL,"
       " PRIMARY KEY (run_id, key))",
     }},
    {3,
     "the runs delivered to while passivated, for the sweep",
     {
       "CREATE INDEX runs_delivered ON " + s + "runs (executor) WHERE wake_at "
         "= 0",
     }},
    {5,
     "executor leases, and runs listed newest first",
     {
       // lock_key names the executor's session advisory lock.
       "CREATE TABLE " + s + "executors ("
       " id TEXT PRIMARY KEY,"
       " lock_key SERIAL,"
       " epoch BIGINT NOT NULL DEFAULT 0,"
       " state TEXT NOT NULL DEFAULT 'stopped',"
       " instance TEXT NOT NULL DEFAULT '',"
       " app_version TEXT NOT NULL DEFAULT '',"
       " lease_ms BIGINT NOT NULL DEFAULT 10000,"
       " heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
       " started_at TIMESTAMPTZ NOT NULL DEFAULT now())",
       "INSERT INTO " + s + "executors (id) SELECT DISTINCT executor FROM " + s
         + "runs WHERE status = 'PENDING' AND executor <> ''",
       "CREATE INDEX runs_created ON " + s + "runs (created_at, id)",
     }},
    {6,
     "lease epochs from one sequence (never repeated once a row is gone)",
     {
       "CREATE SEQUENCE " + s + "executor_epochs",
       "SELECT setval(" + literal(s + "executor_epochs") + ", GREATEST(1, (SELECT "
         "max(epoch) FROM " + s + "executors)))",
     }},
    {7,
     "virtual objects: their rows, and invocations as runs (the inbox)",
     {
       "ALTER TABLE " + s + "runs ADD COLUMN object_type TEXT",
       "ALTER TABLE " + s + "runs ADD COLUMN object_key TEXT",
       "ALTER TABLE " + s + "runs ADD COLUMN call_chain TEXT",
       // A key's invocations in the order they were stored.
       "ALTER TABLE " + s + "runs ADD COLUMN inbox_seq BIGINT",
       "CREATE SEQUENCE " + s + "inbox_seq",
       "CREATE INDEX runs_inbox ON " + s
         + "runs (object_type, object_key, inbox_seq) WHERE object_type IS "
           "NOT NULL AND status IN ('ENQUEUED', 'PENDING')",
       "CREATE TABLE " + s + "objects ("
       " type TEXT NOT NULL,"
       " key TEXT NOT NULL,"
       " state BYTEA,"
       " version BIGINT NOT NULL DEFAULT 0,"
       " executor TEXT NOT NULL,"
       " epoch BIGINT NOT NULL,"
       " updated_at BIGINT NOT NULL,"
       " PRIMARY KEY (type, key))",
     }},
    {8,
     "sagas: their phase, and cancellation as a signal they observe",
     {
       "ALTER TABLE " + s + "runs ADD COLUMN saga_phase TEXT",
       "ALTER TABLE " + s + "runs ADD COLUMN cancel_requested_at BIGINT",
       // The sweep's look for signals it may have missed: few rows.
       "CREATE INDEX runs_cancel_signalled ON " + s
         + "runs (executor) WHERE cancel_requested_at IS NOT NULL AND "
           "saga_phase = 'FORWARD' AND status = 'PENDING'",
     }},
    {9,
     "queues: items as runs, with their scheduling, and a row per queue",
     {
       "ALTER TABLE " + s + "runs ADD COLUMN queue_name TEXT",
       "ALTER TABLE " + s + "runs ADD COLUMN priority INTEGER NOT NULL "
         "DEFAULT 0",
       "ALTER TABLE " + s + "runs ADD COLUMN partition_key TEXT NOT NULL "
         "DEFAULT ''",
       "ALTER TABLE " + s + "runs ADD COLUMN dedup_id TEXT",
       "ALTER TABLE " + s + "runs ADD COLUMN not_before BIGINT",
       "ALTER TABLE " + s + "runs ADD COLUMN started_at BIGINT",
       "ALTER TABLE " + s + "runs ADD COLUMN attempts INTEGER NOT NULL "
         "DEFAULT 0",
       "ALTER TABLE " + s + "runs ADD COLUMN timeout_ms BIGINT",
       // What waits, in claiming order (priority, then as stored: the
       // inbox sequence numbers queue items too); a partition's head.
       "CREATE INDEX runs_queued ON " + s + "runs (queue_name, priority, "
         "inbox_seq) WHERE status = 'ENQUEUED' AND queue_name IS NOT NULL",
       "CREATE INDEX runs_queued_partition ON " + s + "runs (queue_name, "
         "partition_key, priority, inbox_seq) WHERE status = 'ENQUEUED' AND "
         "queue_name IS NOT NULL",
       // What runs (concurrency), and the dead letters.
       "CREATE INDEX runs_queue_running ON " + s + "runs (queue_name, "
         "partition_key) WHERE status = 'PENDING' AND queue_name IS NOT NULL",
       "CREATE INDEX runs_dead_letters ON " + s + "runs (queue_name) WHERE "
         "status = 'DEAD_LETTER'",
       // Every start of a rate-limited queue's items, retries included
       // (what its limit counts); old ones are pruned by the claims.
       "CREATE TABLE " + s + "queue_starts (queue_name TEXT NOT NULL, "
         "started_at BIGINT NOT NULL)",
       "CREATE INDEX queue_starts_by_queue ON " + s + "queue_starts "
         "(queue_name, started_at)",
       // One item per dedup id while it is queued or running.
       "CREATE UNIQUE INDEX runs_dedup ON " + s + "runs (queue_name, "
         "dedup_id) WHERE dedup_id IS NOT NULL AND status IN ('ENQUEUED', "
         "'PENDING')",
       // Claimers of a queue with a shared limit lock its row.
       "CREATE TABLE " + s + "queues (name TEXT PRIMARY KEY, concurrency "
         "INTEGER, partition_concurrency INTEGER, rate_limit INTEGER, "
         "rate_period_ms BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
     }},
    {10,
     "sagas: a saga whose body returned (DONE) takes a cancellation as a "
     "signal too",
     {
       "DROP INDEX " + s + "runs_cancel_signalled",
       "CREATE INDEX runs_cancel_signalled ON " + s
         + "runs (executor) WHERE cancel_requested_at IS NOT NULL AND "
           "saga_phase IN ('FORWARD', 'DONE') AND status = 'PENDING'",
     }},
    {11,
     "deploys: runs BLOCKED on code that no longer replays them",
     {
       // When the process that blocked it started: newer ones try again.
       "ALTER TABLE " + s + "runs ADD COLUMN blocked_code_since BIGINT",
       "CREATE INDEX runs_blocked ON " + s + "runs (blocked_code_since) "
         "WHERE status = 'BLOCKED'",
     }},
    {12,
     "deploys: the app versions processes ran, first and last seen",
     {
       "CREATE TABLE " + s + "app_versions (version TEXT PRIMARY KEY, "
       "first_seen BIGINT NOT NULL, last_seen BIGINT NOT NULL)",
     }},
    {13,
     "operators: what was done to a run (resumed, forked, moved) and why",
     {
       "CREATE TABLE " + s + "run_events (run_id TEXT NOT NULL, at BIGINT "
       "NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL, detail TEXT NOT "
       "NULL, reason TEXT NOT NULL)",
       "CREATE INDEX run_events_run ON " + s + "run_events (run_id, at)",
     }},
    {14, "operators: runs listed by status, and the views of the SQL contract",
     with_views(true, s,
                {"CREATE INDEX runs_failed ON " + s
                 + "runs (status, created_at, id) WHERE "
                 + failed_statuses_condition})},
    {15, "metrics: store-wide gauges computed by one process at a time",
     {
       "CREATE TABLE " + s + "store_gauges (gauge TEXT NOT NULL, label_a "
       "TEXT NOT NULL, label_b TEXT NOT NULL, value BIGINT NOT NULL)",
       "CREATE TABLE " + s + "store_gauges_refresh (id INT PRIMARY KEY, "
       "computed_at BIGINT NOT NULL, computed_by TEXT NOT NULL)",
       "INSERT INTO " + s + "store_gauges_refresh VALUES (1, 0, '')",
     }},
    {16, "traces: the W3C trace context a run was started in",
     {"ALTER TABLE " + s + "runs ADD COLUMN traceparent TEXT"}},
    {17, "schedules: a definition and a durable cursor per schedule",
     with(schedules_table(s, "BIGINT", "BYTEA"), schedule_view(true, s))},
    {18, "retention: collected runs, tombstones, the collector's turn",
     retention_schema(s, "BIGINT")},
    {19, "retention: v_runs shows when a run was collected",
     collected_runs_view(true, s)},
  };
}

} // namespace perdure::persistence::detail
