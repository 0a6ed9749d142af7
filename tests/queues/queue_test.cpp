// Queues as users use them, on the store under test: every limit held
// (probe counters), priority and partition order, dedup, delays, the rate
// limit by actual start time, retries to the dead letters and back, and
// an enqueue that joins a transaction.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pqxx/pqxx>
#include <sqlite3.h>

#include "perdure/perdure.hpp"
#include "perdure/pqxx_session.hpp"
#include "perdure/sqlite_session.hpp"
#include "perdure/queues/queue.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

/// How many run at once, at most, overall and per key.
class probe {
public:
  void enter(const std::string& key) {
    std::lock_guard guard{mtx_};
    max_ = std::max(max_, ++now_);
    by_key_max_[key] = std::max(by_key_max_[key], ++by_key_[key]);
    starts_.push_back({key, test::wall_ms()});
  }

  void leave(const std::string& key) {
    std::lock_guard guard{mtx_};
    --now_;
    --by_key_[key];
  }

  int max() const {
    std::lock_guard guard{mtx_};
    return max_;
  }

  int max_of(const std::string& key) const {
    std::lock_guard guard{mtx_};
    auto i = by_key_max_.find(key);
    return i == by_key_max_.end() ? 0 : i->second;
  }

  /// (key, wall ms) of every start, in start order.
  std::vector<std::pair<std::string, std::int64_t>> starts() const {
    std::lock_guard guard{mtx_};
    return starts_;
  }

private:
  mutable std::mutex mtx_;
  int now_ = 0;
  int max_ = 0;
  std::map<std::string, int> by_key_;
  std::map<std::string, int> by_key_max_;
  std::vector<std::pair<std::string, std::int64_t>> starts_;
};

class queue_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// Registers "work": enters the probe under `key` (the item started),
  /// holds for `hold_ms` in a step, leaves; returns the key. The probe
  /// counts items started and not ended, whichever thread runs their steps.
  void register_work(runtime& rt) {
    rt.register_workflow(
      "work", [this](workflow_context& ctx, std::pair<std::string, int> in)
                -> task<std::string> {
        probe_.enter(in.first);
        co_await ctx.step("hold", [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds{in.second});
          return 0;
        });
        probe_.leave(in.first);
        co_return in.first;
      });
  }

  test::database db_;
  probe probe_;
};

using item = std::pair<std::string, int>;

TEST_F(queue_test, items_run_once_and_their_handles_return_results) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "q", {.worker_concurrency = 4});
  rt.start();
  client c{db_.runtime_config("web")};
  std::vector<workflow_handle<std::string>> handles;
  for (int n = 0; n < 40; ++n)
    handles.push_back(queues::enqueue<std::string>(
      n % 2 == 0 ? static_cast<client&>(rt) : c, "q", "work",
      item{"k" + std::to_string(n), 1}));
  for (int n = 0; n < 40; ++n)
    EXPECT_EQ(handles[n].get(30s), "k" + std::to_string(n));
  EXPECT_EQ(probe_.starts().size(), 40u) << "each item's step ran once";
  auto stats = queues::stats(rt, "q");
  EXPECT_EQ(stats.total.ready + stats.total.running + stats.total.delayed, 0);
}

TEST_F(queue_test, global_and_worker_concurrency_are_never_exceeded) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "three", {.concurrency = 3,
                                       .worker_concurrency = 8});
  queues::register_queue(rt, "two", {.worker_concurrency = 2});
  rt.start();
  std::vector<workflow_handle<std::string>> handles;
  for (int n = 0; n < 24; ++n) {
    handles.push_back(
      queues::enqueue<std::string>(rt, "three", "work", item{"three", 30}));
    handles.push_back(
      queues::enqueue<std::string>(rt, "two", "work", item{"two", 30}));
  }
  for (auto& h : handles)
    h.get(60s);
  EXPECT_LE(probe_.max_of("three"), 3) << "the queue's concurrency";
  EXPECT_EQ(probe_.max_of("three"), 3) << "and it was used";
  EXPECT_LE(probe_.max_of("two"), 2) << "this process's workers";
  EXPECT_EQ(probe_.max_of("two"), 2);
}

