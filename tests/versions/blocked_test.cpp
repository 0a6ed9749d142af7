// A deploy that changes a workflow without a patch: its runs in flight go
// BLOCKED (not ERROR), visible and cancellable, and a process started
// later with code that replays them finishes them.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class blocked_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    store_ = persistence::open_store(db_.store_options());
    store_->migrate();
  }

  /// Leaves run `id` of "flow" as old code left it when its process died:
  /// step "old" recorded.
  void seed_old_run(const std::string& id,
                    std::optional<std::int64_t> deadline_ms = std::nullopt) {
    persistence::run_record r;
    r.id = id;
    r.name = "flow";
    r.inputs = "";
    r.owner = {"local", 1};
    r.deadline_ms = deadline_ms;
    ASSERT_TRUE(store_->create_run(r).created);
    persistence::append_write w;
    w.owner = {"local", 1};
    w.entry.run_id = id;
    w.entry.seq = 0;
    w.entry.name = "old";
    w.entry.payload = persistence::encode(1);
    ASSERT_TRUE(store_->write_batch({.appends = {w}, .completions = {}})
                  .appends.at(0));
  }

  /// "flow" as a deploy changed it: its first step renamed, no patch.
  static void register_changed(runtime& rt, std::atomic<int>& ran) {
    rt.register_workflow("flow", [&ran](workflow_context& ctx) -> task<int> {
      co_await ctx.step("new", [&ran] { return ++ran; });
      co_return 0;
    });
  }

  /// "flow" fixed: it replays the old journal.
  static void register_fixed(runtime& rt) {
    rt.register_workflow("flow", [](workflow_context& ctx) -> task<int> {
      auto one = co_await ctx.step("old", [] { return 1; });
      co_return one + 6;
    });
  }

  test::database db_;
  std::unique_ptr<persistence::store> store_;
};

TEST_F(blocked_test, a_run_that_no_longer_replays_is_blocked_then_finished_by_fixed_code) {
  seed_old_run("r1");
  std::atomic<int> ran{0};
  {
    runtime rt{db_.runtime_config("local")};
    register_changed(rt, ran);
    rt.start();
    auto h = rt.retrieve_workflow<int>("r1");
    ASSERT_TRUE(test::eventually([&] {
      return h.status() == run_status::blocked;
    })) << to_string(h.status());
    auto run = store_->get_run("r1");
    ASSERT_TRUE(run);
    EXPECT_NE(run->error.value_or("").find("journal index 0"),
              std::string::npos)
      << run->error.value_or("");
    EXPECT_NE(run->error.value_or("").find("'new'"), std::string::npos);
    EXPECT_NE(run->error.value_or("").find("'old'"), std::string::npos);
    EXPECT_NE(run->error.value_or("").find("executor 'local'"),
              std::string::npos);
    auto page = rt.list_runs({.status = run_status::blocked});
    ASSERT_EQ(page.runs.size(), 1u);
    EXPECT_EQ(page.runs[0].id, "r1");
    // Not an end: a waiting handle goes on waiting.
    try {
      h.get(300ms);
      FAIL() << "a BLOCKED run returned";
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), errc::timeout) << ex.what();
    }
    EXPECT_EQ(ran.load(), 0) << "no step ran past the divergence";
    // The process that met it does not try it again.
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(h.status(), run_status::blocked);
    // Other runs are untouched.
    EXPECT_EQ(rt.start_workflow<int>("flow").get(10s), 0);
    rt.stop();
  }
  // A process started later, with code that replays the journal.
  runtime fixed{db_.runtime_config("local-2")};
  register_fixed(fixed);
  fixed.start();
  EXPECT_EQ(fixed.retrieve_workflow<int>("r1").get(10s), 7);
  EXPECT_EQ(fixed.retrieve_workflow<int>("r1").status(), run_status::success);
}

TEST_F(blocked_test, a_blocked_run_can_be_cancelled) {
  seed_old_run("r2");
  std::atomic<int> ran{0};
  runtime rt{db_.runtime_config("local")};
  register_changed(rt, ran);
  rt.start();
  auto h = rt.retrieve_workflow<int>("r2");
  ASSERT_TRUE(test::eventually(
    [&] { return h.status() == run_status::blocked; }));
  h.cancel();
  EXPECT_EQ(h.status(), run_status::cancelled);
  EXPECT_THROW(h.get(5s), perdure::error);
}

// A review found these: when_done took BLOCKED for an end (and its
// callback then waited for ever on the callbacks' one thread), and a
// deadline passing while a run is BLOCKED did nothing.
TEST_F(blocked_test, a_blocked_run_is_no_end_for_when_done_and_its_deadline_cancels_it) {
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  seed_old_run("r4", now + 1500);
  std::atomic<int> ran{0};
  runtime rt{db_.runtime_config("local")};
  register_changed(rt, ran);
  rt.start();
  auto h = rt.retrieve_workflow<int>("r4");
  std::atomic<int> called{0};
  std::atomic<bool> saw_blocked{false};
  h.when_done([&](const workflow_handle<int>& done) {
    saw_blocked = done.status() == run_status::blocked;
    ++called;
  });
  ASSERT_TRUE(test::eventually(
    [&] { return h.status() == run_status::blocked; }));
  std::this_thread::sleep_for(300ms); // the callbacks' poll looks meanwhile
  EXPECT_EQ(called.load(), 0) << "BLOCKED is not an end";
  // Its deadline passes while it is BLOCKED: it ends CANCELLED.
  ASSERT_TRUE(test::eventually(
    [&] { return h.status() == run_status::cancelled; }, 10s))
    << to_string(h.status());
  EXPECT_TRUE(test::eventually([&] { return called.load() == 1; }));
  EXPECT_FALSE(saw_blocked.load());
}

TEST_F(blocked_test, the_fail_policy_ends_the_run_error_as_before) {
  seed_old_run("r3");
  std::atomic<int> ran{0};
  auto c = db_.runtime_config("local");
  c.on_non_determinism = non_determinism_policy::fail;
  runtime rt{c};
  register_changed(rt, ran);
  rt.start();
  try {
    rt.retrieve_workflow<int>("r3").get(10s);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed) << ex.what();
  }
}

} // namespace
