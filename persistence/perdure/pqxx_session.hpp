#pragma once

// Application transactions on PostgreSQL as a `sql_session`, for what
// joins them (a staged queue enqueue: `queues::enqueue(session, ...)`).
// Needs libpqxx.

#include <pqxx/transaction_base>

#include <string>

#include "perdure/sql_session.hpp"

namespace perdure {

/// Runs statements inside the caller's libpqxx transaction `tx`, on the
/// database where Perdure keeps its tables in schema `schema`
/// (`config::schema`). Perdure's transactional steps hand their code one.
class pqxx_session final : public sql_session {
public:
  explicit pqxx_session(pqxx::transaction_base& tx,
                        std::string schema = "perdure")
    : tx_(tx), schema_(std::move(schema)) {
  }

  sql_rows exec(const std::string& sql,
                const std::vector<sql_param>& params) override;

  const char* dialect() const noexcept override {
    return "postgresql";
  }

  std::string perdure_schema() const override {
    return schema_;
  }

private:
  pqxx::transaction_base& tx_;
  std::string schema_;
};

} // namespace perdure
