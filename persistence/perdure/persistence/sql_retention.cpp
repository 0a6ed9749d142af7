// Retention (retention_store.hpp), written once for both stores: ended
// roots found through `runs_ended` by workflow, status and end; collected
// with their descendants in one transaction; tombstones expired through
// `runs_tombstones`. A batch's roots travel as one parameter: an array on
// PostgreSQL, a JSON array on SQLite (json_each).

#include <cstdio>
#include <string>
#include <vector>

#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_bytes;
using detail::sql_dialect;
using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

namespace {

/// An ended root not collected (`runs_ended`'s condition, word for word).
std::string uncollected_root() {
  return std::string{detail::ended_condition}
         + " AND parent_id IS NULL AND collected_at IS NULL";
}

/// A collected root (`runs_tombstones`'s condition, word for word).
std::string tombstone_root() {
  return std::string{detail::ended_condition}
         + " AND parent_id IS NULL AND collected_at IS NOT NULL";
}

/// The distinct workflow names of the rows `condition` selects, one index
/// probe each (a skip scan: few names, many rows).
std::string names_of(const std::string& condition) {
  return "WITH RECURSIVE n(name) AS (SELECT MIN(name) FROM {s}runs WHERE "
         + condition + " UNION ALL SELECT (SELECT MIN(name) FROM {s}runs "
         "WHERE " + condition + " AND name > n.name) FROM n WHERE n.name IS "
         "NOT NULL) SELECT name FROM n WHERE n.name IS NOT NULL";
}

/// The batch's roots that may still be collected, with their descendants
/// and whether each has not ended (`tree`: the status read as the walk
/// meets the row, no second look at `runs`), the roots one of whose runs
/// has not ended (`held`), and what is collected (`picked`). `roots`: the
/// ids, as the dialect lists them; `locked` (PostgreSQL), the array of
/// the runs the transaction locked: a run not among them (it ended after
/// the lock) counts as going, so nothing unlocked is collected.
std::string picked_cte(const std::string& roots, const std::string& locked) {
  auto unlocked = locked.empty() ? std::string{}
                                 : " OR r.id <> ALL(" + locked + ")";
  auto anchor = locked.empty() ? std::string{}
                               : " AND id = ANY(" + locked + ")";
  return "WITH RECURSIVE tree(id, root, going) AS (SELECT id, id, 0 FROM "
         "{s}runs WHERE id IN (" + roots + ") AND " + uncollected_root()
         + anchor
         + " UNION ALL SELECT r.id, t.root, CASE WHEN r.status IN "
           "('ENQUEUED', 'PENDING', 'BLOCKED')" + unlocked
         + " THEN 1 ELSE 0 END FROM {s}runs r JOIN tree t ON r.parent_id = "
           "t.id WHERE r.parent_id IS NOT NULL), held(root) AS (SELECT root "
           "FROM tree WHERE going = 1), picked(id, root) AS (SELECT id, root "
           "FROM tree WHERE root NOT IN (SELECT root FROM held))";
}

constexpr const char* pg_roots = "SELECT unnest($1::text[])";
constexpr const char* sqlite_roots = "SELECT value FROM json_each($1)";

/// What goes with a collected run: the tables keyed by `run_id`.
constexpr const char* dependents[] = {"journal", "messages", "events",
                                      "resolutions", "run_events"};

/// `ids` as a JSON array of strings (SQLite's json_each reads it).
std::string json_array(const std::vector<std::string>& ids) {
  std::string out = "[";
  for (auto& id : ids) {
    if (out.size() > 1)
      out += ',';
    out += '"';
    for (unsigned char ch : id) {
      if (ch == '"' || ch == '\\') {
        out += '\\';
        out += static_cast<char>(ch);
      } else if (ch < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        out += buf;
      } else {
        out += static_cast<char>(ch);
      }
    }
    out += '"';
  }
  return out + "]";
}

/// Adds to the collectors' totals, in the batch's transaction.
const sql_query count_collected{
  "retention_count_collected",
  "UPDATE {s}retention_state SET runs_collected = runs_collected + $1, "
  "last_batch_at = $2 WHERE id = 1"};
const sql_query count_expired{
  "retention_count_expired",
  "UPDATE {s}retention_state SET ids_expired = ids_expired + $1, "
  "last_batch_at = $2 WHERE id = 1"};

} // namespace

