#pragma once

// The one seam between the operations written once (sql_store) and a
// driver: a statement in canonical SQL, its parameters, and a transaction
// (or autocommit) that runs it. Canonical SQL is PostgreSQL's: `$n`
// placeholders, `{s}` before a table name where PostgreSQL puts the
// schema, `{now}` for the database's clock in ms since the epoch, and
// `::type` casts (SQLite casts a cast placeholder with CAST and drops the
// rest). DBOS Go's `dialect.RewriteQuery`, in spirit. Parameters a
// statement's SQLite text does not use are not bound there.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "perdure/persistence/detail/sql/sql_row.hpp"
#include "perdure/sql_session.hpp"

namespace perdure::persistence::detail {

/// A statement: a name (PostgreSQL prepares it under this name, once per
/// connection) and its canonical text.
struct sql_query {
  std::string name;
  std::string text;
};

/// Bytes bound to a bytes column (bytea, BLOB).
struct sql_bytes {
  std::string_view value;
};

/// A parameter value.
using sql_value
  = std::variant<std::nullptr_t, std::int64_t, std::string_view, sql_bytes>;

/// `v`, or NULL.
inline sql_value or_null(const std::optional<std::int64_t>& v) {
  return v ? sql_value{*v} : sql_value{nullptr};
}
inline sql_value or_null(const std::optional<std::string>& v) {
  return v ? sql_value{std::string_view{*v}} : sql_value{nullptr};
}

/// A statement broke a unique index (a primary key, a dedup id): the
/// drivers raise this, whatever their own error says.
class unique_violation : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Which backend a transaction talks to, where an operation's SQL must
/// differ by nature (arrays against IN-lists, say).
enum class sql_dialect { postgresql, sqlite };

/// Statements inside one transaction of one connection.
class sql_tx {
public:
  using row_fn = std::function<void(const sql_row&)>;

  /// Runs `q` with `params`, calling `each` for every row it returns;
  /// returns how many rows it changed (INSERT, UPDATE, DELETE).
  virtual std::int64_t run(const sql_query& q,
                           std::initializer_list<sql_value> params,
                           const row_fn& each = nullptr)
    = 0;

  virtual sql_dialect dialect() const noexcept = 0;

  /// The transaction as the user's SQL sees it (a transactional step).
  virtual perdure::sql_session& user_session() = 0;

  /// Tells every process sharing the database `payload` (see
  /// persistence/notice.hpp) once this transaction commits.
  virtual void notify(std::string_view payload) = 0;

  /// `run`, for a statement that returns at most one row: `read(row)` of
  /// it, or nothing.
  template <class F>
  auto first(const sql_query& q, std::initializer_list<sql_value> params,
             F&& read) -> std::optional<decltype(read(std::declval<const sql_row&>()))> {
    std::optional<decltype(read(std::declval<const sql_row&>()))> out;
    run(q, params, [&](const sql_row& r) {
      if (!out)
        out = read(r);
    });
    return out;
  }

protected:
  ~sql_tx() = default;
};

/// Returns canonical `sql` as SQLite takes it: `?n` placeholders, no
/// schema prefix, no casts.
std::string sqlite_text(std::string_view sql);

/// Returns canonical `sql` as PostgreSQL takes it: `{s}` replaced by
/// `schema_prefix` (the quoted schema and a dot).
std::string postgres_text(std::string_view sql,
                          std::string_view schema_prefix);

} // namespace perdure::persistence::detail