TEST_F(queue_test, partitions_keep_their_limit_and_take_turns) {
  {
    // Enqueued before any runtime runs: a busy partition first.
    client c{db_.runtime_config("web")};
    for (int n = 0; n < 12; ++n)
      queues::enqueue<std::string>(c, "p", "work", item{"busy", 20},
                                   {.partition_key = "busy"});
    for (auto key : {"b", "c"})
      for (int n = 0; n < 2; ++n)
        queues::enqueue<std::string>(c, "p", "work", item{key, 20},
                                     {.partition_key = key});
  }
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "p", {.worker_concurrency = 4,
                                   .partition_concurrency = 1});
  rt.start();
  ASSERT_TRUE(test::eventually([&] { return probe_.starts().size() == 16; },
                               30s));
  for (auto key : {"busy", "b", "c"})
    EXPECT_EQ(probe_.max_of(key), 1) << key;
  // The small partitions were not kept waiting behind the busy one.
  auto starts = probe_.starts();
  std::size_t last_small = 0;
  for (std::size_t i = 0; i < starts.size(); ++i)
    if (starts[i].first != "busy")
      last_small = i;
  EXPECT_LT(last_small, 8u) << "b and c waited behind 'busy'";
}

TEST_F(queue_test, items_start_by_priority_then_age) {
  {
    client c{db_.runtime_config("web")};
    std::vector<int> priorities{5, 1, 3, 1, 0, 5, 3};
    for (std::size_t n = 0; n < priorities.size(); ++n)
      queues::enqueue<std::string>(
        c, "one", "work",
        item{std::to_string(priorities[n]) + "/" + std::to_string(n), 1},
        {.priority = priorities[n]});
  }
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "one", {.worker_concurrency = 1});
  rt.start();
  ASSERT_TRUE(test::eventually([&] { return probe_.starts().size() == 7; }));
  std::vector<std::string> order;
  for (auto& [key, at] : probe_.starts())
    order.push_back(key);
  EXPECT_EQ(order, (std::vector<std::string>{"0/4", "1/1", "1/3", "3/2", "3/6",
                                             "5/0", "5/5"}));
}

TEST_F(queue_test, a_dedup_id_returns_the_item_queued_or_running) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "d");
  rt.start();
  auto first = queues::enqueue<std::string>(rt, "d", "work", item{"a", 300},
                                            {.dedup_id = "order-7"});
  auto again = queues::enqueue<std::string>(rt, "d", "work", item{"b", 1},
                                            {.dedup_id = "order-7"});
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(again.get(30s), "a");
  // Ended: the dedup id is free again.
  auto later = queues::enqueue<std::string>(rt, "d", "work", item{"c", 1},
                                            {.dedup_id = "order-7"});
  EXPECT_NE(later.id(), first.id());
  EXPECT_EQ(later.get(30s), "c");
  // The same id again is the same item; another workflow input under it
  // is a conflict.
  auto same = queues::enqueue<std::string>(rt, "d", "work", item{"c", 1},
                                           {.id = later.id()});
  EXPECT_EQ(same.id(), later.id());
  try {
    queues::enqueue<std::string>(rt, "d", "work", item{"x", 1},
                                 {.id = later.id()});
    FAIL() << "another input under a taken id";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::conflicting_id);
  }
}

TEST_F(queue_test, a_delayed_item_waits_and_shows_as_delayed) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "later");
  rt.start();
  auto at = test::wall_ms();
  auto h = queues::enqueue<std::string>(rt, "later", "work", item{"x", 1},
                                        {.delay = 700ms});
  auto stats = queues::stats(rt, "later");
  EXPECT_EQ(stats.total.delayed, 1);
  EXPECT_EQ(stats.total.ready, 0);
  EXPECT_EQ(h.get(30s), "x");
  ASSERT_EQ(probe_.starts().size(), 1u);
  EXPECT_GE(probe_.starts()[0].second - at, 690);
}

