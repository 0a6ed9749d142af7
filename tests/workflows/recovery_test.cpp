// Recovery, replay, non-determinism and fencing. Crashed processes are
// simulated by writing to the store what they would have left behind, or by
// stopping a runtime mid-step; tests/crash kills real processes.

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <typeinfo>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class recovery_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    store_ = persistence::open_store(db_.store_options());
    store_->migrate();
  }

  config cfg(std::string executor = "local") {
    auto c = db_.runtime_config(std::move(executor));
    c.step_threads = 4;
    return c;
  }

  /// Leaves a PENDING run of `name` as a crashed executor "local" would.
  void seed_run(const std::string& id, const std::string& name,
                std::string inputs) {
    persistence::run_record r;
    r.id = id;
    r.name = name;
    r.inputs = std::move(inputs);
    r.owner = {"local", 1};
    ASSERT_TRUE(store_->create_run(r).created);
  }

  void seed_entry(const std::string& id, int seq, const std::string& name,
                  std::string payload,
                  persistence::outcome o = persistence::outcome::value,
                  std::string error = {}) {
    persistence::append_write w;
    w.owner = {"local", 1};
    w.entry.run_id = id;
    w.entry.seq = seq;
    w.entry.name = name;
    w.entry.outcome = o;
    w.entry.payload = std::move(payload);
    w.entry.error = std::move(error);
    ASSERT_TRUE(store_->write_batch({.appends = {w}, .completions = {}})
                  .appends.at(0));
  }

  template <class T>
  static std::string enc(const T& x) {
    return persistence::encode(x);
  }

  test::database db_;
  std::unique_ptr<persistence::store> store_;
};

struct counters {
  std::atomic<int> a{0}, b{0}, c{0};
};

void register_abc(runtime& rt, counters& n) {
  rt.register_workflow("abc", [&n](workflow_context& ctx, int x) -> task<std::string> {
    auto a = co_await ctx.step("a", [&] { ++n.a; return x + 1; });
    std::string b;
    try {
      b = co_await ctx.step("b", [&] { ++n.b; return std::string{"live-b"}; });
    } catch (const terminal_error& ex) {
      b = std::string{"terminal:"} + ex.what();
    } catch (const step_failed& ex) {
      b = std::string{"failed:"} + ex.what();
    }
    auto c = co_await ctx.step("c", [&] { ++n.c; return 3; });
    co_return std::to_string(a) + "/" + b + "/" + std::to_string(c);
  });
}

} // namespace

TEST_F(recovery_test, replay_takes_recorded_results_and_runs_only_the_rest) {
  seed_run("r", "abc", enc(1));
  seed_entry("r", 0, "a", enc(100)); // recorded: not what the code computes
  seed_entry("r", 1, "b", enc(std::string{"recorded-b"}));
  counters n;
  runtime rt{cfg()};
  register_abc(rt, n);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<std::string>("r").get(10s), "100/recorded-b/3");
  EXPECT_EQ(n.a.load(), 0);
  EXPECT_EQ(n.b.load(), 0);
  EXPECT_EQ(n.c.load(), 1);
}

TEST_F(recovery_test, a_recorded_error_is_rethrown_identically_on_replay) {
  for (auto [o, expected] :
       {std::pair{persistence::outcome::terminal, "terminal:declined"},
        std::pair{persistence::outcome::failed, "failed:declined"}}) {
    auto id = std::string{"r-"} + std::to_string(static_cast<int>(o));
    seed_run(id, "abc", enc(1));
    seed_entry(id, 0, "a", enc(1));
    seed_entry(id, 1, "b", {}, o, "declined");
    counters n;
    runtime rt{cfg()};
    register_abc(rt, n);
    rt.start();
    EXPECT_EQ(rt.retrieve_workflow<std::string>(id).get(10s),
              std::string{"1/"} + expected + "/3");
    EXPECT_EQ(n.b.load(), 0) << "a step with a recorded error must not run";
  }
}

TEST_F(recovery_test, the_live_error_and_the_replayed_error_are_the_same) {
  // Run live until the end: b fails terminally.
  std::atomic<int> runs{0};
  auto make = [&](runtime& rt) {
    rt.register_workflow("w", [&](workflow_context& ctx) -> task<std::string> {
      try {
        co_await ctx.step("b", [&] {
          ++runs;
          throw terminal_error("no stock");
        });
      } catch (const std::exception& ex) {
        co_return std::string{typeid(ex).name()} + ":" + ex.what();
      }
      co_return "";
    });
  };
  std::string live;
  {
    runtime rt{cfg()};
    make(rt);
    rt.start();
    live = rt.start_workflow<std::string>("w", {.id = "w1"}).get(10s);
  }
  // Replay the same journal under another id by copying its entry.
  seed_run("w2", "w", "");
  auto entry = store_->load_journals({"w1"}).at(0);
  seed_entry("w2", 0, "b", entry.payload, entry.outcome, entry.error);
  runtime rt{cfg()};
  make(rt);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<std::string>("w2").get(10s), live);
  EXPECT_EQ(runs.load(), 1);
}

