#pragma once

// What the SQLite store's files share: its failure type and its prepared
// statements.

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "perdure/persistence/sqlite_store.hpp"

namespace perdure::persistence {

namespace detail {

/// A SQLite result code that is not success, as an exception.
class sqlite_failure : public std::runtime_error {
public:
  sqlite_failure(int code, const std::string& what)
    : std::runtime_error(what), code_(code) {
  }

  int code() const noexcept {
    return code_;
  }

private:
  int code_;
};

[[noreturn]] inline void fail(sqlite3* db, int code, const std::string& context) {
  throw sqlite_failure(code, context + ": " + sqlite3_errmsg(db));
}

} // namespace detail

using detail::fail;
using detail::sqlite_failure;

/// A prepared statement, reset after each use.
class sqlite_store::statement {
public:
  statement(sqlite3* db, const std::string& sql) : db_(db) {
    auto rc = sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT,
                                 &stmt_, nullptr);
    if (rc != SQLITE_OK)
      fail(db, rc, "cannot prepare '" + sql + "'");
  }

  ~statement() {
    sqlite3_finalize(stmt_);
  }

  statement& reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return *this;
  }

  statement& bind(int i, std::string_view x) {
    check(sqlite3_bind_text(stmt_, i, x.data(), static_cast<int>(x.size()),
                            SQLITE_TRANSIENT));
    return *this;
  }

  statement& bind_blob(int i, std::string_view x) {
    check(sqlite3_bind_blob(stmt_, i, x.data(), static_cast<int>(x.size()),
                            SQLITE_TRANSIENT));
    return *this;
  }

  statement& bind_opt_blob(int i, const std::optional<std::string>& x) {
    return x ? bind_blob(i, *x) : bind_null(i);
  }

  statement& bind_opt(int i, const std::optional<std::string>& x) {
    return x ? bind(i, std::string_view{*x}) : bind_null(i);
  }

  statement& bind(int i, std::int64_t x) {
    check(sqlite3_bind_int64(stmt_, i, x));
    return *this;
  }

  statement& bind(int i, double x) {
    check(sqlite3_bind_double(stmt_, i, x));
    return *this;
  }

  statement& bind_opt_int(int i, const std::optional<std::int64_t>& x) {
    return x ? bind(i, *x) : bind_null(i);
  }

  statement& bind_null(int i) {
    check(sqlite3_bind_null(stmt_, i));
    return *this;
  }

  /// Returns true while there is a row.
  bool step() {
    auto rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW)
      return true;
    if (rc == SQLITE_DONE)
      return false;
    auto code = sqlite3_extended_errcode(db_);
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_reset(stmt_);
    throw sqlite_failure(code, msg);
  }

  /// Runs a statement that returns no rows.
  void run() {
    while (step()) {
      // drain
    }
  }

  std::int64_t int64(int col) {
    return sqlite3_column_int64(stmt_, col);
  }

  bool is_null(int col) {
    return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
  }

  std::string text(int col) {
    auto ptr = sqlite3_column_blob(stmt_, col);
    auto len = sqlite3_column_bytes(stmt_, col);
    return ptr ? std::string{static_cast<const char*>(ptr),
                             static_cast<size_t>(len)}
               : std::string{};
  }

  std::optional<std::string> opt_text(int col) {
    if (is_null(col))
      return std::nullopt;
    return text(col);
  }

  int columns() {
    return sqlite3_column_count(stmt_);
  }

  sqlite3_stmt* get() {
    return stmt_;
  }

private:
  void check(int rc) {
    if (rc != SQLITE_OK)
      fail(db_, rc, "cannot bind parameter");
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

} // namespace perdure::persistence
