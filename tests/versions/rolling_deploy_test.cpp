// A rolling deploy of a patched workflow: three processes of old code,
// replaced one by one by new code while 200 or more runs are in flight, the first
// new one SIGKILLed mid-roll next to two old ones. Every run succeeds; runs that booked before
// the deploy keep the old branch; none that took the patch is run on by a
// process whose code lacks it; forks made during the takeover run once
// (PostgreSQL: several processes).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class rolling_deploy_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    if (!db_.postgres)
      GTEST_SKIP() << "SQLite runs one runtime per file";
    sql_ = std::make_unique<test::sql_client>(db_);
    client{db_.runtime_config("setup")};
    sql_->exec("CREATE TABLE " + sql_->table("step_log")
               + " (run_id TEXT, step TEXT, code TEXT, pid BIGINT)");
  }

  std::unique_ptr<test::child_process> worker(const std::string& executor,
                                              const std::string& code) {
    auto w = std::make_unique<test::child_process>(std::vector<std::string>{
      PERDURE_DEPLOY_WORKER, db_.url, db_.schema, executor, code});
    EXPECT_TRUE(w->wait_for("READY", 20s)) << w->output();
    return w;
  }

  std::int64_t count(const std::string& where) {
    return std::stoll(sql_->scalar("SELECT COUNT(*) FROM "
                                   + sql_->table("step_log") + " WHERE "
                                   + where));
  }

  test::database db_;
  std::unique_ptr<test::sql_client> sql_;
};

TEST_F(rolling_deploy_test, runs_in_flight_survive_a_rolling_deploy_with_a_kill) {
  auto p1 = worker("p1", "old");
  auto p2 = worker("p2", "old");
  auto p3 = worker("p3", "old");
  client c{db_.runtime_config("web")};
  std::vector<workflow_handle<std::string>> runs;
  auto start = [&](int n) {
    runs.push_back(c.start_workflow<std::string>(
      "ship", {.id = "s" + std::to_string(n)}));
  };
  for (int n = 0; n < 120; ++n)
    start(n);
  ASSERT_TRUE(test::eventually([&] { return count("step = 'book-old'") > 0; },
                               20s))
    << "no run booked under old code: the test is void";
  // The roll: p1 stopped and replaced by new code; that new process
  // killed while holding runs that took the patch, next to two processes
  // of old code (which must leave those runs to new code); p2 and p3
  // stopped and replaced. More runs start meanwhile.
  p1->signal(SIGTERM);
  EXPECT_TRUE(p1->wait_for("STOPPED", 20s)) << p1->output();
  auto n1 = worker("n1", "new");
  int next = 120;
  auto on_n1 = [&](bool patched) {
    return std::stoll(sql_->scalar(
      "SELECT COUNT(*) FROM " + sql_->table("runs")
      + " r WHERE r.executor = 'n1' AND r.status = 'PENDING' AND "
      + (patched ? "" : "NOT ") + "EXISTS (SELECT 1 FROM "
      + sql_->table("journal")
      + " j WHERE j.run_id = r.id AND j.kind = 'patch')"));
  };
  auto patched_on_n1 = [&] { return on_n1(true); };
  // Every process races to adopt each new run, and a process just
  // started loses races to warm ones (its connections and statements are
  // new): runs keep starting, a few at a time, until n1 holds one that
  // took the patch.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (patched_on_n1() == 0 && std::chrono::steady_clock::now() < deadline) {
    for (int k = 0; k < 5 && next < 400; ++k)
      start(next++);
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_GT(patched_on_n1(), 0)
    << "n1 holds no run that took the patch after " << next - 120
    << " starts: the test is void";
  auto killed_pid = std::to_string(n1->pid());
  n1->sigkill();
  // Forks made while n1's runs wait to be taken over: each runs once.
  std::vector<std::string> forks;
  for (int n = 0; n < 10; ++n)
    forks.push_back(c.fork("s" + std::to_string(n),
                           {.from_step = 0, .reason = "during a takeover"}));
  // The old processes take over what n1 held that old code can run, and
  // leave the runs that took the patch.
  auto held = patched_on_n1();
  ASSERT_TRUE(test::eventually(
    [&] {
      return sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("executors")
                          + " WHERE id = 'n1' AND state = 'live'")
               == "0"
             && on_n1(false) == 0;
    },
    20s))
    << "n1's runs were not taken over";
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(patched_on_n1(), held)
    << "a process of old code took over a run that took the patch";
  auto n2 = worker("n2", "new");
  p2->signal(SIGTERM);
  EXPECT_TRUE(p2->wait_for("STOPPED", 20s)) << p2->output();
  auto n3 = worker("n3", "new");
  for (int n = 0; n < 40; ++n)
    start(next++);
  std::this_thread::sleep_for(200ms);
  p3->signal(SIGTERM);
  EXPECT_TRUE(p3->wait_for("STOPPED", 20s)) << p3->output();
  auto n4 = worker("n4", "new");
  int old_branch = 0, new_branch = 0;
  for (auto& h : runs) {
    auto how = h.get(90s);
    (how == "new" ? new_branch : old_branch) += 1;
    EXPECT_EQ(h.status(), run_status::success) << h.id();
  }
  EXPECT_GT(old_branch, 0) << "no run kept the old branch: the test is void";
  EXPECT_GT(new_branch, 0) << "no run took the patch: the test is void";
  for (auto& id : forks) {
    auto how = c.retrieve_workflow<std::string>(id).get(90s);
    auto run = "run_id = '" + id + "'";
    EXPECT_EQ(count(run + " AND step = 'reserve'"), 1) << id;
    EXPECT_EQ(count(run + " AND step = 'book-" + how + "'"), 1) << id;
    EXPECT_EQ(count(run + " AND step = 'notify'"), 1) << id;
  }
  // What each run returned matches what it booked, once; the killed
  // process may have run a step whose result it never recorded (at least
  // once), and that only.
  for (auto& h : runs) {
    auto how = h.get(1s);
    auto id = "run_id = '" + h.id() + "'";
    auto live = id + " AND pid <> " + killed_pid;
    EXPECT_GE(count(id + " AND step = 'book-" + how + "'"), 1) << h.id();
    EXPECT_LE(count(live + " AND step = 'book-" + how + "'"), 1) << h.id();
    EXPECT_EQ(count(live + " AND step LIKE 'book-%' AND step <> 'book-" + how
                    + "'"),
              0)
      << h.id() << " booked on both branches";
  }
  // After a run took the patch, only new code ran its steps: an old
  // process never claimed it.
  EXPECT_EQ(count("code = 'old' AND run_id IN (SELECT run_id FROM "
                  + sql_->table("journal") + " WHERE kind = 'patch')"
                  + " AND step <> 'reserve'"),
            0);
  EXPECT_EQ(std::stoll(sql_->scalar("SELECT COUNT(*) FROM "
                                    + sql_->table("runs")
                                    + " WHERE status <> 'SUCCESS'")),
            0);
  std::cout << "[ measured ] rolling deploy: " << old_branch
            << " runs kept the old branch, " << new_branch
            << " took the patch\n";
}

} // namespace
