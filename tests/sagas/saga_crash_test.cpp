// Kills saga worker processes (`saga_worker.cpp`, SIGKILL) at random moments
// and checks what users rely on: after the last run, every saga that failed
// at step k ran steps 1..k-1 and their compensations in reverse, each
// exactly once, and ended COMPENSATED; the others ran all four and
// succeeded. No finished compensation ran again.

#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr int sagas = 200;

class saga_crash_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    sql_ = std::make_unique<test::sql_client>(db_);
    sql_->exec("CREATE TABLE " + sql_->table("effects")
               + " (n " + (std::string{sql_->dialect()} == "postgresql"
                             ? "BIGSERIAL"
                             : "INTEGER")
               + " PRIMARY KEY, saga TEXT NOT NULL, what TEXT NOT NULL)");
  }

  test::child_process worker() {
    return test::child_process{{PERDURE_SAGA_WORKER, db_.url, db_.schema,
                                "sagas", std::to_string(sagas)}};
  }

  test::database db_;
  std::unique_ptr<test::sql_client> sql_;
};

} // namespace

TEST_F(saga_crash_test, sigkilled_sagas_run_each_step_and_compensation_exactly_once) {
  // Each kill lands after a random share of the work more is done: in the
  // middle of the sagas, on any store's speed.
  constexpr int total_effects = sagas / 5 * (4 + 0 + 2 + 4 + 6);
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> more{total_effects / 12, total_effects / 6};
  constexpr int kills = 4;
  int interrupted = 0;
  int target = 0;
  auto effects = [&] {
    return std::stoi(sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("effects")));
  };
  for (int k = 0; k < kills; ++k) {
    auto w = worker();
    ASSERT_TRUE(w.wait_for("READY", 60s)) << w.output();
    target += more(rng);
    auto until = std::chrono::steady_clock::now() + 60s;
    while (effects() < target && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(2ms);
    w.sigkill();
    auto pending = sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                                + " WHERE status = 'PENDING'");
    std::cout << "[ measured ] kill " << k << " at " << effects()
              << " effects: " << pending << " sagas unfinished\n";
    interrupted += pending != "0";
  }
  auto last = worker();
  ASSERT_EQ(last.wait_exit(180s), 0) << last.output();
  EXPECT_GE(interrupted, 1) << "no kill hit a saga in flight: the test is void";
  for (int n = 0; n < sagas; ++n) {
    auto id = "s" + std::to_string(n);
    int fail_at = n % 5;
    std::vector<std::string> expected;
    if (fail_at == 0) {
      for (int i = 1; i <= 4; ++i)
        expected.push_back("do s" + std::to_string(i));
    } else {
      for (int i = 1; i < fail_at; ++i)
        expected.push_back("do s" + std::to_string(i));
      for (int i = fail_at - 1; i >= 1; --i)
        expected.push_back("undo s" + std::to_string(i) + "="
                           + std::to_string(i));
    }
    std::vector<std::string> got;
    for (auto& row : sql_->exec("SELECT what FROM " + sql_->table("effects")
                                  + " WHERE saga = $1 ORDER BY n",
                                {id})
                       .rows)
      got.push_back(row.at(0).value_or(""));
    EXPECT_EQ(got, expected) << id;
    EXPECT_EQ(sql_->scalar("SELECT status FROM " + sql_->table("runs")
                             + " WHERE id = $1",
                           {id}),
              fail_at == 0 ? "SUCCESS" : "COMPENSATED")
      << id;
  }
}
