// Retention on the store under test, with a manual clock: nothing goes
// without a policy; ended runs past theirs are collected with everything
// that hangs off them, their ids kept as tombstones (a start under one
// returns the collected run, whose result says so) until those expire;
// live work -- a running run, a root whose child still runs, a queued
// item -- is never touched; children go with their root; the archive sees
// each run first (and a failing archive keeps it); one collector at a time.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/retention/collector.hpp"
#include "perdure/testing/manual_clock.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
namespace ret = perdure::retention;

namespace {

task<std::string> greet(workflow_context& ctx, std::string who) {
  auto s = co_await ctx.step("hello", [&] { return "hello " + who; });
  co_await ctx.set_event("greeted", s);
  co_return s;
}

task<int> fail(workflow_context& ctx, int n) {
  co_await ctx.step("try", [n] { return n; });
  throw terminal_error("declined");
}

task<int> leaf(workflow_context& ctx, int n) {
  co_return co_await ctx.step("double", [n] { return 2 * n; });
}

task<int> parent(workflow_context& ctx, int n) {
  auto child = co_await ctx.start_child<int>("leaf", n);
  co_return co_await child;
}

task<int> waiter(workflow_context& ctx, int n) {
  co_await ctx.step("ready", [n] { return n; });
  co_return co_await ctx.recv<int>("go");
}

/// Starts a child that waits, and ends without it.
task<int> leaves_early(workflow_context& ctx, int) {
  co_await ctx.start_child<int>("waiter", 0);
  co_return 1;
}

/// Runs a child that itself leaves a grandchild waiting.
task<int> grandparent(workflow_context& ctx, int) {
  auto child = co_await ctx.start_child<int>("leaves_early", 0);
  co_return co_await child;
}

class retention_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    clock_ = std::make_shared<perdure::testing::manual_clock>(
      std::chrono::system_clock::time_point{std::chrono::hours{24 * 20000}});
  }

  config cfg(std::string executor = "local") {
    auto c = db_.runtime_config(std::move(executor));
    c.clock = clock_;
    return c;
  }

  static void register_all(runtime& rt) {
    rt.register_workflow("greet", greet);
    rt.register_workflow("fail", fail);
    rt.register_workflow("leaf", leaf);
    rt.register_workflow("parent", parent);
    rt.register_workflow("waiter", waiter);
    rt.register_workflow("leaves_early", leaves_early);
    rt.register_workflow("grandparent", grandparent);
  }

  /// A collector whose loop never runs by itself (the test drives it).
  static ret::collector_options driven() {
    ret::collector_options o;
    o.interval = 1h;
    o.duty = 1.0;
    return o;
  }

  std::int64_t count(const std::string& table, const std::string& where,
                     const std::vector<sql_param>& params = {}) {
    test::sql_client sql{db_};
    return std::stoll(sql.scalar("SELECT COUNT(*) FROM " + sql.table(table)
                                   + " WHERE " + where,
                                 params));
  }

  bool collected(const std::string& id) {
    return count("runs", "id = $1 AND collected_at IS NOT NULL", {id}) == 1;
  }

  bool exists(const std::string& id) {
    return count("runs", "id = $1", {id}) == 1;
  }

  /// Rows anything keeps for run `id` besides its own.
  std::int64_t dependents(const std::string& id) {
    std::int64_t n = 0;
    for (auto t : {"journal", "messages", "events", "resolutions", "run_events"})
      n += count(t, "run_id = $1", {id});
    return n;
  }

  test::database db_;
  std::shared_ptr<perdure::testing::manual_clock> clock_;
};

ret::policies keep_succeeded(std::chrono::milliseconds run,
                             std::chrono::milliseconds tombstone) {
  ret::policies p;
  p.all = ret::policy{};
  p.all->succeeded = ret::keep{run, tombstone};
  return p;
}