TEST_F(queue_test, the_rate_limit_holds_in_every_window_by_start_time) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "rated",
                         {.worker_concurrency = 8,
                          .rate = queues::rate_limit{20, 1000ms}});
  rt.start();
  std::vector<workflow_handle<std::string>> handles;
  for (int n = 0; n < 60; ++n)
    handles.push_back(
      queues::enqueue<std::string>(rt, "rated", "work", item{"r", 1}));
  for (auto& h : handles)
    h.get(60s);
  std::vector<std::int64_t> times;
  for (auto& [key, at] : probe_.starts())
    times.push_back(at);
  std::sort(times.begin(), times.end());
  ASSERT_EQ(times.size(), 60u);
  for (std::size_t i = 0; i < times.size(); ++i) {
    auto in_window = std::upper_bound(times.begin(), times.end(),
                                      times[i] + 999)
                     - (times.begin() + static_cast<std::ptrdiff_t>(i));
    EXPECT_LE(in_window, 20) << "starts in [" << times[i] << ", +1 s)";
  }
  EXPECT_LE(queues::stats(rt, "rated").recent_starts, 20);
  // Not far below the limit: the 40 after the first burst of 20 at 75 %
  // of it at least (a limiter that halves the rate fails; a loaded
  // machine that delays a claim by 200 ms does not: the exact rate is
  // the bench's to measure).
  auto span = times.back() - times.front();
  EXPECT_LE(span, 40 * 1000 / 15) << "achieved "
                                  << 40.0 * 1000 / std::max<double>(1, span)
                                  << "/s of 20/s";
}

TEST_F(queue_test, failed_attempts_are_retried_then_dead_lettered_and_requeued) {
  std::atomic<int> prepared{0}, tries{0};
  std::atomic<bool> broken{true};
  runtime rt{db_.runtime_config()};
  rt.register_workflow("flaky", [&](workflow_context& ctx,
                                    int fail_times) -> task<int> {
    co_await ctx.step("prepare", [&] { return ++prepared; });
    auto n = co_await ctx.step(
      "call",
      [&] {
        auto t = ++tries;
        if (broken && (fail_times < 0 || t <= fail_times))
          throw std::runtime_error("service down");
        return t;
      },
      retry_policy{.max_attempts = 1});
    co_return n;
  });
  queues::register_queue(rt, "jobs",
                         {.retry = {.max_attempts = 3, .backoff = 50ms}});
  rt.start();
  // Fails twice, then succeeds: the step before the failing one ran once.
  EXPECT_EQ(queues::enqueue<int>(rt, "jobs", "flaky", 2).get(30s), 3);
  EXPECT_EQ(prepared.load(), 1);
  // Fails every time: dead-lettered after 3 attempts, with its error.
  prepared = 0;
  tries = 0;
  auto dead = queues::enqueue<int>(rt, "jobs", "flaky", -1);
  try {
    dead.get(30s);
    FAIL() << "it failed every attempt";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::dead_letter) << ex.what();
    EXPECT_NE(std::string{ex.what()}.find("service down"), std::string::npos)
      << ex.what();
  }
  EXPECT_EQ(tries.load(), 3);
  EXPECT_EQ(dead.status(), run_status::dead_letter);
  EXPECT_EQ(queues::stats(rt, "jobs").dead_letters, 1);
  auto listed = rt.list_runs({.status = run_status::dead_letter});
  ASSERT_EQ(listed.runs.size(), 1u);
  EXPECT_EQ(listed.runs[0].id, dead.id());
  // A dead letter never blocks its queue.
  EXPECT_EQ(queues::enqueue<int>(rt, "jobs", "flaky", 0).get(30s), 4);
  // Fixed, requeued: it succeeds; its first step is not run again.
  broken = false;
  prepared = 0;
  queues::requeue(rt, dead.id());
  EXPECT_EQ(dead.get(30s), 5);
  EXPECT_EQ(prepared.load(), 0);
  try {
    queues::requeue(rt, dead.id());
    FAIL() << "requeued a run that is no dead letter";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::not_found);
  }
}

