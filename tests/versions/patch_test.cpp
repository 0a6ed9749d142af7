// Patches: a workflow changed while runs are in flight branches with
// `ctx.patched`: runs that passed the point under old code keep the old
// branch, the others take the new one, nothing ends ERROR; and a process
// whose code lacks a patch never takes a run that took it.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class patch_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    store_ = persistence::open_store(db_.store_options());
    store_->migrate();
  }

  /// "ship" before the deploy: books with the old carrier.
  void register_old(runtime& rt) {
    rt.register_workflow("ship", [this](workflow_context& ctx)
                                   -> task<std::string> {
      co_await ctx.step("reserve", [] { return 1; });
      co_await ctx.recv<int>("a");
      co_await ctx.step("book-old", [this] { return ++old_booked_; });
      co_await ctx.recv<int>("b");
      co_return std::string{"old"};
    });
  }

  /// "ship" after it: patch "carrier" books with the new one.
  void register_new(runtime& rt) {
    rt.register_workflow(
      "ship",
      [this](workflow_context& ctx) -> task<std::string> {
        co_await ctx.step("reserve", [] { return 1; });
        co_await ctx.recv<int>("a");
        std::string how = "old";
        if (co_await ctx.patched("carrier")) {
          co_await ctx.step("book-new", [this] { return ++new_booked_; });
          how = "new";
        } else {
          co_await ctx.step("book-old", [this] { return ++old_booked_; });
        }
        co_await ctx.recv<int>("b");
        co_return how;
      },
      {.patches = {"carrier"}});
  }

  std::string executor_of(const std::string& id) {
    auto run = store_->get_run(id);
    return run ? run->owner.executor : std::string{"(gone)"};
  }

  test::database db_;
  std::unique_ptr<persistence::store> store_;
  std::atomic<int> old_booked_{0}, new_booked_{0};
};

TEST_F(patch_test, runs_in_flight_keep_their_branch_and_new_runs_take_the_patch) {
  constexpr int passed = 100, before = 50, fresh = 50;
  std::vector<std::string> past_ids, before_ids;
  {
    runtime rt{db_.runtime_config("local")};
    register_old(rt);
    rt.start();
    for (int i = 0; i < passed + before; ++i) {
      auto h = rt.start_workflow<std::string>("ship");
      (i < passed ? past_ids : before_ids).push_back(h.id());
    }
    for (auto& id : past_ids)
      rt.send(id, "a", 1);
    ASSERT_TRUE(test::eventually([&] { return old_booked_ == passed; }))
      << old_booked_.load();
    rt.stop(); // the deploy
  }
  runtime rt{db_.runtime_config("local")};
  register_new(rt);
  rt.start();
  std::vector<std::string> fresh_ids;
  for (int i = 0; i < fresh; ++i)
    fresh_ids.push_back(rt.start_workflow<std::string>("ship").id());
  for (auto& id : past_ids)
    rt.send(id, "b", 2);
  for (auto* ids : {&before_ids, &fresh_ids})
    for (auto& id : *ids) {
      rt.send(id, "a", 1);
      rt.send(id, "b", 2);
    }
  for (auto& id : past_ids)
    EXPECT_EQ(rt.retrieve_workflow<std::string>(id).get(30s), "old") << id;
  for (auto* ids : {&before_ids, &fresh_ids})
    for (auto& id : *ids)
      EXPECT_EQ(rt.retrieve_workflow<std::string>(id).get(30s), "new") << id;
  EXPECT_EQ(old_booked_.load(), passed) << "replayed, not booked again";
  EXPECT_EQ(new_booked_.load(), before + fresh);
  auto failed = rt.list_runs({.status = run_status::error});
  EXPECT_TRUE(failed.runs.empty()) << "nothing ends ERROR";
  // The patch is in the journal of the runs that took it, before the
  // operation it came before.
  auto steps = rt.history(fresh_ids.front());
  auto marker = std::find_if(steps.begin(), steps.end(), [](auto& s) {
    return s.kind == "patch";
  });
  ASSERT_NE(marker, steps.end());
  EXPECT_EQ(marker->name, "carrier");
}