TEST_F(retention_test, nothing_is_collected_without_a_policy) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto h = rt.start_workflow<std::string>("greet", std::string{"ann"},
                                          {.id = "g1"});
  EXPECT_EQ(h.get(20s), "hello ann");
  clock_->advance(24h * 3650);
  ret::collector gc{rt, {}, driven()};
  auto r = gc.collect_now();
  EXPECT_TRUE(r.had_turn);
  EXPECT_EQ(r.collected + r.expired, 0);
  EXPECT_FALSE(collected("g1"));
  EXPECT_GT(dependents("g1"), 0);
}

TEST_F(retention_test, a_collected_run_keeps_its_id_until_its_tombstone_expires) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("greet", std::string{"ann"},
                                           {.id = "g1"})
              .get(20s),
            "hello ann");
  rt.send("g1", "late", 1); // a message to an ended run: goes with it
  EXPECT_THROW(rt.start_workflow<int>("fail", 7, {.id = "f1"}).get(20s),
               perdure::error);
  ASSERT_GT(dependents("g1"), 0);
  ret::collector gc{rt, keep_succeeded(1h, 24h), driven()};

  // Younger than its policy: kept.
  clock_->advance(59min);
  EXPECT_EQ(gc.collect_now().collected, 0);
  EXPECT_FALSE(collected("g1"));

  clock_->advance(2min);
  auto r = gc.collect_now();
  EXPECT_EQ(r.collected, 1);
  EXPECT_TRUE(collected("g1"));
  EXPECT_EQ(dependents("g1"), 0);
  EXPECT_EQ(count("runs", "id = 'g1' AND output IS NULL AND status = "
                          "'SUCCESS'"),
            1);
  // The operators' view says when (and that the inputs are gone).
  EXPECT_EQ(count("v_runs", "id = 'g1' AND collected_at IS NOT NULL AND "
                            "inputs IS NULL"),
            1);
  EXPECT_EQ(count("v_runs", "id = 'f1' AND collected_at IS NULL"), 1);
  // Failed runs have no policy: kept whole.
  EXPECT_FALSE(collected("f1"));
  EXPECT_GT(dependents("f1"), 0);

  // The id answers "already ran": the start returns the collected run,
  // whose result is gone (other inputs too: they are not kept to compare).
  for (auto who : {"ann", "bob"}) {
    auto again = rt.start_workflow<std::string>("greet", std::string{who},
                                                {.id = "g1"});
    try {
      again.get(20s);
      ADD_FAILURE() << "a collected run's result";
    } catch (const perdure::error& e) {
      EXPECT_EQ(e.code(), errc::collected) << e.what();
    }
  }
  EXPECT_EQ(count("runs", "id = 'g1'"), 1);
  EXPECT_EQ(dependents("g1"), 0); // nothing ran again
  // Another workflow under its id is still a conflict.
  EXPECT_THROW(rt.start_workflow<int>("fail", 1, {.id = "g1"}),
               perdure::error);
  try {
    rt.resume("g1");
    ADD_FAILURE() << "resumed a collected run";
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::collected) << e.what();
  }
  EXPECT_THROW(rt.send("g1", "late", 2), perdure::error);
  // The collector's totals, in the database for every process to see.
  EXPECT_EQ(count("retention_state", "runs_collected = 1 AND ids_expired = 0"),
            1);

  // The tombstone expires a day later: the id is free, a start runs anew.
  clock_->advance(23h);
  EXPECT_EQ(gc.collect_now().expired, 0);
  clock_->advance(2h);
  EXPECT_EQ(gc.collect_now().expired, 1);
  EXPECT_FALSE(exists("g1"));
  EXPECT_EQ(count("retention_state", "runs_collected = 1 AND ids_expired = 1"),
            1);
  EXPECT_EQ(rt.start_workflow<std::string>("greet", std::string{"cy"},
                                           {.id = "g1"})
              .get(20s),
            "hello cy");
}

