// PostgreSQL going away under load, on a server of the test's own: stopped
// for longer than the retry budget, restarted with `-m immediate`, its
// backends killed. What users rely on: the process never crashes, every
// run finishes without a process restart, no step runs again once its
// checkpoint committed (a step in flight may: at least once), and a
// transactional step's rows exist exactly once.

#include <gtest/gtest.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/sagas/saga.hpp"
#include "support/pg_cluster.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

struct tally {
  std::int64_t total = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(total));
  }
};

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
    // What reaches spdlog's default logger, which no line of Perdure's may
    // reach while config::logger is set.
    default_sink_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
    previous_default_ = spdlog::default_logger();
    spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("default", default_sink_));
    app_sink_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10000);
    app_log_ = std::make_shared<spdlog::logger>("app", app_sink_);
  }

  void TearDown() override {
    if (previous_default_)
      spdlog::set_default_logger(previous_default_);
  }

  /// The lines logged to the application's logger so far that hold `text`.
  std::size_t app_lines_with(const std::string& text) {
    auto lines = app_sink_->last_formatted();
    return static_cast<std::size_t>(
      std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
        return l.find(text) != std::string::npos;
      }));
  }

  /// A runtime that gives up on the database after 1 s.
  std::unique_ptr<runtime> make_runtime() {
    auto cfg = db_.runtime_config("outage");
    cfg.db_retry_budget = 1s;
    cfg.orphan_retry = 200ms;
    cfg.logger = app_log_;
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
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> default_sink_;
  std::shared_ptr<spdlog::logger> previous_default_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> app_sink_;
  std::shared_ptr<spdlog::logger> app_log_;
  std::mutex mtx_;
  std::map<std::pair<std::string, int>, int> executions_;
};

