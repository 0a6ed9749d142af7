// PostgreSQL going away under load, on a server of the test's own: stopped
// for longer than the retry budget, restarted with `-m immediate`, its
// backends killed. What users rely on: the process never crashes, every
// run finishes without a process restart, no step runs again once its
// checkpoint committed (a step in flight may: at least once), and a
// transactional step's rows exist exactly once.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "perdure/perdure.hpp"
#include "support/pg_cluster.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr int runs = 60;
constexpr int steps = 12;
constexpr int tx_step = 6;

class outage_test : public ::testing::Test {
protected:
  void SetUp() override {
    if (test::store_under_test() != "postgres")
      GTEST_SKIP() << "stops a PostgreSQL server of its own (SQLite has none)";
    if (!test::pg_cluster::available())
      GTEST_SKIP() << "needs PostgreSQL's binaries and root (as scripts/test)";
    pg_ = std::make_unique<test::pg_cluster>();
    db_.url = pg_->url();
    db_.schema = "outage";
    db_.postgres = true;
    test::sql_client sql{db_};
    sql.exec("CREATE TABLE " + sql.table("tx_rows") + " (run_id TEXT)");
  }

  /// A runtime that gives up on the database after 1 s.
  std::unique_ptr<runtime> make_runtime() {
    auto cfg = db_.runtime_config("outage");
    cfg.db_retry_budget = 1s;
    cfg.orphan_retry = 200ms;
    auto rt = std::make_unique<runtime>(cfg);
    auto table = test::sql_client{db_}.table("tx_rows");
    rt->register_workflow("flow", [this, table](workflow_context& ctx,
                                                int n) -> task<long> {
      long total = 0;
      for (int i = 0; i < steps; ++i) {
        if (i == tx_step) {
          total += co_await ctx.transaction("tx", [&](sql_session& s) {
            s.exec_params("INSERT INTO " + table + " (run_id) VALUES ($1)",
                          ctx.workflow_id());
            return 1000L;
          });
          continue;
        }
        total += co_await ctx.step("s" + std::to_string(i), [&, i] {
          {
            std::lock_guard guard{mtx_};
            ++executions_[{ctx.workflow_id(), i}];
          }
          std::this_thread::sleep_for(10ms);
          return static_cast<long>(i + n);
        });
      }
      co_return total;
    });
    return rt;
  }

  static long expected(int n) {
    long total = 1000;
    for (int i = 0; i < steps; ++i)
      if (i != tx_step)
        total += i + n;
    return total;
  }

  /// Starts `runs` runs, does `fault` while they work, and checks that all
  /// of them end right with the process still up.
  template <class Fault>
  void survive(Fault&& fault) {
    auto rt = make_runtime();
    rt->start();
    std::vector<workflow_handle<long>> handles;
    for (int n = 0; n < runs; ++n)
      handles.push_back(rt->start_workflow<long>("flow", n,
                                                 {.id = "r" + std::to_string(n)}));
    std::this_thread::sleep_for(150ms); // steps under way
    fault();
    auto back = std::chrono::steady_clock::now();
    for (int n = 0; n < runs; ++n)
      EXPECT_EQ(handles[static_cast<size_t>(n)].get(60s), expected(n)) << n;
    std::cout << "[ measured ] all " << runs << " runs ended "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - back)
                   .count()
              << " ms after the fault was over\n";
    test::sql_client sql{db_};
    EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("tx_rows")),
              std::to_string(runs))
      << "a transactional step's rows exist exactly once";
    EXPECT_EQ(sql.scalar("SELECT COUNT(DISTINCT run_id) FROM "
                         + sql.table("tx_rows")),
              std::to_string(runs));
    std::lock_guard guard{mtx_};
    int again = 0;
    for (auto& [key, count] : executions_) {
      EXPECT_LE(count, 2) << key.first << " step " << key.second;
      again += count - 1;
    }
    EXPECT_EQ(executions_.size(),
              static_cast<size_t>(runs * (steps - 1)));
    // Each run had at most one step in flight when the database went.
    EXPECT_LE(again, runs);
    rt->stop();
  }

  std::unique_ptr<test::pg_cluster> pg_;
  test::database db_;
  std::mutex mtx_;
  std::map<std::pair<std::string, int>, int> executions_;
};

TEST_F(outage_test, a_server_down_longer_than_the_retry_budget_crashes_nothing) {
  survive([&] {
    pg_->stop("fast");
    std::this_thread::sleep_for(3500ms); // 3.5 x the budget
    pg_->start();
  });
}

TEST_F(outage_test, an_immediate_restart_under_load_loses_nothing) {
  survive([&] { pg_->restart("immediate"); });
}

TEST_F(outage_test, killed_backends_under_load_lose_nothing) {
  survive([&] {
    int killed = 0;
    for (int i = 0; i < 4; ++i) {
      killed += pg_->kill_backends();
      std::this_thread::sleep_for(100ms);
    }
    EXPECT_GT(killed, 0);
  });
}

TEST_F(outage_test, start_waits_for_a_server_that_is_starting) {
  pg_->stop("fast");
  std::thread later{[&] {
    std::this_thread::sleep_for(1500ms);
    pg_->start();
  }};
  auto cfg = db_.runtime_config("outage");
  cfg.db_retry_budget = 20s;
  runtime rt{cfg};
  rt.register_workflow("noop", [](workflow_context&) -> task<int> {
    co_return 7;
  });
  EXPECT_NO_THROW(rt.start());
  later.join();
  EXPECT_EQ(rt.start_workflow<int>("noop").get(10s), 7);
}

TEST_F(outage_test, start_fails_clearly_when_the_server_stays_away) {
  pg_->stop("fast");
  auto cfg = db_.runtime_config("outage");
  cfg.db_retry_budget = 500ms;
  runtime rt{cfg};
  try {
    rt.start();
    FAIL() << "started without a database";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::store_unavailable) << ex.what();
  }
}

} // namespace