TEST_F(retention_test, live_work_is_never_touched) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto w = rt.start_workflow<int>("waiter", 0, {.id = "w1"});
  EXPECT_EQ(rt.start_workflow<int>("leaves_early", 0, {.id = "e1"}).get(20s), 1);
  // A parent that ended and a child that still waits: the parent's tree is
  // not done.
  ASSERT_TRUE(
    test::eventually([&] { return count("runs", "parent_id = 'e1'") == 1; }));
  ASSERT_TRUE(test::eventually([&] { return dependents("w1") > 0; }));
  ret::policies all;
  // Tombstones kept longer than e1 has been over (a year, below).
  all.all = ret::policy{ret::keep{0ms, 500 * 24h}, ret::keep{0ms, 500 * 24h},
                        ret::keep{0ms, 500 * 24h}};
  ret::collector gc{rt, all, driven()};
  clock_->advance(24h * 365);
  EXPECT_EQ(gc.collect_now().rows, 0);
  EXPECT_FALSE(collected("w1"));
  EXPECT_FALSE(collected("e1"));
  EXPECT_GT(dependents("w1"), 0);
  EXPECT_GT(dependents("e1"), 0);
  EXPECT_EQ(count("runs", "parent_id = 'e1' AND collected_at IS NULL"), 1);

  // Once the child ends (it is told to), the whole tree goes.
  auto child = test::sql_client{db_}.scalar(
    "SELECT id FROM " + test::sql_client{db_}.table("runs")
    + " WHERE parent_id = 'e1'");
  rt.send(child, "go", 5);
  EXPECT_EQ(rt.retrieve_workflow<int>(child).get(20s), 5);
  rt.send("w1", "go", 6);
  EXPECT_EQ(w.get(20s), 6);
  clock_->advance(1s); // they ended at the clock's now: past it now
  auto r = gc.collect_now();
  EXPECT_EQ(r.collected, 2); // e1 (with its child) and w1
  EXPECT_EQ(r.rows, 3);
  EXPECT_TRUE(collected("e1"));
  EXPECT_TRUE(collected(child));
  EXPECT_EQ(dependents(child), 0);
  // The tombstones expire together, the child's with its root's.
  clock_->advance(501 * 24h);
  r = gc.collect_now();
  EXPECT_EQ(r.expired, 3);
  EXPECT_FALSE(exists("e1"));
  EXPECT_FALSE(exists(child));
  EXPECT_FALSE(exists("w1"));
}

TEST_F(retention_test, a_grandchild_still_going_holds_the_whole_tree) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  EXPECT_EQ(rt.start_workflow<int>("grandparent", 0, {.id = "g0"}).get(20s), 1);
  // g0 and its child ended; the grandchild waits.
  std::string grandchild;
  ASSERT_TRUE(test::eventually([&] {
    test::sql_client sql{db_};
    grandchild = sql.scalar("SELECT COALESCE(MIN(id), '') FROM "
                            + sql.table("runs") + " WHERE parent_id IN "
                              "(SELECT id FROM " + sql.table("runs")
                            + " WHERE parent_id = 'g0')");
    return !grandchild.empty() && dependents(grandchild) > 0;
  }));
  ret::collector gc{rt, keep_succeeded(0ms, 24h), driven()};
  clock_->advance(1h);
  EXPECT_EQ(gc.collect_now().rows, 0);
  EXPECT_EQ(count("runs", "id LIKE 'g0%' AND collected_at IS NOT NULL"), 0);
  EXPECT_GT(dependents("g0"), 0);
  rt.send(grandchild, "go", 1);
  EXPECT_EQ(rt.retrieve_workflow<int>(grandchild).get(20s), 1);
  clock_->advance(1s);
  auto r = gc.collect_now();
  EXPECT_EQ(r.collected, 1);
  EXPECT_EQ(r.rows, 3);
  EXPECT_EQ(count("runs", "id LIKE 'g0%' AND collected_at IS NULL"), 0);
  EXPECT_EQ(dependents(grandchild), 0);
}

