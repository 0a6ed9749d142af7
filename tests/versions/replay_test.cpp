// The replay check: a run exported from the store replays on the code that
// made it, and a changed workflow is reported at the first index where it
// diverges, with no database behind the check and no step run.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "perdure/testing/replay.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
using perdure::testing::replay;
using perdure::testing::replayer;
using verdict = perdure::testing::replay_report::verdict;

namespace {

/// "pay" as deployed: reserve, wait for "go", charge.
task<int> pay(workflow_context& ctx, int amount) {
  auto r = co_await ctx.step("reserve", [] { return 1; });
  auto go = co_await ctx.recv<int>("go");
  auto c = co_await ctx.step("charge", [&] { return amount; });
  co_return r + go + c;
}

class replay_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// A finished run and one waiting for "go", exported.
  void export_runs() {
    runtime rt{db_.runtime_config("local")};
    rt.register_workflow("pay", pay);
    rt.start();
    auto done = rt.start_workflow<int>("pay", 10, {.id = "done"});
    rt.send("done", "go", 5);
    ASSERT_EQ(done.get(10s), 16);
    auto waiting = rt.start_workflow<int>("pay", 7, {.id = "waiting"});
    for (int i = 0; i < 200 && rt.history("waiting").empty(); ++i)
      std::this_thread::sleep_for(10ms);
    done_ = rt.export_run("done");
    waiting_ = rt.export_run("waiting");
    // PERDURE_EXPORT_DIR=tests/versions/exported refreshes the exports the
    // replay check program is given (replay.* ctest cases).
    if (auto* dir = std::getenv("PERDURE_EXPORT_DIR"))
      std::ofstream{std::string{dir} + "/pay_done.json"} << done_ << "\n";
    EXPECT_THROW(rt.export_run("nobody"), perdure::error);
  }

  test::database db_;
  std::string done_, waiting_;
};

TEST_F(replay_test, the_code_that_made_a_run_replays_it_without_running_a_step) {
  export_runs();
  std::atomic<int> ran{0};
  auto counted = [&](workflow_context& ctx, int amount) -> task<int> {
    auto r = co_await ctx.step("reserve", [&] { return ++ran; });
    auto go = co_await ctx.recv<int>("go");
    auto c = co_await ctx.step("charge", [&] { return ++ran + amount; });
    co_return r + go + c;
  };
  auto done = replay(done_, counted);
  EXPECT_TRUE(done.ok()) << done.summary;
  EXPECT_EQ(done.replayed, 3) << done.summary; // reserve, the await, charge
  EXPECT_NE(done.summary.find("its code finished"), std::string::npos)
    << done.summary;
  // In flight: replayed up to where it waits, which is not run.
  auto waiting = replay(waiting_, counted);
  EXPECT_TRUE(waiting.ok()) << waiting.summary;
  EXPECT_EQ(waiting.replayed, 1) << waiting.summary;
  EXPECT_NE(waiting.summary.find("goes on with await"), std::string::npos)
    << waiting.summary;
  EXPECT_EQ(ran.load(), 0) << "a replay check runs no step";
}

TEST_F(replay_test, a_reordered_workflow_is_reported_at_the_index_it_diverges) {
  export_runs();
  auto reordered = [](workflow_context& ctx, int amount) -> task<int> {
    auto r = co_await ctx.step("reserve", [] { return 1; });
    auto c = co_await ctx.step("charge", [&] { return amount; });
    auto go = co_await ctx.recv<int>("go");
    co_return r + go + c;
  };
  auto report = replay(done_, reordered);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.result, verdict::diverges);
  EXPECT_EQ(report.index, 1);
  EXPECT_EQ(report.expected, "step 'charge'");
  EXPECT_EQ(report.recorded.rfind("await", 0), 0u) << report.recorded;
  EXPECT_EQ(report.replayed, 1);
  EXPECT_NE(report.summary.find("journal index 1"), std::string::npos)
    << report.summary;
  // A step dropped from the end: the journal recorded more than it does.
  auto shorter = [](workflow_context& ctx, int) -> task<int> {
    auto r = co_await ctx.step("reserve", [] { return 1; });
    co_return r + co_await ctx.recv<int>("go");
  };
  report = replay(done_, shorter);
  EXPECT_FALSE(report.ok()) << report.summary;
  EXPECT_EQ(report.index, 2);
  EXPECT_EQ(report.recorded, "step 'charge'");
  EXPECT_EQ(report.expected.rfind("nothing", 0), 0u) << report.expected;
}