TEST_F(recovery_test, non_determinism_fails_that_run_with_a_clear_error) {
  seed_run("bad", "abc", enc(1));
  seed_entry("bad", 0, "reserve", enc(1)); // the code now calls "a"
  counters n;
  auto c = cfg();
  c.on_non_determinism = non_determinism_policy::fail; // see versions/
  runtime rt{c};
  register_abc(rt, n);
  rt.start();
  try {
    rt.retrieve_workflow<std::string>("bad").get(10s);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed);
    std::string what = ex.what();
    EXPECT_NE(what.find("non-determinism"), std::string::npos) << what;
    EXPECT_NE(what.find("'reserve'"), std::string::npos) << what;
  }
  EXPECT_EQ(n.a.load(), 0);
  // Other runs are untouched.
  EXPECT_EQ(rt.start_workflow<std::string>("abc", 1).get(10s), "2/live-b/3");
}

TEST_F(recovery_test, non_determinism_cannot_be_swallowed_by_user_code) {
  seed_run("sneaky", "swallow", "");
  seed_entry("sneaky", 0, "old-name", enc(1));
  std::atomic<int> later{0};
  auto c = cfg();
  c.on_non_determinism = non_determinism_policy::fail; // see versions/
  runtime rt{c};
  rt.register_workflow("swallow", [&](workflow_context& ctx) -> task<int> {
    try {
      co_await ctx.step("new-name", [] { return 1; });
    } catch (...) {
    }
    co_await ctx.step("after", [&] { return ++later; });
    co_return 0;
  });
  rt.start();
  EXPECT_THROW(rt.retrieve_workflow<int>("sneaky").get(10s), perdure::error);
  EXPECT_EQ(later.load(), 0) << "nothing may run after non-determinism";
  EXPECT_EQ(store_->load_journals({"sneaky"}).size(), 1u);
}

TEST_F(recovery_test, a_run_recovered_too_often_ends_retries_exceeded) {
  seed_run("loop", "abc", enc(1));
  test::sql_client sql{db_};
  sql.exec("UPDATE " + sql.table("runs") + " SET recovery_attempts = 3");
  auto c = cfg();
  c.max_recovery_attempts = 3;
  counters n;
  runtime rt{c};
  register_abc(rt, n);
  rt.start();
  auto h = rt.retrieve_workflow<std::string>("loop");
  try {
    h.get(10s);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::retries_exceeded) << ex.what();
  }
  EXPECT_EQ(h.status(), run_status::retries_exceeded);
  EXPECT_EQ(n.a.load(), 0);
}

TEST_F(recovery_test, undecodable_inputs_fail_only_that_run) {
  seed_run("garbage", "abc", "\x01\x02not an int");
  counters n;
  runtime rt{cfg()};
  register_abc(rt, n);
  rt.start();
  try {
    rt.retrieve_workflow<std::string>("garbage").get(10s);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed);
    EXPECT_NE(std::string{ex.what()}.find("decode"), std::string::npos)
      << ex.what();
  }
  EXPECT_EQ(rt.start_workflow<std::string>("abc", 5).get(10s), "6/live-b/3");
}

TEST_F(recovery_test, a_run_of_an_unregistered_workflow_stays_pending_for_one_that_knows_it) {
  seed_run("orphan", "renamed-away", enc(1));
  counters n;
  {
    runtime rt{cfg()};
    register_abc(rt, n);
    rt.start();
    EXPECT_EQ(rt.left_pending(), 1) << "reported as left for others";
    EXPECT_EQ(rt.start_workflow<std::string>("abc", 1).get(10s), "2/live-b/3");
    EXPECT_EQ(store_->get_run("orphan")->status, run_status::pending)
      << "never ERROR for lacking a registration";
  }
  // A process that knows the workflow runs it.
  runtime rt{cfg()};
  rt.register_workflow("renamed-away", [](workflow_context&, int x) -> task<int> {
    co_return x * 10;
  });
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<int>("orphan").get(10s), 10);
  EXPECT_EQ(rt.left_pending(), 0);
}