bool sql_store::claim_retention(std::string_view holder, std::int64_t now_ms,
                                std::int64_t until_ms) {
  static const sql_query q{
    "retention_claim",
    "UPDATE {s}retention_state SET holder = $1, held_until = $2 WHERE id = 1 "
    "AND (holder = $1 OR held_until < $3)"};
  std::int64_t n = 0;
  write([&](sql_tx& tx) { n = tx.run(q, {holder, until_ms, now_ms}); });
  return n == 1;
}

void sql_store::release_retention(std::string_view holder) {
  static const sql_query q{
    "retention_release",
    "UPDATE {s}retention_state SET held_until = 0 WHERE id = 1 AND holder = "
    "$1"};
  write([&](sql_tx& tx) { tx.run(q, {holder}); });
}

retention_progress sql_store::retention_state() {
  static const sql_query q{
    "retention_state",
    "SELECT holder, held_until, runs_collected, ids_expired, last_batch_at, "
    "(SELECT COUNT(*) FROM {s}runs WHERE " + uncollected_root()
      + "), (SELECT COUNT(*) FROM {s}runs WHERE " + tombstone_root()
      + ") FROM {s}retention_state WHERE id = 1"};
  retention_progress out;
  read([&](sql_tx& tx) {
    tx.run(q, {}, [&](const sql_row& r) {
      out = {r.text(0), r.int64(1), r.int64(2), r.int64(3),
             r.int64(4), r.int64(5), r.int64(6)};
    });
  });
  return out;
}

std::vector<std::string> sql_store::retained_workflows(bool tombstones) {
  static const sql_query live{"retention_names",
                              names_of(uncollected_root())};
  static const sql_query dead{"retention_tombstone_names",
                              names_of(tombstone_root())};
  std::vector<std::string> out;
  read([&](sql_tx& tx) {
    out.clear();
    tx.run(tombstones ? dead : live, {},
           [&](const sql_row& r) { out.push_back(r.text(0)); });
  });
  return out;
}

std::vector<run_record>
sql_store::collectable_runs(std::string_view name, std::string_view status,
                            std::int64_t before_ms, std::int64_t limit,
                            bool whole, std::int64_t after_ms,
                            std::string_view after_id) {
  // In (end, id) order after the cursor: a root the collection left (a
  // descendant still going) is passed, not met again in this pass. One
  // whose child has not ended is passed here already.
  auto where = " FROM {s}runs o WHERE name = $1 AND status = $2 AND updated_at "
               "< $3 AND " + uncollected_root()
               + " AND updated_at >= $5 AND (updated_at > $5 OR id > $6) AND "
                 "NOT EXISTS (SELECT 1 FROM {s}runs k WHERE k.parent_id = "
                 "o.id AND k.parent_id IS NOT NULL AND k.status NOT IN "
               + detail::ended_statuses + ") ORDER BY updated_at, id LIMIT $4";
  static const sql_query full{"retention_candidates_whole",
                              "SELECT " + detail::run_columns + where};
  static const sql_query ids{"retention_candidates",
                             "SELECT id, name, status, updated_at" + where};
  std::vector<run_record> out;
  read([&](sql_tx& tx) {
    out.clear();
    tx.run(whole ? full : ids,
           {name, status, before_ms, limit, after_ms, after_id},
           [&](const sql_row& r) {
             if (whole) {
               out.push_back(detail::read_run(r));
               return;
             }
             run_record run;
             run.id = r.text(0);
             run.name = r.text(1);
             run.status = parse_run_status(r.text(2)).value_or(run.status);
             run.updated_at_ms = r.int64(3);
             out.push_back(std::move(run));
           });
  });
  return out;
}

