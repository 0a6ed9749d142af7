#pragma once

// What every test needs: a fresh database on the store under test (the
// environment variable PERDURE_TEST_STORE picks "sqlite" or "postgres"), a
// runtime config pointing at it, and a plain SQL client for asserting on
// tables directly.

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "perdure/config.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/sql_session.hpp"

namespace perdure::test {

/// Returns the wall clock in ms since the epoch (what journal rows record).
std::int64_t wall_ms();

/// A database (SQLite file or PostgreSQL schema) no other test uses.
struct database {
  std::string url;
  std::string schema;
  bool postgres = false;

  /// Returns the store options for it.
  persistence::store_options store_options() const {
    return {.url = url, .schema = schema,
            .retry_budget = std::chrono::milliseconds{10'000}};
  }

  /// Returns a runtime config for it.
  config runtime_config(std::string executor_id = "local") const;

  /// Returns a fresh database on the store under test.
  static database fresh();

  /// Returns the database named on a worker process's command line.
  static database named(std::string url, std::string schema);
};

/// For a worker process whose stdout the test reads: Perdure's logs (spdlog's
/// default logger) go to stderr, never into the middle of a line it prints.
void worker_logs_to_stderr();

/// Returns "sqlite" or "postgres" (the store under test).
std::string store_under_test();

/// Waits (really) until `pred()` holds; returns false after `limit`.
template <class P>
bool eventually(P pred,
                std::chrono::milliseconds limit = std::chrono::seconds{20}) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  return pred();
}

/// Plain SQL on a test database, for set-up and assertions that must not go
/// through the code under test. `$1`-style parameters on both stores.
class sql_client {
public:
  explicit sql_client(const database& db);
  ~sql_client();

  sql_client(const sql_client&) = delete;
  sql_client& operator=(const sql_client&) = delete;

  sql_rows exec(const std::string& sql, const std::vector<sql_param>& params = {});

  /// Returns the single value of a one-row, one-column query (as text).
  std::string scalar(const std::string& sql,
                     const std::vector<sql_param>& params = {});

  /// Returns the dialect: "postgresql" or "sqlite".
  const char* dialect() const;

  /// Returns the name of table `t`, qualified by the schema on PostgreSQL.
  std::string table(const std::string& t) const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Runs `work` on a session of the application's own, in one transaction
/// of `db` (quicker than a commit per write: items enqueued this way
/// appear at once). Throws if the database cannot be opened or commit.
void in_one_transaction(const database& db,
                        const std::function<void(sql_session&)>& work);

/// Returns this thread's own client of `db` (a worker process logs to side
/// tables from many step threads at once; a client serves one thread).
sql_client& thread_client(const database& db);

} // namespace perdure::test