TEST_F(patch_test, a_process_without_the_patch_never_takes_a_run_that_took_it) {
  std::string patched_id, plain_id;
  {
    runtime rt{db_.runtime_config("new-1")};
    register_new(rt);
    rt.start();
    patched_id = rt.start_workflow<std::string>("ship").id();
    plain_id = rt.start_workflow<std::string>("ship").id();
    rt.send(patched_id, "a", 1);
    ASSERT_TRUE(test::eventually([&] { return new_booked_ == 1; }));
    rt.stop(); // its runs are up for takeover
  }
  {
    runtime old{db_.runtime_config("old-1")};
    register_old(old);
    old.start();
    // It adopts the run that has not reached the patch...
    ASSERT_TRUE(test::eventually([&] { return executor_of(plain_id) == "old-1"; }))
      << executor_of(plain_id);
    // ... and never the one that took it, pass after pass.
    std::this_thread::sleep_for(1s);
    EXPECT_NE(executor_of(patched_id), "old-1");
    old.send(plain_id, "a", 1);
    old.send(plain_id, "b", 2);
    EXPECT_EQ(old.retrieve_workflow<std::string>(plain_id).get(30s), "old");
    EXPECT_NE(executor_of(patched_id), "old-1");
    old.stop();
  }
  runtime rt{db_.runtime_config("new-2")};
  register_new(rt);
  rt.start();
  rt.send(patched_id, "b", 2);
  EXPECT_EQ(rt.retrieve_workflow<std::string>(patched_id).get(30s), "new");
  EXPECT_EQ(new_booked_.load(), 1) << "replayed, not booked again";
}

// A review found it: a run's attempt marker (a resume, a queue item's
// retry) made its load drop the patch markers, and the resumed run took
// the old branch.
TEST_F(patch_test, a_resumed_run_keeps_the_patch_it_took) {
  std::atomic<bool> fixed{false};
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow(
    "ship",
    [&](workflow_context& ctx) -> task<std::string> {
      std::string how = "old";
      if (co_await ctx.patched("carrier")) {
        co_await ctx.step("book-new", [this] { return ++new_booked_; });
        how = "new";
      } else {
        co_await ctx.step("book-old", [this] { return ++old_booked_; });
      }
      co_await ctx.step("label", [&] {
        if (!fixed)
          throw terminal_error("label printer down (the bug)");
        return 1;
      });
      co_return how;
    },
    {.patches = {"carrier"}});
  rt.start();
  auto h = rt.start_workflow<std::string>("ship");
  EXPECT_THROW(h.get(10s), perdure::error);
  fixed = true;
  rt.resume(h.id());
  EXPECT_EQ(h.get(10s), "new");
  EXPECT_EQ(new_booked_.load(), 1) << "replayed, not booked again";
  EXPECT_EQ(old_booked_.load(), 0);
}

struct account {
  std::int64_t balance = 0;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(balance);
  }
};

TEST_F(patch_test, an_object_handler_takes_a_patch_it_declares) {
  runtime rt{db_.runtime_config("local")};
  rt.register_object<account>("account")
    .handler(
      "deposit",
      [](object_context<account>& ctx, std::int64_t n) -> task<std::int64_t> {
        if (co_await ctx.patched("fee"))
          n -= co_await ctx.step("fee", [] { return std::int64_t{1}; });
        ctx.state().balance += n;
        co_return ctx.state().balance;
      },
      {.patches = {"fee"}})
    .handler("drifted", [](object_context<account>& ctx) -> task<bool> {
      co_return co_await ctx.patched("never-declared");
    });
  rt.start();
  auto h = rt.send<std::int64_t>("account", "a1", "deposit", std::int64_t{10});
  EXPECT_EQ(h.get(10s), 9);
  auto history = rt.history(h.id());
  ASSERT_FALSE(history.empty());
  EXPECT_EQ(history.front().kind, "patch") << "its marker, as a workflow's";
  EXPECT_EQ(history.front().name, "fee");
  try {
    rt.call<bool>("account", "a1", "drifted");
    FAIL() << "an undeclared patch was taken";
  } catch (const perdure::error& ex) {
    EXPECT_NE(std::string{ex.what()}.find("handler_options::patches"),
              std::string::npos)
      << ex.what();
  }
}

TEST_F(patch_test, an_undeclared_patch_is_a_clear_error) {
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow("drifted", [](workflow_context& ctx) -> task<int> {
    co_return (co_await ctx.patched("never-declared")) ? 1 : 0;
  });
  rt.start();
  auto h = rt.start_workflow<int>("drifted");
  try {
    h.get(10s);
    FAIL() << "an undeclared patch was taken";
  } catch (const perdure::error& ex) {
    EXPECT_NE(std::string{ex.what()}.find("workflow_options::patches"),
              std::string::npos)
      << ex.what();
  }
  EXPECT_EQ(h.status(), run_status::error);
}

} // namespace