TEST_F(retention_test, a_child_goes_with_its_root_under_the_roots_policy) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  EXPECT_EQ(rt.start_workflow<int>("parent", 4, {.id = "p1"}).get(20s), 8);
  EXPECT_EQ(count("runs", "parent_id = 'p1'"), 1);
  // A policy for the child's workflow alone collects nothing: the child
  // is its root's.
  ret::policies only_leaf;
  only_leaf.workflows["leaf"].succeeded = ret::keep{0ms, 0ms};
  clock_->advance(24h);
  {
    ret::collector gc{rt, only_leaf, driven()};
    EXPECT_EQ(gc.collect_now().rows, 0);
  }
  EXPECT_EQ(count("runs", "parent_id = 'p1' AND collected_at IS NULL"), 1);
  // The root's policy takes both.
  ret::policies by_root;
  by_root.workflows["parent"].succeeded = ret::keep{1h, 48h};
  ret::collector gc{rt, by_root, driven()};
  auto r = gc.collect_now();
  EXPECT_EQ(r.collected, 1);
  EXPECT_EQ(r.rows, 2);
  EXPECT_EQ(count("runs", "parent_id = 'p1' AND collected_at IS NOT NULL"), 1);
  EXPECT_EQ(count("journal", "run_id LIKE 'p1%'"), 0);
  clock_->advance(48h);
  EXPECT_EQ(gc.collect_now().expired, 2);
  EXPECT_EQ(count("runs", "id LIKE 'p1%'"), 0);
}

TEST_F(retention_test, the_archive_sees_each_run_before_it_goes) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  for (auto id : {"a1", "a2", "a3"})
    rt.start_workflow<std::string>("greet", std::string{id}, {.id = id})
      .get(20s);
  auto opts = driven();
  std::vector<ret::archived_run> seen;
  bool refuse_a2 = true;
  opts.archive = [&](const ret::archived_run& a) {
    if (a.id == "a2" && refuse_a2)
      throw std::runtime_error("bucket unavailable");
    // Still whole while the archive has it.
    EXPECT_GT(dependents(a.id), 0);
    seen.push_back(a);
  };
  ret::collector gc{rt, keep_succeeded(0ms, 24h), opts};
  clock_->advance(1min);
  auto r = gc.collect_now();
  // In (end, id) order: a1 archived and collected; a2 refused, so a2 and what
  // follows wait for the next pass.
  EXPECT_EQ(r.archive_failures, 1);
  EXPECT_EQ(r.collected, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].id, "a1");
  EXPECT_EQ(seen[0].workflow, "greet");
  EXPECT_EQ(seen[0].status, "SUCCESS");
  ASSERT_TRUE(seen[0].output);
  EXPECT_EQ(persistence::decode<std::string>(*seen[0].output), "hello a1");
  EXPECT_NE(seen[0].export_json.find("hello"), std::string::npos);
  EXPECT_FALSE(collected("a2"));
  EXPECT_FALSE(collected("a3"));
  refuse_a2 = false;
  r = gc.collect_now();
  EXPECT_EQ(r.collected, 2);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(collected("a2") && collected("a3"));
}

TEST_F(retention_test, one_collector_has_the_turn_at_a_time) {
  runtime a{cfg("a")};
  register_all(a);
  a.start();
  client b{cfg("b")}; // a client: SQLite has one runtime per file
  a.start_workflow<std::string>("greet", std::string{"x"}, {.id = "t1"})
    .get(20s);
  auto first = std::make_unique<ret::collector>(a, keep_succeeded(1h, 24h),
                                                driven());
  ret::collector second{b, keep_succeeded(1h, 24h), driven()};
  EXPECT_TRUE(first->collect_now().had_turn);
  EXPECT_FALSE(second.collect_now().had_turn);
  // A collector gone gives the turn back at once.
  first.reset();
  clock_->advance(2h);
  auto r = second.collect_now();
  EXPECT_TRUE(r.had_turn);
  EXPECT_EQ(r.collected, 1);
}

TEST_F(retention_test, a_dead_collectors_turn_runs_out) {
  runtime a{cfg("a")};
  register_all(a);
  a.start();
  ret::collector second{a, keep_succeeded(1h, 24h), driven()};
  // A holder that never gives it back (killed), its turn until +30 s.
  test::sql_client sql{db_};
  auto now = clock_->now_ms();
  sql.exec("UPDATE " + sql.table("retention_state")
             + " SET holder = 'gone', held_until = $1",
           {std::int64_t{now + 30000}});
  EXPECT_FALSE(second.collect_now().had_turn);
  clock_->advance(31s);
  EXPECT_TRUE(second.collect_now().had_turn);
}

