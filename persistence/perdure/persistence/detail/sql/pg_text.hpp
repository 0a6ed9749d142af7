#pragma once

// SQL spelled in one place, for the PostgreSQL store's prepared
// statements and for the statements the SQL layer writes once (with `s`
// the schema prefix, or `{s}` in canonical SQL).

#include <string>

namespace perdure::persistence::detail {

/// The condition that executor `executor` (an SQL expression) holds its
/// lease at epoch `lease` (an SQL expression; 0: unchecked).
inline std::string holds_lease(const std::string& s,
                               const std::string& executor,
                               const std::string& lease) {
  return "(" + lease + "::bigint = 0 OR EXISTS (SELECT 1 FROM " + s
         + "executors e WHERE e.id = " + executor + " AND e.epoch = " + lease
         + "::bigint AND e.state = 'live'))";
}

/// The condition that a run's workflow is one of `names` (a text[]
/// parameter), its app version none or `version`, and every patch it took
/// one `names` lists as its workflow's (see `claim_filter`); no
/// invocations. `runs`: how the statement names the runs table (an alias,
/// or `runs`), `s` the schema prefix.
inline std::string claimable(const std::string& names,
                             const std::string& version,
                             const std::string& runs = "runs",
                             const std::string& s = "{s}") {
  return runs + ".name = ANY(" + names + "::text[]) AND (" + runs
         + ".app_version = '' OR " + runs + ".app_version = " + version
         + ") AND " + runs + ".object_type IS NULL AND NOT EXISTS (SELECT 1 "
         "FROM " + s + "journal pj WHERE pj.run_id = " + runs + ".id AND "
         "pj.seq < 0 AND pj.kind = 'patch' AND NOT (" + runs
         + ".name || chr(30) || pj.name = ANY(" + names + "::text[])))";
}

/// The database's clock in ms since the epoch, as PostgreSQL SQL.
inline constexpr const char* postgres_clock_ms
  = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The same on SQLite (the clock of the host of the file).
inline constexpr const char* sqlite_clock_ms
  = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// The fence: locks FOR SHARE the runs named by the arrays $1 (ids), $2
/// (executors) and $3 (epochs) still under that owner and epoch, and keeps
/// those still PENDING, if the executor holds its lease at `$<lease>`.
/// (See the comment where the store prepares it.)
inline std::string fence_sql(const std::string& s, int lease) {
  auto l = "$" + std::to_string(lease);
  return "SELECT r.id, r.epoch FROM (SELECT id, epoch, status FROM " + s
         + "runs WHERE (id, executor, epoch) IN (SELECT * FROM "
           "unnest($1::text[], $2::text[], $3::bigint[])) OFFSET 0 FOR "
           "SHARE) r WHERE r.status = 'PENDING' AND "
         + holds_lease(s, "($2::text[])[1]", l);
}

} // namespace perdure::persistence::detail