TEST_F(recovery_test, runs_of_other_executors_are_left_alone) {
  persistence::run_record r;
  r.id = "theirs";
  r.name = "abc";
  r.inputs = enc(1);
  r.owner = {"someone-else", 1};
  store_->create_run(r);
  counters n;
  runtime rt{cfg()};
  register_abc(rt, n);
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("abc", 1).get(10s), "2/live-b/3");
  EXPECT_EQ(store_->get_run("theirs")->status, run_status::pending);
  EXPECT_EQ(n.a.load(), 1);
}

TEST_F(recovery_test, a_stopped_runtime_keeps_a_step_that_finishes_while_stopping) {
  std::atomic<int> first{0}, second{0};
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  bool block = true;
  auto define = [&](runtime& rt) {
    rt.register_workflow("two", [&](workflow_context& ctx) -> task<int> {
      auto x = co_await ctx.step("first", [&] { return ++first; });
      auto y = co_await ctx.step("second", [&] {
        if (block && ++second == 1) {
          entered.set_value();
          released.wait();
        } else if (!block) {
          ++second;
        }
        return 10;
      });
      co_return x + y;
    });
  };
  {
    runtime rt{cfg()};
    define(rt);
    rt.start();
    rt.start_workflow<int>("two", {.id = "t"});
    entered.get_future().wait();
    // stop() ends the actors, then waits for step code still running.
    auto stopper = std::async(std::launch::async, [&] { rt.stop(); });
    std::this_thread::sleep_for(50ms);
    release.set_value();
    stopper.get();
  }
  EXPECT_EQ(store_->get_run("t")->status, run_status::pending);
  EXPECT_EQ(store_->load_journals({"t"}).size(), 2u);
  block = false;
  runtime rt{cfg()};
  define(rt);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<int>("t").get(10s), 11);
  EXPECT_EQ(first.load(), 1) << "a checkpointed step ran again";
  // stop() waits for step code still running and checkpoints what it
  // returns (the run is still ours), so nothing runs twice. A SIGKILL
  // re-runs the step in flight instead: tests/crash.
  EXPECT_EQ(second.load(), 1) << "the finished step ran again";
}

TEST_F(recovery_test, a_zombie_owner_is_fenced_and_cannot_record_a_step) {
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> zombie_steps{0}, live_steps{0};
  if (!db_.postgres)
    GTEST_SKIP() << "SQLite runs one runtime per file";
  runtime zombie{cfg("zombie")};
  zombie.register_workflow("pay", [&](workflow_context& ctx) -> task<std::string> {
    co_return co_await ctx.step("charge", [&] {
      ++zombie_steps;
      entered.set_value();
      released.wait();
      return std::string{"zombie"};
    });
  });
  zombie.start();
  zombie.start_workflow<std::string>("pay", {.id = "p"});
  entered.get_future().wait();
  // The zombie stalls past its lease: another process declares it lapsed
  // (by hand here, as a heartbeat would) and takes its run over.
  test::sql_client sql{db_};
  sql.exec("UPDATE " + sql.table("executors")
           + " SET epoch = epoch + 1, state = 'lapsed' WHERE id = 'zombie'");
  // A takeover holds the lapsed row FOR SHARE while it runs: the zombie,
  // not really stalled, cannot take its lease back before live started.
  std::thread takeover_lock{[this] {
    test::sql_client hold{db_};
    hold.exec("SELECT pg_sleep(2) FROM (SELECT id FROM "
              + hold.table("executors") + " WHERE id = 'zombie' FOR SHARE) x");
  }};
  runtime live{cfg("live")};
  live.register_workflow("pay", [&](workflow_context& ctx) -> task<std::string> {
    co_return co_await ctx.step("charge", [&] {
      ++live_steps;
      return std::string{"live"};
    });
  });
  live.start();
  takeover_lock.join();
  EXPECT_EQ(live.retrieve_workflow<std::string>("p").get(10s), "live");
  // The zombie's step finishes now; its checkpoint must be rejected.
  release.set_value();
  std::this_thread::sleep_for(300ms);
  zombie.stop();
  auto journal = store_->load_journals({"p"});
  ASSERT_EQ(journal.size(), 1u);
  EXPECT_EQ(persistence::decode<std::string>(journal[0].payload), "live");
  EXPECT_EQ(store_->get_run("p")->output, persistence::encode(std::string{"live"}));
  EXPECT_EQ(zombie_steps.load(), 1);
  EXPECT_EQ(live_steps.load(), 1);
}
