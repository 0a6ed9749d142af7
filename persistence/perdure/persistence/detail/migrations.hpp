#pragma once

// The versioned schema of each dialect. A migration is never edited once
// released: changes go into a new one with the next version.

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