TEST_F(outage_test, a_server_down_longer_than_the_retry_budget_crashes_nothing) {
  survive([&] {
    pg_->stop("fast");
    std::this_thread::sleep_for(3500ms); // 3.5 x the budget
    pg_->start();
  });
  // Every part logs where the application told it to, the journal writer
  // and the delivery listener (threads of the persistence layer) too.
  EXPECT_GE(app_lines_with("delivery listener lost its connection"), 1u);
  EXPECT_GE(app_lines_with("journal batch of"), 1u);
  for (auto& line : default_sink_->last_formatted())
    ADD_FAILURE() << "logged past config::logger: " << line;
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

// Every connection cut for two seconds (a partition, a proxy's blip): each
// runtime's renewals get through only after retries, and the first one back
// finds the others silent past the one second after which a holder without
// its lock is judged. None may be declared lapsed: each was cut off alike.
TEST_F(outage_test, a_blip_that_cuts_every_runtime_off_costs_nobody_its_lease) {
  auto make = [&](const std::string& id) {
    auto cfg = db_.runtime_config(id);
    cfg.lease_timeout = 6s; // its renewals retry for up to 3 s
    auto rt = std::make_unique<runtime>(cfg);
    rt->register_workflow("nap", [](workflow_context& ctx) -> task<int> {
      co_await ctx.sleep(1h);
      co_return 1;
    });
    rt->start();
    return rt;
  };
  auto a = make("a");
  auto b = make("b");
  for (int n = 0; n < 5; ++n) {
    (void)a->start_workflow<int>("nap", {.id = "a" + std::to_string(n)});
    (void)b->start_workflow<int>("nap", {.id = "b" + std::to_string(n)});
  }
  test::sql_client sql{db_};
  auto leases = [&] {
    return test::sql_client{db_}.scalar(
      "SELECT string_agg(id || ':' || epoch || ':' || state, ',' ORDER BY id) "
      "FROM " + sql.table("executors") + " WHERE id IN ('a', 'b')");
  };
  auto owners = [&] {
    return test::sql_client{db_}.scalar(
      "SELECT string_agg(id || ':' || executor, ',' ORDER BY id) FROM "
      + sql.table("runs"));
  };
  ASSERT_TRUE(test::eventually([&] {
    return test::sql_client{db_}.scalar(
             "SELECT COUNT(*) FROM " + sql.table("runs")
             + " WHERE wake_at IS NOT NULL")
           == "10";
  }, 10s));
  auto leases_before = leases();
  auto owners_before = owners();
  // Longer than a lapse's second, and shorter (one holder may get back
  // within a second of its last beat, the other not).
  for (auto blip : {2000ms, 600ms}) {
    pg_->refuse_connections(true);
    std::this_thread::sleep_for(blip);
    pg_->refuse_connections(false);
    std::this_thread::sleep_for(3s); // renewals back, judgments made
    EXPECT_EQ(leases(), leases_before)
      << "a runtime lost its lease to a blip of " << blip.count() << " ms";
    EXPECT_EQ(owners(), owners_before);
  }
}

// One runtime's connections cut while the server stays up (an admin ended
// them, its role was locked out): its lock is gone, so another takes its
// runs over a second after its last heartbeat. It must not start a step
// body after that (its retries need no write, so nothing else stops them).
TEST_F(outage_test, a_runtime_cut_off_alone_starts_no_step_body_after_a_takeover) {
  test::sql_client admin{db_};
  admin.exec("CREATE ROLE runner_a LOGIN SUPERUSER");
  auto db_a = db_;
  db_a.url.replace(db_a.url.find("postgres@"), 9, "runner_a@");
  struct body {
    char who;
    std::string run;
    std::chrono::steady_clock::time_point at;
  };
  std::vector<body> bodies;
  std::map<std::pair<char, std::string>, int> attempts;
  auto make = [&](const test::database& db, char who) {
    auto cfg = db.runtime_config(std::string(1, who));
    cfg.lease_timeout = 6s;
    cfg.db_retry_budget = 3s;
    auto rt = std::make_unique<runtime>(cfg);
    rt->register_workflow("poller", [&, who](workflow_context& ctx)
                                      -> task<int> {
      auto run = ctx.workflow_id();
      co_return co_await ctx.step(
        "poll",
        [&] {
          std::lock_guard guard{mtx_};
          bodies.push_back({who, run, std::chrono::steady_clock::now()});
          if (++attempts[{who, run}] < 40)
            throw std::runtime_error("not yet");
          return 1;
        },
        {.max_attempts = 1000, .initial_delay = 50ms, .backoff = 1.0,
         .max_delay = 50ms});
    });
    rt->start();
    return rt;
  };
  auto a = make(db_a, 'a');
  auto b = make(db_, 'b');
  std::vector<std::string> ids;
  for (int n = 0; n < 4; ++n) {
    ids.push_back("p" + std::to_string(n));
    (void)a->start_workflow<int>("poller", {.id = ids.back()});
  }
  ASSERT_TRUE(test::eventually([&] {
    std::lock_guard guard{mtx_};
    return bodies.size() >= 12;
  }, 10s));
  admin.exec("ALTER ROLE runner_a NOLOGIN");
  admin.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
             "usename = 'runner_a'");
  auto cut = std::chrono::steady_clock::now();
  for (auto& id : ids)
    EXPECT_EQ(b->retrieve_workflow<int>(id).get(30s), 1) << id;
  admin.exec("ALTER ROLE runner_a LOGIN");
  std::lock_guard guard{mtx_};
  int after_cut = 0;
  int after_takeover = 0;
  for (auto& id : ids) {
    auto taken = std::chrono::steady_clock::time_point::max();
    for (auto& x : bodies)
      if (x.who == 'b' && x.run == id)
        taken = std::min(taken, x.at);
    for (auto& x : bodies)
      if (x.who == 'a' && x.run == id) {
        after_cut += x.at > cut;
        after_takeover += x.at >= taken;
      }
  }
  std::cout << "[ measured ] the cut-off runtime started " << after_cut
            << " step bodies after the cut, " << after_takeover
            << " after the takeover\n";
  EXPECT_EQ(after_takeover, 0);
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

TEST_F(outage_test, queue_items_lose_nothing_to_a_server_down_past_the_budget) {
  constexpr int items = 30;
  auto rt = make_runtime();
  // Three at once across processes (claims under the queue row's lock),
  // and one without shared limits (claimed ahead).
  queues::register_queue(*rt, "limited", {.concurrency = 3,
                                          .worker_concurrency = 4});
  queues::register_queue(*rt, "open", {.worker_concurrency = 4});
  rt->start();
  std::vector<workflow_handle<long>> handles;
  for (int n = 0; n < items; ++n)
    handles.push_back(queues::enqueue<long>(
      *rt, n % 2 == 0 ? "limited" : "open", "flow", n,
      {.id = "r" + std::to_string(n)}));
  std::this_thread::sleep_for(150ms); // items under way
  test::sql_client sql{db_};
  auto waiting = sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                            + " WHERE status IN ('ENQUEUED', 'PENDING')");
  EXPECT_NE(waiting, "0") << "the outage hit no item: the test is void";
  pg_->stop("fast");
  std::this_thread::sleep_for(3500ms); // 3.5 x the budget
  pg_->start();
  for (int n = 0; n < items; ++n)
    EXPECT_EQ(handles[static_cast<size_t>(n)].get(60s), expected(n)) << n;
  test::sql_client after{db_};
  EXPECT_EQ(after.scalar("SELECT COUNT(*) FROM " + after.table("tx_rows")),
            std::to_string(items))
    << "a transactional step's rows exist exactly once";
  std::lock_guard guard{mtx_};
  for (auto& [key, count] : executions_)
    EXPECT_LE(count, 2) << key.first << " step " << key.second;
  EXPECT_EQ(executions_.size(), static_cast<size_t>(items * (steps - 1)));
  rt->stop();
}

