#pragma once

// What the PostgreSQL store's files share: how a run row is selected and
// read, and the lease condition of claims.

#include <pqxx/row>

#include <cstdint>
#include <optional>
#include <string>

#include "perdure/persistence/records.hpp"

namespace perdure::persistence::detail {

/// An optional number as a libpqxx 6 parameter (null `const char*`).
struct opt_param {
  explicit opt_param(const std::optional<std::int64_t>& x)
    : text(x ? std::to_string(*x) : std::string{}), set(x.has_value()) {
  }
  const char* get() const {
    return set ? text.c_str() : nullptr;
  }
  std::string text;
  bool set;
};

/// The columns `read_pg_run` reads, in its order.
std::string pg_run_columns();

/// Reads the run columns of `row` starting at column `first`.
run_record read_pg_run(const pqxx::row& row, int first = 0);

/// Returns the condition that executor `executor` (an SQL expression)
/// holds its lease at epoch `lease` (0: unchecked), in schema prefix `s`.
std::string pg_holds_lease(const std::string& s, const std::string& executor,
                           const std::string& lease);

} // namespace perdure::persistence::detail
