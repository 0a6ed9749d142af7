#pragma once

// The versioned schema of each backend: one list per backend.
//
// Numbering rule: one sequence of versions for both backends. A schema
// change takes the next number on both lists; a backend that needs
// nothing for that version skips the number (it is never reused or
// renumbered, as DBOS numbers its SQLite migrations after PostgreSQL's).
// Skipped so far: 4 on PostgreSQL (the notices table: PostgreSQL has
// NOTIFY) and 6 on SQLite (the epoch sequence: SQLite's one runtime per
// file takes epochs from its executors table). A migration is never
// edited once released: changes go into a new one with the next version.
//
// Adding a column to `runs` is a migration on each list plus
// `run_columns` and `read_run` in detail/sql/rows.{hpp,cpp}.

#include <string>
#include <vector>

namespace perdure::persistence::detail {

struct migration {
  int version;
  const char* description;
  std::vector<std::string> statements;
};

/// Returns the SQLite migrations, in version order.
std::vector<migration> sqlite_migrations();

/// Returns the PostgreSQL migrations for tables in `schema` (already a
/// quoted identifier), in version order.
std::vector<migration> postgres_migrations(const std::string& schema);

} // namespace perdure::persistence::detail