// Object calls in flight through an outage past the retry budget: every
// call_async caller hears exactly one end (its reply, or store_unavailable
// saying to call again with its idempotency key), none waits forever, and
// calling the failed ones again with their keys applies each exactly once.
TEST_F(outage_test, object_calls_each_hear_one_end_through_a_server_down_past_the_budget) {
  constexpr int keys = 8;
  auto rt = make_runtime();
  rt->register_object<tally>("tally").handler(
    "add", [](object_context<tally>& ctx, std::int64_t n) -> task<std::int64_t> {
      ctx.state().total += n;
      co_return ctx.state().total;
    });
  rt->start();
  std::mutex mtx;
  std::condition_variable arrived;
  std::map<int, std::vector<call_result<std::int64_t>>> ends; // by call
  std::map<int, std::string> thrown;                          // at once
  auto key_of = [](int n) { return "k" + std::to_string(n % keys); };
  auto ikey_of = [](int n) { return "c" + std::to_string(n); };
  std::atomic<bool> done_calling{false};
  std::atomic<int> made{0};
  std::thread caller{[&] {
    for (int n = 0; !done_calling; ++n) {
      try {
        rt->call_async<std::int64_t>(
          "tally", key_of(n), "add", std::int64_t{1},
          [&, n](call_result<std::int64_t> r) {
            std::lock_guard guard{mtx};
            ends[n].push_back(std::move(r));
            arrived.notify_all();
          },
          {.idempotency_key = ikey_of(n)});
      } catch (const error& ex) {
        std::lock_guard guard{mtx};
        thrown[n] = ex.what();
        arrived.notify_all();
      }
      made = n + 1;
      std::this_thread::sleep_for(2ms);
    }
  }};
  std::this_thread::sleep_for(300ms); // calls under way
  pg_->stop("fast");
  std::this_thread::sleep_for(3500ms); // 3.5 x the budget
  pg_->start();
  std::this_thread::sleep_for(500ms);
  done_calling = true;
  caller.join();
  const int calls = made;
  {
    std::unique_lock guard{mtx};
    ASSERT_TRUE(arrived.wait_for(guard, 60s, [&] {
      return static_cast<int>(ends.size() + thrown.size()) >= calls;
    })) << ends.size() + thrown.size() << " of " << calls
        << " calls heard an end";
  }
  std::this_thread::sleep_for(300ms); // a second end would come by now
  std::lock_guard guard{mtx};
  int failed = 0;
  std::map<std::string, std::vector<std::int64_t>> replies; // by object key
  for (int n = 0; n < calls; ++n) {
    if (auto t = thrown.find(n); t != thrown.end()) {
      ADD_FAILURE() << "call " << n << " threw at once: " << t->second;
      continue;
    }
    auto& got = ends[n];
    ASSERT_EQ(got.size(), 1u) << "call " << n << " heard " << got.size()
                              << " ends";
    if (got[0].ok()) {
      replies[key_of(n)].push_back(got[0].get());
      continue;
    }
    ++failed;
    try {
      got[0].get();
    } catch (const error& ex) {
      EXPECT_EQ(ex.code(), errc::store_unavailable) << ex.what();
      EXPECT_NE(std::string{ex.what()}.find("idempotency key"),
                std::string::npos)
        << "the message says what to do: " << ex.what();
    }
    // As the message says: again, with the key (the first may have run).
    replies[key_of(n)].push_back(rt->call<std::int64_t>(
      "tally", key_of(n), "add", std::int64_t{1},
      {.idempotency_key = ikey_of(n)}));
  }
  EXPECT_GT(failed, 0) << "the outage failed no call: the test is void";
  std::cout << "[ measured ] " << calls << " calls, " << failed
            << " told to call again\n";
  // Each call applied exactly once: a key's replies are 1..n, its state n.
  for (auto& [key, got] : replies) {
    std::sort(got.begin(), got.end());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], static_cast<std::int64_t>(i + 1)) << key;
    EXPECT_EQ(rt->object_state<tally>("tally", key)->total,
              static_cast<std::int64_t>(got.size()))
      << key;
  }
  rt->stop();
}

} // namespace