// Found by review of the SQL layer: on PostgreSQL this conflict came out
// as a store error (the unique violation was wrapped before its catch).
TEST_F(queue_test, a_dead_letter_whose_dedup_id_is_taken_again_is_not_requeued) {
  std::atomic<bool> refuse{true};
  runtime rt{db_.runtime_config()};
  register_work(rt);
  rt.register_workflow("refuse", [&](workflow_context&) -> task<std::string> {
    if (refuse)
      throw terminal_error("bad order");
    co_return std::string{"fixed"};
  });
  queues::register_queue(rt, "d");
  rt.start();
  auto dead = queues::enqueue<std::string>(rt, "d", "refuse",
                                           {.dedup_id = "order-9"});
  EXPECT_THROW(dead.get(30s), perdure::error);
  ASSERT_EQ(dead.status(), run_status::dead_letter);
  // The dedup id is free again: another item takes it and runs a while.
  auto other = queues::enqueue<std::string>(rt, "d", "work", item{"b", 600},
                                            {.dedup_id = "order-9"});
  ASSERT_NE(other.id(), dead.id());
  try {
    queues::requeue(rt, dead.id());
    FAIL() << "requeued under a dedup id another item holds";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::conflicting_id) << ex.what();
  }
  EXPECT_EQ(dead.status(), run_status::dead_letter);
  EXPECT_EQ(other.get(30s), "b");
  refuse = false;
  queues::requeue(rt, dead.id()); // the id is free once the other ended
  EXPECT_EQ(dead.get(30s), "fixed");
}

TEST_F(queue_test, a_terminal_error_dead_letters_at_once) {
  std::atomic<int> tries{0};
  runtime rt{db_.runtime_config()};
  rt.register_workflow("refuse", [&](workflow_context&) -> task<int> {
    ++tries;
    throw terminal_error("bad order");
    co_return 0;
  });
  queues::register_queue(rt, "jobs", {.retry = {.max_attempts = 5,
                                                .backoff = 10ms}});
  rt.start();
  auto h = queues::enqueue<int>(rt, "jobs", "refuse");
  EXPECT_THROW(h.get(30s), perdure::error);
  EXPECT_EQ(h.status(), run_status::dead_letter);
  EXPECT_EQ(tries.load(), 1);
}

TEST_F(queue_test, a_staged_enqueue_exists_only_if_its_transaction_commits) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  rt.register_workflow("stage", [](workflow_context& ctx,
                                   bool commit) -> task<std::string> {
    co_return co_await ctx.transaction("enqueue", [&](sql_session& s) {
      auto id = queues::enqueue(s, "staged", "work", item{"staged", 1},
                                {.id = commit ? "kept" : "dropped"});
      if (!commit)
        throw terminal_error("rolled back");
      return id;
    });
  });
  queues::register_queue(rt, "staged");
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("stage", true).get(30s), "kept");
  EXPECT_EQ(rt.retrieve_workflow<std::string>("kept").get(30s), "staged");
  EXPECT_THROW(rt.start_workflow<std::string>("stage", false).get(30s),
               perdure::error);
  test::sql_client sql{db_};
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                       + " WHERE id = 'dropped'"),
            "0");
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                       + " WHERE queue_name = 'staged'"),
            "1");
}

TEST_F(queue_test, an_enqueued_item_can_be_cancelled) {
  client c{db_.runtime_config("web")};
  auto h = queues::enqueue<std::string>(c, "idle", "work", item{"x", 1});
  EXPECT_EQ(h.status(), run_status::enqueued);
  h.cancel();
  EXPECT_EQ(h.status(), run_status::cancelled);
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "idle");
  rt.start();
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(probe_.starts().empty()) << "a cancelled item ran";
}

TEST_F(queue_test, bad_input_is_refused_with_a_clear_error) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  EXPECT_THROW(queues::register_queue(rt, "q", {.worker_concurrency = 0}),
               perdure::error);
  EXPECT_THROW(queues::register_queue(
                 rt, "q", {.rate = queues::rate_limit{0, 1000ms}}),
               perdure::error);
  queues::register_queue(rt, "q");
  EXPECT_THROW(queues::register_queue(rt, "q"), perdure::error);
  rt.start();
  EXPECT_THROW(queues::register_queue(rt, "late"), perdure::error);
  try {
    queues::enqueue<std::string>(rt, "q", "nope", item{"x", 1});
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::unknown_workflow);
  }
  // Injection-like names are data, not SQL.
  auto evil = "q'; DROP TABLE runs; --";
  auto h = queues::enqueue<std::string>(rt, evil, "work", item{"x", 1},
                                        {.partition_key = "'); --",
                                         .dedup_id = "\" OR 1=1"});
  EXPECT_EQ(h.status(), run_status::enqueued);
  EXPECT_EQ(queues::stats(rt, evil).total.ready, 1);
}

