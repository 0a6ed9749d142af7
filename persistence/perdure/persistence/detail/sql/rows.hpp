#pragma once

// The row layouts of Perdure's tables and their decoders, once for both
// stores: adding a column to `runs` is one migration per backend plus
// `run_columns` and `read_run` here.

#include <string>

#include "perdure/persistence/detail/sql/sql_row.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::persistence::detail {

/// The columns of `runs` that `read_run` reads, in its order.
extern const std::string run_columns;

/// How many columns `run_columns` names.
inline constexpr int run_column_count = 29;

/// `run_columns`, each qualified by table alias `t` (`t.id, t.name, ...`).
std::string qualified_run_columns(const std::string& t);

/// Reads a run selected as `run_columns`, starting at column `first`.
/// Throws `errc::store_error` for a status it does not know.
run_record read_run(const sql_row& row, int first = 0);

/// The journal columns `read_entry` reads, in its order.
inline constexpr const char* entry_columns
  = "run_id, seq, kind, name, outcome, payload, error, created_at";

/// Reads a journal row selected as `entry_columns` (a bad row comes back
/// unreadable, see `read_journal_row`).
journal_entry read_entry(const sql_row& row);

/// Reads a resolution selected as `id, run_id, seq, outcome, payload,
/// error, created_at`.
resolution read_resolution(const sql_row& row);

} // namespace perdure::persistence::detail
