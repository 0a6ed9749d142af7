#pragma once

// SQL spelled the same for both stores.

#include <string>

namespace perdure::persistence::detail {

/// A run's status as reported to users: a saga undoing its steps is stored
/// PENDING (it runs, is owned, fenced and recovered like any run) and
/// reported COMPENSATING.
inline constexpr const char* reported_status
  = "(CASE WHEN status = 'PENDING' AND saga_phase = 'COMPENSATING' THEN "
    "'COMPENSATING' ELSE status END)";

/// The statuses an operator looks for and few runs are in (`runs_failed`,
/// migration 14): listed by status through that index, whose condition
/// a query names term for term (SQLite uses a partial index only then).
/// Runs that succeed never enter it, so the hot path does not pay for it.
inline constexpr const char* failed_statuses_condition
  = "status IN ('ERROR', 'CANCELLED', 'RETRIES_EXCEEDED', 'COMPENSATED', "
    "'COMPENSATION_FAILED', 'DEAD_LETTER', 'BLOCKED')";

/// The statuses of runs that ended for good (`is_terminal`): what
/// retention may collect, spelled as the partial indexes of migration 18
/// name it (SQLite uses a partial index only when a query names its
/// condition term for term).
inline constexpr const char* ended_statuses
  = "('SUCCESS', 'ERROR', 'CANCELLED', 'RETRIES_EXCEEDED', 'COMPENSATED', "
    "'COMPENSATION_FAILED', 'DEAD_LETTER')";

/// `ended_statuses` as the partial indexes of migration 18 state it, and
/// every query meant to use them, term for term: three inequalities,
/// not an IN list. Measured (object_throughput, SQLite, 2026-11-28): with
/// the index stated as `status IN (seven values)`, 4 700-6 700 calls/s;
/// stated so, 8 100-10 000; without the index, 8 100-10 100. SQLite
/// evaluates a partial index's condition on every write of a run, and an
/// IN list of seven costs far more there than three comparisons.
inline constexpr const char* ended_condition
  = "status <> 'ENQUEUED' AND status <> 'PENDING' AND status <> 'BLOCKED'";

/// The name a journal entry of completed saga `o` takes in its undo run
/// `n` (both SQL expressions): ids derived from the run's own id -- its
/// children's and calls' (`<id>.<seq>`, or `<id>.<name>`), the waits for
/// them (`child:<id>...`), its awakeables' and the waits for them
/// (`awk_<seq>_<id>`) -- are
/// derived from the undo run's id, as its replay derives them.
inline std::string undo_entry_name(const std::string& o, const std::string& n) {
  return "CASE WHEN kind = 'child' AND substr(name, 1, length(" + o
         + ") + 1) = " + o + " || '.' THEN " + n + " || substr(name, length("
         + o + ") + 1) WHEN kind = 'await' AND substr(name, 1, length(" + o
         + ") + 7) = 'child:' || " + o + " || '.' THEN 'child:' || " + n
         + " || substr(name, length(" + o
         + ") + 7) WHEN kind IN ('awakeable', 'await') AND substr(name, 1, 4) = 'awk_' AND length(name) > length(" + o
         + ") AND substr(name, length(name) - length(" + o + "), length(" + o
         + ") + 1) = '_' || " + o + " THEN substr(name, 1, length(name) - length("
         + o + ")) || " + n + " ELSE name END";
}

} // namespace perdure::persistence::detail