TEST_F(replay_test, a_change_behind_a_patch_replays_old_runs) {
  export_runs();
  auto patched = [](workflow_context& ctx, int amount) -> task<int> {
    auto r = co_await ctx.step("reserve", [] { return 1; });
    if (co_await ctx.patched("fraud-check"))
      co_await ctx.step("fraud-check", [] { return true; });
    auto go = co_await ctx.recv<int>("go");
    auto c = co_await ctx.step("charge", [&] { return amount; });
    co_return r + go + c;
  };
  auto report = replay(done_, patched, {.patches = {"fraud-check"}});
  EXPECT_TRUE(report.ok()) << report.summary;
  EXPECT_EQ(report.replayed, 3);
  // The run in flight has not reached the point: it would take the patch
  // there, where the check stops (nothing after it is recorded).
  report = replay(waiting_, patched, {.patches = {"fraud-check"}});
  EXPECT_TRUE(report.ok()) << report.summary;
  EXPECT_EQ(report.replayed, 1) << report.summary;
  EXPECT_NE(report.summary.find("at journal index 1 the code goes on with "
                                "patch 'fraud-check'"),
            std::string::npos)
    << report.summary;
}

// A review found these reported as replaying: code that Perdure refuses
// (an undeclared patch), a patch the run took that the code dropped, and
// code failing where the run succeeded.
TEST_F(replay_test, code_that_would_fail_the_run_does_not_replay) {
  export_runs();
  auto undeclared = [](workflow_context& ctx, int amount) -> task<int> {
    auto r = co_await ctx.step("reserve", [] { return 1; });
    if (co_await ctx.patched("fraud-check"))
      co_await ctx.step("fraud-check", [] { return true; });
    auto go = co_await ctx.recv<int>("go");
    co_return r + go + amount;
  };
  auto report = replay(waiting_, undeclared); // no .patches
  EXPECT_EQ(report.result, verdict::diverges) << report.summary;
  EXPECT_NE(report.summary.find("workflow_options::patches"),
            std::string::npos)
    << report.summary;
  auto failing = [](workflow_context& ctx, int amount) -> task<int> {
    auto r = co_await ctx.step("reserve", [] { return 1; });
    auto go = co_await ctx.recv<int>("go");
    auto c = co_await ctx.step("charge", [&] { return amount; });
    if (c > 0)
      throw std::runtime_error("new validation");
    co_return r + go + c;
  };
  report = replay(done_, failing);
  EXPECT_EQ(report.result, verdict::diverges) << report.summary;
  EXPECT_NE(report.recorded.find("SUCCESS"), std::string::npos)
    << report.recorded;
}

TEST_F(replay_test, a_patch_the_code_no_longer_declares_does_not_replay) {
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow(
    "tagged",
    [](workflow_context& ctx) -> task<int> {
      co_return (co_await ctx.patched("v2")) ? 2 : 1;
    },
    {.patches = {"v2"}});
  rt.start();
  auto h = rt.start_workflow<int>("tagged");
  ASSERT_EQ(h.get(10s), 2);
  auto exported = rt.export_run(h.id());
  auto dropped = [](workflow_context&) -> task<int> { co_return 2; };
  auto report = replay(exported, dropped);
  EXPECT_EQ(report.result, verdict::diverges) << report.summary;
  EXPECT_NE(report.summary.find("took patch 'v2'"), std::string::npos)
    << report.summary;
  auto kept = [](workflow_context& ctx) -> task<int> {
    co_await ctx.deprecated_patch("v2");
    co_return 2;
  };
  report = replay(exported, kept, {.patches = {"v2"}});
  EXPECT_TRUE(report.ok()) << report.summary;
}

TEST_F(replay_test, what_cannot_be_checked_says_why) {
  export_runs();
  replayer r;
  r.register_workflow("other", pay);
  auto report = r.replay(done_);
  EXPECT_EQ(report.result, verdict::unusable);
  EXPECT_NE(report.summary.find("'pay', which is not registered"),
            std::string::npos)
    << report.summary;
  report = replay("{\"format\": \"something else\"}", pay);
  EXPECT_EQ(report.result, verdict::unusable);
  report = replay("not json", pay);
  EXPECT_EQ(report.result, verdict::unusable);
  EXPECT_NE(report.summary.find("malformed"), std::string::npos)
    << report.summary;
  // Hostile rows: never a crash, always why.
  auto with_row = [&](const std::string& row) {
    auto text = done_;
    auto at = text.find("\"journal\": [");
    EXPECT_NE(at, std::string::npos);
    text.insert(at + 12, "\n  " + row + ",");
    return replay(text, pay);
  };
  for (auto row : {R"({"seq": 1e300, "kind": "step", "name": "x", "outcome": 0})",
                   R"({"seq": 1.5, "kind": "step", "name": "x", "outcome": 0})",
                   R"({"seq": 2147483647, "kind": "phase", "name": "attempt", "outcome": 0, "payload": "0"})",
                   R"({"seq": 0, "kind": "step", "name": "reserve", "outcome": 0})",
                   R"({"seq": 99999999999, "kind": "step", "name": "x", "outcome": 0})",
                   R"({"seq": "0", "kind": "step", "name": "x", "outcome": 0})"}) {
    auto r = with_row(row);
    EXPECT_EQ(r.result, verdict::unusable) << row << ": " << r.summary;
  }
  auto thrower = [](workflow_context& ctx, int) -> task<int> {
    co_await ctx.step("reserve", [] { return 1; });
    throw 42;
  };
  EXPECT_FALSE(replay(done_, thrower).ok()) << "an exception of no known type";
}

} // namespace
