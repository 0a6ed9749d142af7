#include "perdure/persistence/detail/operator_views.hpp"

#include "perdure/persistence/detail/shared_sql.hpp"

namespace perdure::persistence::detail {

namespace {

/// How one backend spells what the views need.
struct spelling {
  bool postgres;
  std::string s;

  /// ms since the epoch as a time: timestamptz, or ISO 8601 text (UTC).
  std::string time(const std::string& ms) const {
    if (postgres)
      return "to_timestamp(" + ms + " / 1000.0)";
    return "strftime('%Y-%m-%dT%H:%M:%fZ', " + ms + " / 1000.0, 'unixepoch')";
  }

  /// A stored payload as JSON: the value a JSON payload holds (jsonb, or
  /// JSON text), NULL for a binary or unreadable one.
  std::string json(const std::string& p) const {
    if (postgres)
      return s + "payload_json(" + p + ")";
    return "(CASE WHEN " + p + " IS NULL OR length(" + p + ") = 0 OR hex(substr("
           + p + ", 1, 1)) = '01' THEN NULL WHEN json_valid(CAST(" + p
           + " AS TEXT)) THEN CAST(" + p + " AS TEXT) -> '$.value' END)";
  }

  std::string view(const std::string& name, const std::string& body) const {
    return "CREATE VIEW " + s + name + " AS " + body;
  }
};

/// `v_runs`' query; `collected`: with the time a run was collected (added
/// by migration 19, after the column; migration 14 keeps the first shape).
std::string runs_view_body(const spelling& sp, bool collected) {
  const auto& s = sp.s;
  auto yes = sp.postgres ? "true" : "1";
  auto no = sp.postgres ? "false" : "0";
  return "SELECT id, name AS workflow, CASE WHEN status = 'PENDING' AND "
    "saga_phase = 'COMPENSATING' THEN 'COMPENSATING' ELSE status END AS "
    "status, app_version, executor, epoch, parent_id, queue_name, "
    "object_type, object_key, "
      + sp.time("created_at") + " AS created_at, " + sp.time("updated_at")
      + " AS updated_at, CASE WHEN status IN " + ended_statuses + " THEN "
      + sp.time("updated_at") + " END AS ended_at, " + sp.time("started_at")
      + " AS started_at, " + sp.time("deadline") + " AS deadline, CASE WHEN "
      + "wake_at > 0 THEN " + sp.time("wake_at")
      + " END AS wake_at, attempts, recovery_attempts, priority, "
        "partition_key, dedup_id, saga_phase, CASE WHEN cancel_requested_at "
        "IS NULL THEN "
      + no + " ELSE " + yes + " END AS cancel_requested, error, "
      + sp.json("inputs") + " AS inputs, " + sp.json("output")
      + " AS output"
      + (collected ? ", " + sp.time("collected_at") + " AS collected_at"
                   : std::string{})
      + " FROM " + s + "runs";
}

} // namespace

std::vector<std::string> operator_views(bool postgres, const std::string& s) {
  spelling sp{postgres, s};
  std::vector<std::string> out;
  if (postgres)
    // A payload that is not Perdure's JSON (binary, or a bad row) reads as
    // NULL instead of failing the whole query.
    out.push_back(
      "CREATE FUNCTION " + s
      + "payload_json(p bytea) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS "
        "$f$ BEGIN IF p IS NULL OR length(p) = 0 OR get_byte(p, 0) = 1 "
        "THEN RETURN NULL; END IF; RETURN convert_from(p, 'UTF8')::jsonb -> "
        "'value'; EXCEPTION WHEN others THEN RETURN NULL; END $f$");
  auto yes = postgres ? "true" : "1";
  auto no = postgres ? "false" : "0";
  out.push_back(sp.view("v_runs", runs_view_body(sp, false)));
  out.push_back(sp.view(
    "v_steps",
    "SELECT run_id, seq, kind, name, CASE outcome WHEN 0 THEN 'value' WHEN 1 "
    "THEN 'failed' WHEN 2 THEN 'terminal' ELSE 'unreadable' END AS outcome, "
      + sp.json("payload") + " AS result, error, " + sp.time("created_at")
      + " AS recorded_at FROM " + s + "journal"));
  out.push_back(sp.view(
    "v_waits",
    // Awakeables of unended runs with no outcome stored yet, and runs
    // passivated until a time (sleeping or waiting with a deadline).
    "SELECT j.run_id, r.name AS workflow, 'awakeable' AS kind, j.name AS "
    "wait_id, "
      + sp.time("j.created_at") + " AS since, NULL AS due_at FROM " + s
      + "runs r JOIN " + s
      + "journal j ON j.run_id = r.id WHERE r.status = 'PENDING' AND j.kind "
        "= 'awakeable' AND NOT EXISTS (SELECT 1 FROM "
      + s + "resolutions x WHERE x.id = j.name) UNION ALL SELECT id, name, "
      + "'timer', NULL, " + sp.time("updated_at") + ", " + sp.time("wake_at")
      + " FROM " + s + "runs WHERE status = 'PENDING' AND wake_at > 0"));
  out.push_back(sp.view(
    "v_queues",
    "SELECT q.name, q.concurrency, q.partition_concurrency, q.rate_limit, "
    "q.rate_period_ms, (SELECT count(*) FROM "
      + s + "runs r WHERE r.queue_name = q.name AND r.status = 'ENQUEUED') "
      + "AS enqueued, (SELECT count(*) FROM " + s
      + "runs r WHERE r.queue_name = q.name AND r.status = 'PENDING') AS "
      + "running, (SELECT count(*) FROM " + s
      + "runs r WHERE r.queue_name = q.name AND r.status = 'DEAD_LETTER') "
      + "AS dead_letters, " + sp.time("q.updated_at") + " AS updated_at FROM "
      + s + "queues q"));
  out.push_back(sp.view(
    "v_objects",
    "SELECT o.type, o.key, " + sp.json("o.state")
      + " AS state, o.version, o.executor, o.epoch, " + sp.time("o.updated_at")
      + " AS updated_at, (SELECT count(*) FROM " + s
      + "runs r WHERE r.object_type = o.type AND r.object_key = o.key AND "
        "r.status IN ('ENQUEUED', 'PENDING')) AS queued_calls FROM "
      + s + "objects o"));
  auto heartbeat = postgres ? std::string{"heartbeat_at"}
                            : sp.time("heartbeat_at");
  auto started = postgres ? std::string{"started_at"} : sp.time("started_at");
  out.push_back(sp.view(
    "v_executors",
    "SELECT e.id, e.state, e.app_version, e.epoch, " + heartbeat
      + " AS heartbeat_at, e.lease_ms, " + started
      + " AS started_at, (SELECT count(*) FROM " + s
      + "runs r WHERE r.status = 'PENDING' AND r.executor = e.id) AS "
        "runs_held FROM "
      + s + "executors e"));
  out.push_back(sp.view(
    "v_versions",
    // Every version processes ran or unended work carries; stranded: work
    // waits and no live process of the version (for the empty version,
    // none at all) can take it.
    "SELECT v.version AS app_version, " + sp.time("a.first_seen")
      + " AS first_seen, " + sp.time("a.last_seen")
      + " AS last_seen, v.live_executors, v.pending, v.enqueued, v.blocked, "
        "CASE WHEN v.pending + v.enqueued + v.blocked > 0 AND (CASE WHEN "
        "v.version = '' THEN (SELECT count(*) FROM "
      + s + "executors WHERE state = 'live') ELSE v.live_executors END) = 0 "
      + "THEN " + yes + " ELSE " + no
      + " END AS stranded FROM (SELECT n.version, (SELECT count(*) FROM " + s
      + "executors e WHERE e.state = 'live' AND e.app_version = n.version) "
        "AS live_executors, (SELECT count(*) FROM "
      + s + "runs r WHERE r.status = 'PENDING' AND r.app_version = "
        "n.version) AS pending, (SELECT count(*) FROM "
      + s + "runs r WHERE r.status = 'ENQUEUED' AND r.app_version = "
        "n.version) AS enqueued, (SELECT count(*) FROM "
      + s + "runs r WHERE r.status = 'BLOCKED' AND r.app_version = "
        "n.version) AS blocked FROM (SELECT version FROM "
      + s + "app_versions UNION SELECT app_version FROM " + s
      + "executors WHERE state = 'live' UNION SELECT app_version FROM " + s
      + "runs WHERE status IN ('PENDING', 'ENQUEUED', 'BLOCKED')) n) v LEFT "
        "JOIN "
      + s + "app_versions a ON a.version = v.version"));
  return out;
}

std::string schedule_view(bool postgres, const std::string& s) {
  spelling sp{postgres, s};
  return sp.view(
    "v_schedules",
    "SELECT name, workflow, NULLIF(queue_name, '') AS queue_name, cron, "
    "time_zone, CASE WHEN paused <> 0 THEN 'paused' WHEN due_at IS NULL THEN "
    "'ended' ELSE 'active' END AS state, "
      + sp.time("CASE WHEN paused = 0 THEN due_at END") + " AS next_fire, "
      + sp.time("last_tick") + " AS last_fire, NULLIF(last_run_id, '') AS "
      + "last_run_id, started, skipped, missed, caught_up, overlap, catchup, "
        "NULLIF(owner, '') AS owner, "
      + sp.time("updated_at") + " AS updated_at FROM " + s + "schedules");
}

std::vector<std::string> collected_runs_view(bool postgres,
                                             const std::string& s) {
  spelling sp{postgres, s};
  // PostgreSQL replaces it in place (a column added at the end), so views
  // and grants operators built on it stay; SQLite cannot.
  if (postgres)
    return {"CREATE OR REPLACE VIEW " + s + "v_runs AS "
            + runs_view_body(sp, true)};
  return {"DROP VIEW " + s + "v_runs",
          sp.view("v_runs", runs_view_body(sp, true))};
}

} // namespace perdure::persistence::detail
