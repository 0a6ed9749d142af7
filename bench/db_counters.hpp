#pragma once

// What a measured stretch cost, independent of the machine's speed: the
// database's statements, commits, rows and WAL (PostgreSQL's statistics)
// and this process's CPU and context switches. `per` divides a stretch's
// figures by its calls or steps; the bench lines carry them (issue 27).

#include <string>
#include <vector>

#include "bench_support.hpp"

namespace perdure::bench {

struct db_counters {
  /// -1 when PostgreSQL cannot say (SQLite; no pg_stat_statements).
  double statements = -1, commits = -1, rows_written = -1, hot_updates = -1,
         wal_bytes = -1, db_exec_ms = -1;
  double cpu_us = 0, context_switches = 0;
};

/// Reads the counters now. `tables`: whose rows written count. On
/// PostgreSQL it first waits for the backends' statistics to be reported
/// (they are sent at most once a second; an idle backend's within 10 s,
/// so the bench reads "after" once the runtime's connections closed, and
/// "before" may still miss some of the warm-up's: a few per cent at most).
db_counters read_counters(const test::database& db,
                          const std::vector<std::string>& tables);

/// Adds `after - before`, divided by `n`, as `<unit>_<counter>` fields
/// (statements_per_call, ...), skipping what the store cannot say.
void add_per(json_line& line, const db_counters& before,
             const db_counters& after, double n, const std::string& unit);

/// The COPY baseline of issue 27: `rows` journal-sized rows by PostgreSQL
/// COPY (SQLite: one prepared INSERT), 1 000 a transaction, into a table
/// of its own, dropped after. Rows per second.
double copy_baseline(const test::database& db, long rows);

/// The baseline run for about a second (at least `min_rows`) right before
/// and right after a measured point, reported with their mean as
/// `baseline_rows_per_s_before/after` and `baseline_rows_per_s`, and
/// `ratio_to_baseline` = `rate` / the mean.
struct two_sided_baseline {
  double before = 0, after = 0;
  double mean() const { return (before + after) / 2; }
  void add_to(json_line& line, double rate) const;
};

} // namespace perdure::bench