TEST_F(retention_test, a_workflows_own_policy_replaces_the_default) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  rt.start_workflow<std::string>("greet", std::string{"x"}, {.id = "g"})
    .get(20s);
  EXPECT_THROW(rt.start_workflow<int>("fail", 1, {.id = "f"}).get(20s),
               perdure::error);
  ret::policies p;
  p.all = ret::policy{};
  p.all->succeeded = ret::keep{1h, 0ms};
  p.all->failed = ret::keep{1h, 0ms};
  p.workflows["fail"].failed = ret::keep{30 * 24h, 0ms};
  ret::collector gc{rt, p, driven()};
  clock_->advance(2h);
  gc.collect_now();
  EXPECT_FALSE(exists("g"));
  EXPECT_TRUE(exists("f"));
  EXPECT_FALSE(collected("f"));
  clock_->advance(30 * 24h);
  gc.collect_now();
  EXPECT_FALSE(exists("f"));
}

TEST_F(retention_test, bulk_actions_pass_over_tombstones) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  for (auto id : {"f1", "f2"})
    EXPECT_THROW(rt.start_workflow<int>("fail", 1, {.id = id}).get(20s),
                 perdure::error);
  ret::policies p;
  p.workflows["fail"].failed = ret::keep{1h, 24h};
  ret::collector gc{rt, p, driven()};
  clock_->advance(2h);
  EXPECT_THROW(rt.start_workflow<int>("fail", 1, {.id = "f3"}).get(20s),
               perdure::error);
  EXPECT_EQ(gc.collect_now().collected, 2);

  // The listing says which runs are tombstones.
  run_filter failed;
  failed.name = "fail";
  auto page = rt.list_runs(failed);
  ASSERT_EQ(page.runs.size(), 3u);
  for (auto& run : page.runs)
    EXPECT_EQ(run.collected_at.has_value(), run.id != "f3") << run.id;
  EXPECT_TRUE(rt.describe("f1").info.collected_at.has_value());

  // Resume and fork by filter, dry or not, take the run that is whole.
  for (bool dry : {true, false}) {
    auto resumed = rt.resume_matching(failed, {}, dry);
    EXPECT_EQ(resumed.matched, 1) << dry;
    EXPECT_EQ(resumed.sample, std::vector<std::string>{"f3"});
    EXPECT_TRUE(resumed.refused.empty());
  }
  auto forked = rt.fork_matching(failed, {}, true);
  EXPECT_EQ(forked.matched, 1);
}

// Retention's SQL states "ended" as its indexes do (three inequalities);
// a status added without it would be collected while it runs, or never.
TEST_F(retention_test, the_sql_meaning_of_ended_is_is_terminal) {
  { runtime rt{cfg()}; rt.start(); } // migrates
  test::sql_client sql{db_};
  namespace d = perdure::persistence::detail;
  for (int i = 0; i <= static_cast<int>(run_status::blocked); ++i) {
    auto s = static_cast<run_status>(i);
    if (s == run_status::compensating) // stored as PENDING
      continue;
    std::string text{to_string(s)};
    auto row = "(SELECT '" + text + "' AS status) x";
    EXPECT_EQ(sql.scalar("SELECT CASE WHEN " + std::string{d::ended_condition}
                         + " THEN 1 ELSE 0 END FROM " + row),
              is_terminal(s) ? "1" : "0")
      << text;
    EXPECT_EQ(sql.scalar("SELECT CASE WHEN status IN " + std::string{
                           d::ended_statuses} + " THEN 1 ELSE 0 END FROM "
                         + row),
              is_terminal(s) ? "1" : "0")
      << text;
  }
}

TEST_F(retention_test, bad_options_are_refused_with_what_to_do) {
  runtime rt{cfg()};
  rt.start();
  auto p = keep_succeeded(-1h, 0ms);
  try {
    ret::collector gc{rt, p, driven()};
    ADD_FAILURE();
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string{e.what()}.find("unset"), std::string::npos);
  }
  auto o = driven();
  o.duty = 0;
  EXPECT_THROW((ret::collector{rt, {}, o}), perdure::error);
}

} // namespace