std::vector<std::string>
sql_store::collect_runs(const std::vector<std::string>& ids,
                        std::int64_t at_ms, std::int64_t* rows) {
  // PostgreSQL: the ended runs of the trees locked first (an operator's
  // resume of one waits, then finds it collected, or wins and the tree is
  // left; a run still going is not waited for: it holds its tree), then
  // one statement deciding on what it sees then; SQLite's writer is alone.
  static const sql_query lock{
    "retention_lock",
    "WITH RECURSIVE tree(id) AS (SELECT id FROM {s}runs WHERE id = "
    "ANY($1::text[]) UNION ALL SELECT r.id FROM {s}runs r JOIN tree t ON "
    "r.parent_id = t.id WHERE r.parent_id IS NOT NULL) SELECT id FROM "
    "{s}runs WHERE id IN (SELECT id FROM tree) AND status IN "
      + std::string{detail::ended_statuses} + " ORDER BY id FOR UPDATE"};
  static const sql_query pg{
    "retention_collect", [] {
      std::string q = picked_cte(pg_roots, "$4::text[]");
      int i = 0;
      for (auto& d : dependents)
        q += ", d" + std::to_string(i++) + " AS (DELETE FROM {s}"
             + std::string{d} + " WHERE run_id IN (SELECT id FROM picked))";
      return q + ", c AS (UPDATE {s}runs r SET inputs = $3, output = NULL, "
                 "error = NULL, collected_at = $2 FROM picked p WHERE r.id = "
                 "p.id RETURNING r.id, p.root) SELECT id, CASE WHEN id = "
                 "root THEN 1 ELSE 0 END FROM c";
    }()};
  static const sql_query no_wait{
    "retention_no_commit_wait",
    "SELECT set_config('synchronous_commit', 'off', true)"};
  static const sql_query lite_picked{
    "retention_picked",
    picked_cte(sqlite_roots, "")
      + " SELECT id, CASE WHEN id = root THEN 1 ELSE 0 END FROM picked"};
  static const std::vector<sql_query> lite_deletes = [] {
    std::vector<sql_query> out;
    for (auto& d : dependents)
      out.push_back({std::string{"retention_delete_"} + d,
                     picked_cte(sqlite_roots, "") + " DELETE FROM {s}" + d
                       + " WHERE run_id IN (SELECT id FROM picked)"});
    return out;
  }();
  static const sql_query lite_strip{
    "retention_strip",
    picked_cte(sqlite_roots, "")
      + " UPDATE {s}runs SET inputs = $3, output = NULL, error = NULL, "
        "collected_at = $2 WHERE id IN (SELECT id FROM picked)"};
  std::vector<std::string> roots;
  std::int64_t stripped = 0;
  if (ids.empty()) {
    if (rows)
      *rows = 0;
    return roots;
  }
  write([&](sql_tx& tx) {
    roots.clear();
    stripped = 0;
    auto each = [&](const sql_row& r) {
      ++stripped;
      if (r.int64(1) == 1)
        roots.push_back(r.text(0));
    };
    if (tx.dialect() == sql_dialect::postgresql) {
      // Not waited for at commit: a batch lost to a crash before its WAL
      // reached the disk is undone as a whole (its tombstones and its
      // total together) and collected again by the next pass.
      tx.run(no_wait, {});
      detail::pg_array list;
      for (auto& id : ids)
        list.add(id);
      auto literal = list.str();
      detail::pg_array held;
      tx.run(lock, {std::string_view{literal}},
             [&](const sql_row& r) { held.add(r.text(0)); });
      auto locked = held.str();
      tx.run(pg,
             {std::string_view{literal}, at_ms, sql_bytes{""},
              std::string_view{locked}},
             each);
    } else {
      auto json = json_array(ids);
      tx.run(lite_picked, {std::string_view{json}}, each);
      if (stripped == 0)
        return;
      for (auto& d : lite_deletes)
        tx.run(d, {std::string_view{json}});
      tx.run(lite_strip, {std::string_view{json}, at_ms, sql_bytes{""}});
    }
    if (stripped > 0)
      tx.run(count_collected, {stripped, at_ms});
  });
  if (rows)
    *rows = stripped;
  return roots;
}

std::int64_t sql_store::expire_tombstones(std::string_view name,
                                          std::string_view status,
                                          std::int64_t before_ms,
                                          std::int64_t limit,
                                          std::int64_t at_ms) {
  static const sql_query q{
    "retention_expire",
    "WITH RECURSIVE tree(id) AS (SELECT id FROM {s}runs WHERE id IN (SELECT "
    "id FROM {s}runs WHERE name = $1 AND status = $2 AND updated_at < $3 AND "
      + tombstone_root()
      + " ORDER BY updated_at LIMIT $4) UNION ALL SELECT r.id FROM {s}runs r "
        "JOIN tree t ON r.parent_id = t.id WHERE r.parent_id IS NOT NULL) "
        "DELETE FROM {s}runs WHERE id IN (SELECT id FROM tree)"};
  std::int64_t n = 0;
  write([&](sql_tx& tx) {
    n = tx.run(q, {name, status, before_ms, limit});
    if (n > 0)
      tx.run(count_expired, {n, at_ms});
  });
  return n;
}

} // namespace perdure::persistence