TEST_F(queue_test, an_item_claimed_ahead_and_cancelled_never_starts) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  // One worker, and nothing shared: the next items are claimed ahead.
  queues::register_queue(rt, "one", {.worker_concurrency = 1});
  rt.start();
  auto first = queues::enqueue<std::string>(rt, "one", "work",
                                            item{"first", 400});
  auto second = queues::enqueue<std::string>(rt, "one", "work",
                                             item{"second", 1});
  ASSERT_TRUE(test::eventually([&] { return !probe_.starts().empty(); }));
  second.cancel();
  EXPECT_EQ(first.get(30s), "first");
  EXPECT_EQ(second.status(), run_status::cancelled);
  EXPECT_EQ(queues::enqueue<std::string>(rt, "one", "work", item{"third", 1})
              .get(30s),
            "third");
  for (auto& [key, at] : probe_.starts())
    EXPECT_NE(key, "second") << "a cancelled item ran";
}

TEST_F(queue_test, items_no_process_here_can_run_do_not_block_the_queue) {
  {
    client c{db_.runtime_config("web")};
    for (int n = 0; n < 40; ++n)
      queues::enqueue<int>(c, "mixed", "elsewhere", n);
    queues::enqueue<std::string>(c, "mixed", "work", item{"mine", 1});
  }
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "mixed", {.worker_concurrency = 2});
  rt.start();
  ASSERT_TRUE(test::eventually([&] { return probe_.starts().size() == 1; }));
  EXPECT_EQ(queues::stats(rt, "mixed").total.ready, 40)
    << "the other workflow's items wait for a process that runs it";
}

TEST_F(queue_test, a_runtime_stopped_and_started_again_runs_its_queues) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "q", {.worker_concurrency = 2});
  for (int round = 0; round < 3; ++round) {
    rt.start();
    std::vector<workflow_handle<std::string>> handles;
    for (int n = 0; n < 6; ++n)
      handles.push_back(queues::enqueue<std::string>(
        rt, "q", "work", item{"r" + std::to_string(round), 5}));
    for (auto& h : handles)
      EXPECT_EQ(h.get(30s), "r" + std::to_string(round));
    rt.stop();
  }
  EXPECT_EQ(probe_.starts().size(), 18u);
}

TEST_F(queue_test, an_enqueue_in_the_applications_own_transaction_waits_for_its_commit) {
  runtime rt{db_.runtime_config()};
  register_work(rt);
  queues::register_queue(rt, "app");
  rt.start();
  // The application's own connection and transaction, wrapped as a session.
  auto in_own_transaction = [&](bool commit) {
    if (db_.postgres) {
      pqxx::connection conn{db_.url};
      pqxx::work w{conn};
      pqxx_session s{w, db_.schema};
      auto id = queues::enqueue(s, "app", "work", item{"app", 1});
      if (commit)
        w.commit();
      return id;
    }
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open(db_.url.substr(std::string{"sqlite://"}.size())
                             .c_str(),
                           &raw),
              SQLITE_OK);
    std::unique_ptr<sqlite3, int (*)(sqlite3*)> conn{raw, sqlite3_close};
    sqlite3_busy_timeout(raw, 10'000);
    sqlite3_exec(raw, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    sqlite_session s{raw};
    auto id = queues::enqueue(s, "app", "work", item{"app", 1});
    sqlite3_exec(raw, commit ? "COMMIT" : "ROLLBACK", nullptr, nullptr,
                 nullptr);
    return id;
  };
  auto dropped = in_own_transaction(false);
  auto kept = in_own_transaction(true);
  EXPECT_EQ(rt.retrieve_workflow<std::string>(kept).get(30s), "app");
  test::sql_client sql{db_};
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                       + " WHERE id = $1",
                       {dropped}),
            "0");
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                       + " WHERE queue_name = 'app'"),
            "1");
  EXPECT_EQ(probe_.starts().size(), 1u);
}

} // namespace
