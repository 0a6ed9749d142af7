#pragma once

// One row of a result, read by column index, whatever the driver: what the
// row decoders (rows.hpp) and the operations written once (sql_store) read.

#include <cstdint>
#include <optional>
#include <string>

namespace perdure::persistence::detail {

class sql_row {
public:
  virtual bool is_null(int col) const = 0;
  virtual std::int64_t int64(int col) const = 0;
  /// A text column.
  virtual std::string text(int col) const = 0;
  /// A bytes column (bytea on PostgreSQL, a BLOB on SQLite).
  virtual std::string bytes(int col) const = 0;

  std::optional<std::string> opt_text(int col) const {
    if (is_null(col))
      return std::nullopt;
    return text(col);
  }

  std::optional<std::string> opt_bytes(int col) const {
    if (is_null(col))
      return std::nullopt;
    return bytes(col);
  }

  std::optional<std::int64_t> opt_int64(int col) const {
    if (is_null(col))
      return std::nullopt;
    return int64(col);
  }

protected:
  ~sql_row() = default;
};

} // namespace perdure::persistence::detail
