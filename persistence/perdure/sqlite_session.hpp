#pragma once

// Application transactions on SQLite as a `sql_session`, for what joins
// them (a staged queue enqueue: `queues::enqueue(session, ...)`).

#include <string>

#include "perdure/sql_session.hpp"

struct sqlite3;

namespace perdure {

/// Runs statements on connection `db`, inside whatever transaction the
/// caller has begun on it (to the database file Perdure uses).
/// Perdure's transactional steps hand their code one.
class sqlite_session final : public sql_session {
public:
  explicit sqlite_session(sqlite3* db) : db_(db) {
  }

  sql_rows exec(const std::string& sql,
                const std::vector<sql_param>& params) override;

  const char* dialect() const noexcept override {
    return "sqlite";
  }

private:
  sqlite3* db_;
};

} // namespace perdure
