// Rows edited by hand (or by a bug, or a newer version) that Perdure cannot
// have written: one such row fails its own run, with a reason naming the
// row, and every other run of the executor recovers as usual.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class bad_rows_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// A step, a short sleep, then a wait for an awakeable (index 2).
  static void register_waiter(runtime& rt) {
    rt.register_workflow("waiter", [](workflow_context& ctx) -> task<int> {
      auto a = co_await ctx.step("a", [] { return 1; });
      co_await ctx.sleep(1ms);
      auto got = co_await ctx.awakeable<int>();
      co_return a + co_await got;
    });
  }

  /// Leaves runs A, B, C and D waiting for their awakeables.
  void leave_waiting_runs() {
    runtime rt{db_.runtime_config()};
    register_waiter(rt);
    rt.start();
    for (auto id : {"A", "B", "C", "D"})
      rt.start_workflow<int>("waiter", {.id = id});
    test::sql_client sql{db_};
    auto journal = sql.table("journal");
    for (int i = 0; i < 500; ++i) {
      if (sql.scalar("SELECT COUNT(*) FROM " + journal + " WHERE seq = 2")
          == "4")
        break;
      std::this_thread::sleep_for(10ms);
    }
    rt.stop();
  }

  test::database db_;
};

TEST_F(bad_rows_test, a_bad_row_fails_its_run_alone_and_names_the_row) {
  leave_waiting_runs();
  test::sql_client sql{db_};
  auto journal = sql.table("journal");
  sql.exec("UPDATE " + journal + " SET kind = 'bogus' WHERE run_id = 'A' AND "
           "seq = 0");
  sql.exec("UPDATE " + journal + " SET outcome = 77 WHERE run_id = 'B' AND "
           "seq = 0");
  sql.exec("UPDATE " + journal + " SET payload = $1 WHERE run_id = 'C' AND "
           "seq = 1",
           {std::string{"soon"}});
  runtime rt{db_.runtime_config()};
  register_waiter(rt);
  ASSERT_NO_THROW(rt.start()) << "one bad row must not block the executor";
  auto failure = [&](const char* id) -> std::string {
    try {
      rt.retrieve_workflow<int>(id).get(10s);
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), errc::workflow_failed) << ex.what();
      return ex.what();
    }
    return "no failure";
  };
  auto a = failure("A");
  EXPECT_NE(a.find("journal row (run 'A', seq 0)"), std::string::npos) << a;
  EXPECT_NE(a.find("unknown kind 'bogus'"), std::string::npos) << a;
  auto b = failure("B");
  EXPECT_NE(b.find("journal row (run 'B', seq 0)"), std::string::npos) << b;
  EXPECT_NE(b.find("unknown outcome 77"), std::string::npos) << b;
  auto c = failure("C");
  EXPECT_NE(c.find("journal row (run 'C', seq 1)"), std::string::npos) << c;
  EXPECT_NE(c.find("malformed wake-up time"), std::string::npos) << c;
  // The healthy run recovered and goes on.
  rt.resolve_awakeable("awk_2_D", 41);
  EXPECT_EQ(rt.retrieve_workflow<int>("D").get(10s), 42);
}

TEST_F(bad_rows_test, a_bad_row_met_when_a_run_is_revived_fails_that_run) {
  leave_waiting_runs();
  // A passivated run, revived by a delivery, meets the bad row then.
  test::sql_client sql{db_};
  sql.exec("UPDATE " + sql.table("journal")
           + " SET outcome = 9 WHERE run_id = 'A' AND seq = 0");
  sql.exec("UPDATE " + sql.table("runs")
           + " SET wake_at = 9223372036854775807 WHERE id = 'A'");
  runtime rt{db_.runtime_config()};
  register_waiter(rt);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<int>("A").status(), run_status::pending);
  rt.resolve_awakeable("awk_2_A", 1);
  try {
    rt.retrieve_workflow<int>("A").get(10s);
    FAIL() << "replayed a row it cannot read";
  } catch (const perdure::error& ex) {
    EXPECT_NE(std::string{ex.what()}.find("unknown outcome 9"),
              std::string::npos)
      << ex.what();
  }
  rt.resolve_awakeable("awk_2_B", 1);
  EXPECT_EQ(rt.retrieve_workflow<int>("B").get(10s), 2);
}

} // namespace
