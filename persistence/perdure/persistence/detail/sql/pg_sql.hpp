#pragma once

// The PostgreSQL driver of the SQL layer: a libpqxx row as an `sql_row`,
// and a libpqxx transaction as an `sql_tx` (statements prepared on the
// connection under their names, once per connection; parameters sent as
// text, bytes as bytea's hex form). Also what the PostgreSQL store's files
// share: the row decoders for libpqxx rows and the lease condition.

#include <pqxx/pqxx>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

#include "perdure/pqxx_session.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"

namespace perdure::persistence::detail {

class pg_row final : public sql_row {
public:
  explicit pg_row(const pqxx::row& r) : row_(r) {}

  bool is_null(int col) const override {
    return row_[col].is_null();
  }
  std::int64_t int64(int col) const override {
    return row_[col].as<std::int64_t>();
  }
  std::string text(int col) const override {
    return row_[col].as<std::string>();
  }
  std::string bytes(int col) const override {
    return pqxx::binarystring{row_[col]}.str();
  }

private:
  const pqxx::row& row_;
};

class pg_tx final : public sql_tx {
public:
  /// `prepared`: the names prepared on `t`'s connection so far (cleared
  /// when the store reconnects); `schema`: Perdure's schema;
  /// `schema_prefix`: it quoted, and a dot.
  pg_tx(pqxx::transaction_base& t, std::unordered_set<std::string>& prepared,
        const std::string& schema, const std::string& schema_prefix)
    : t_(t), prepared_(prepared), schema_(schema),
      schema_prefix_(schema_prefix) {}

  std::int64_t run(const sql_query& q, std::initializer_list<sql_value> params,
                   const row_fn& each) override;

  sql_dialect dialect() const noexcept override {
    return sql_dialect::postgresql;
  }

  void notify(std::string_view payload) override;

  perdure::sql_session& user_session() override {
    if (!session_)
      session_.emplace(t_, schema_);
    return *session_;
  }

private:
  std::optional<pqxx_session> session_;
  pqxx::transaction_base& t_;
  std::unordered_set<std::string>& prepared_;
  const std::string& schema_;
  const std::string& schema_prefix_;
};

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

/// Reads the run columns (`run_columns`) of `row` starting at column
/// `first`.
run_record read_run(const pqxx::row& row, int first = 0);

/// Reads a journal row selected as `entry_columns`.
journal_entry read_entry(const pqxx::row& row);


} // namespace perdure::persistence::detail
