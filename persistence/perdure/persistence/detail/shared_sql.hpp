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
