// App versions: who runs which, what waits for which, and moving runs
// between them (run_store.hpp).

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "perdure/persistence/detail/sql/run_events.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

void sql_store::note_version(std::string_view version, std::int64_t at_ms) {
  static const sql_query q{
    "note_version",
    "INSERT INTO {s}app_versions (version, first_seen, last_seen) VALUES "
    "($1, $2, $2) ON CONFLICT (version) DO UPDATE SET last_seen = "
    "EXCLUDED.last_seen"};
  autocommit([&](sql_tx& tx) { tx.run(q, {version, at_ms}); });
}

std::vector<version_report> sql_store::versions() {
  static const sql_query seen{
    "versions_seen", "SELECT version, first_seen, last_seen FROM "
                     "{s}app_versions"};
  static const sql_query live{
    "versions_live", "SELECT app_version, count(*) FROM {s}executors WHERE "
                     "state = 'live' GROUP BY app_version"};
  static const sql_query work{
    "versions_work",
    // Each status through its partial index (bounded by unended work; an
    // object's calls waiting in its inbox through runs_inbox, whose
    // condition SQLite must find written out).
    "SELECT app_version, 'PENDING', count(*), min(created_at) FROM {s}runs "
    "WHERE status = 'PENDING' GROUP BY app_version UNION ALL SELECT "
    "app_version, 'ENQUEUED', count(*), min(created_at) FROM {s}runs WHERE "
    "status = 'ENQUEUED' AND queue_name IS NOT NULL GROUP BY app_version "
    "UNION ALL SELECT app_version, 'ENQUEUED', count(*), min(created_at) "
    "FROM {s}runs WHERE object_type IS NOT NULL AND status IN ('ENQUEUED', "
    "'PENDING') AND status = 'ENQUEUED' GROUP BY app_version UNION ALL SELECT app_version, 'BLOCKED', count(*), "
    "min(created_at) FROM {s}runs WHERE status = 'BLOCKED' GROUP BY "
    "app_version"};
  std::map<std::string, version_report> by_version;
  std::int64_t live_total = 0;
  read([&](sql_tx& tx) {
    by_version.clear();
    live_total = 0;
    tx.run(seen, {}, [&](const sql_row& r) {
      auto& v = by_version[r.text(0)];
      v.first_seen = from_ms(r.int64(1));
      v.last_seen = from_ms(r.int64(2));
    });
    tx.run(live, {}, [&](const sql_row& r) {
      by_version[r.text(0)].live_executors = r.int64(1);
      live_total += r.int64(1);
    });
    tx.run(work, {}, [&](const sql_row& r) {
      auto& v = by_version[r.text(0)];
      auto n = r.int64(2);
      auto status = r.text(1);
      (status == "PENDING" ? v.pending
       : status == "ENQUEUED" ? v.enqueued
                              : v.blocked) += n;
      auto oldest = from_ms(r.int64(3));
      if (!v.oldest_run || oldest < *v.oldest_run)
        v.oldest_run = oldest;
    });
  });
  std::vector<version_report> out;
  for (auto& [version, v] : by_version) {
    v.app_version = version;
    auto waiting = v.pending + v.enqueued + v.blocked > 0;
    v.stranded = waiting
                 && (version.empty() ? live_total == 0 : v.live_executors == 0);
    out.push_back(std::move(v));
  }
  return out;
}

std::int64_t sql_store::move_runs(std::string_view from, std::string_view to,
                                  std::int64_t at_ms,
                                  std::string_view reason) {
  // A PENDING run (or queue item) no live process holds loses its owner
  // (one held by a live process of `from` is its to finish: moving it
  // would run two copies until the old one's next write is fenced); a
  // BLOCKED one may be tried by any process of `to` (blocked_code_since
  // 0); a queue item waiting in its queue keeps its place.
  static const sql_query q{
    "move_runs",
    "UPDATE {s}runs SET app_version = $2, executor = CASE WHEN status = "
    "'PENDING' THEN '' ELSE executor END, epoch = epoch + 1, "
    "blocked_code_since = CASE WHEN status = 'BLOCKED' THEN 0 ELSE "
    "blocked_code_since END, updated_at = $3 WHERE id IN (SELECT id FROM "
    "{s}runs WHERE status = 'PENDING' AND app_version = $1 UNION ALL SELECT "
    "id FROM {s}runs WHERE status = 'ENQUEUED' AND queue_name IS NOT NULL "
    "AND app_version = $1 UNION ALL SELECT id FROM {s}runs WHERE status = "
    "'BLOCKED' AND app_version = $1) AND app_version = $1 AND "
    "object_type IS NULL AND ((status = 'BLOCKED' AND queue_name IS NULL) "
    "OR (status = 'PENDING' AND (executor = '' OR "
    "executor NOT IN (SELECT id FROM {s}executors WHERE state = 'live'))) "
    "OR (status = 'ENQUEUED' AND queue_name IS NOT NULL)) RETURNING id"};
  std::int64_t moved = 0;
  write([&](sql_tx& tx) {
    std::vector<std::string> ids;
    tx.run(q, {from, to, at_ms},
           [&](const sql_row& r) { ids.push_back(r.text(0)); });
    auto what = "app version '" + std::string{from} + "' to '"
                + std::string{to} + "'";
    for (auto& id : ids)
      detail::record_run_event(tx, id, at_ms, "move", what, reason);
    moved = static_cast<std::int64_t>(ids.size());
    if (moved > 0) // every process takes over what it now may run
      tx.notify(notice::gone("moved runs").encode());
  });
  return moved;
}

} // namespace perdure::persistence
