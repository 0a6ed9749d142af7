// Sagas while PostgreSQL goes away for longer than the retry budget: every
// saga still ends right (failures compensated, the rest succeeded) without
// a process restart, and each transactional step and compensation left its
// row exactly once.

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/sagas/saga.hpp"
#include "support/pg_cluster.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr int sagas_started = 40;

TEST(saga_outage_test, a_server_down_longer_than_the_retry_budget_loses_no_compensation) {
  if (test::store_under_test() != "postgres")
    GTEST_SKIP() << "stops a PostgreSQL server of its own (SQLite has none)";
  if (!test::pg_cluster::available())
    GTEST_SKIP() << "needs PostgreSQL's binaries and root (as scripts/test)";
  test::pg_cluster pg;
  test::database db;
  db.url = pg.url();
  db.schema = "saga_outage";
  db.postgres = true;
  test::sql_client sql{db};
  auto table = sql.table("effects");
  sql.exec("CREATE TABLE " + table
           + " (n BIGSERIAL PRIMARY KEY, saga TEXT NOT NULL, what TEXT NOT NULL)");
  auto cfg = db.runtime_config("outage");
  cfg.db_retry_budget = 1s;
  cfg.orphan_retry = 200ms;
  runtime rt{cfg};
  rt.register_workflow("four", [table](workflow_context& ctx, int fail_at) -> task<int> {
    auto id = ctx.workflow_id();
    co_return co_await sagas::run<int>(ctx, [&](sagas::saga& s) -> task<int> {
      for (int k = 1; k <= 4; ++k) {
        auto name = "s" + std::to_string(k);
        auto undo = [table, id, name](sql_session& q, const int&) {
          q.exec_params("INSERT INTO " + table + " (saga, what) VALUES ($1, $2)",
                        id, "undo " + name);
        };
        co_await s.transaction(
          name,
          [&](sql_session& q) {
            if (k == fail_at)
              throw terminal_error(name + " refused");
            std::this_thread::sleep_for(20ms);
            q.exec_params("INSERT INTO " + table + " (saga, what) VALUES ($1, $2)",
                          id, "do " + name);
            return k;
          },
          undo);
      }
      co_return 0;
    });
  });
  rt.start();
  std::vector<workflow_handle<int>> started;
  for (int n = 0; n < sagas_started; ++n)
    started.push_back(
      rt.start_workflow<int>("four", n % 5, {.id = "s" + std::to_string(n)}));
  std::this_thread::sleep_for(150ms); // sagas under way
  auto unfinished = sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                               + " WHERE status = 'PENDING'");
  std::cout << "[ measured ] " << unfinished
            << " sagas unfinished when the server stopped\n";
  EXPECT_NE(unfinished, "0") << "the outage hit no saga: the test is void";
  pg.stop("fast");
  std::this_thread::sleep_for(3500ms); // 3.5 x the budget
  pg.start();
  for (int n = 0; n < sagas_started; ++n) {
    auto& h = started[static_cast<size_t>(n)];
    if (n % 5 == 0) {
      EXPECT_EQ(h.get(60s), 0) << n;
      continue;
    }
    try {
      h.get(60s);
      ADD_FAILURE() << "saga " << n << " succeeded";
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), errc::compensated) << n << ": " << ex.what();
    }
  }
  test::sql_client after{db};
  for (int n = 0; n < sagas_started; ++n) {
    auto id = "s" + std::to_string(n);
    int fail_at = n % 5;
    std::vector<std::string> expected;
    int last = fail_at == 0 ? 4 : fail_at - 1;
    for (int i = 1; i <= last; ++i)
      expected.push_back("do s" + std::to_string(i));
    if (fail_at != 0)
      for (int i = fail_at - 1; i >= 1; --i)
        expected.push_back("undo s" + std::to_string(i));
    std::vector<std::string> got;
    for (auto& row :
         after.exec("SELECT what FROM " + table + " WHERE saga = $1 ORDER BY n",
                    {id})
           .rows)
      got.push_back(row.at(0).value_or(""));
    EXPECT_EQ(got, expected) << id;
  }
  rt.stop();
}

} // namespace
