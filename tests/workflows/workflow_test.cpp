// Durable workflows as users write them, on the store under test.

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

struct order {
  std::string id;
  int quantity = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(id), CEREAL_NVP(quantity));
  }
};

struct receipt {
  std::string order_id;
  int total = 0;
  std::vector<std::string> log;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(order_id), CEREAL_NVP(total), CEREAL_NVP(log));
  }
};

class workflow_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  config cfg(std::string executor = "local") {
    auto c = db_.runtime_config(std::move(executor));
    c.step_threads = 4;
    return c;
  }

  test::database db_;
};

constexpr retry_policy fast_retries{.max_attempts = 3,
                                    .initial_delay = 1ms,
                                    .backoff = 2.0,
                                    .max_delay = 5ms};

} // namespace

TEST_F(workflow_test, steps_run_in_order_and_the_output_is_the_result) {
  runtime rt{cfg()};
  std::atomic<int> executions{0};
  rt.register_workflow("order", [&](workflow_context& ctx,
                                    order o) -> task<receipt> {
    receipt r{o.id, 0, {}};
    auto price = co_await ctx.step("price", [&] {
      ++executions;
      return 7;
    });
    r.log.push_back("priced");
    r.total = co_await ctx.step("total", [&] {
      ++executions;
      return price * o.quantity;
    });
    co_await ctx.step("notify", [&] { ++executions; });
    r.log.push_back("notified");
    co_return r;
  });
  rt.start();
  auto h = rt.start_workflow<receipt>("order", order{"o-1", 3}, {.id = "o-1"});
  auto r = h.get(10s);
  EXPECT_EQ(r.order_id, "o-1");
  EXPECT_EQ(r.total, 21);
  EXPECT_EQ(r.log, (std::vector<std::string>{"priced", "notified"}));
  EXPECT_EQ(executions.load(), 3);
  EXPECT_EQ(h.status(), run_status::success);
  EXPECT_EQ(h.id(), "o-1");
}

TEST_F(workflow_test, step_code_runs_off_the_calling_and_scheduler_threads) {
  runtime rt{cfg()};
  std::thread::id step_thread;
  rt.register_workflow("where", [&](workflow_context& ctx) -> task<void> {
    co_await ctx.step("s", [&] { step_thread = std::this_thread::get_id(); });
  });
  rt.start();
  rt.start_workflow<void>("where").get(10s);
  EXPECT_NE(step_thread, std::this_thread::get_id());
  EXPECT_NE(step_thread, std::thread::id{});
}

TEST_F(workflow_test, a_long_workflow_keeps_no_step_thread_from_other_runs) {
  // A step thread that committed a step goes on with the run's next one
  // (no hand-off), but not past steps of other runs waiting for a thread.
  auto c = cfg();
  c.step_threads = 1;
  runtime rt{c};
  constexpr int long_steps = 300;
  std::atomic<int> done{0};
  rt.register_workflow("long", [&](workflow_context& ctx) -> task<void> {
    for (int i = 0; i < long_steps; ++i)
      co_await ctx.step("s" + std::to_string(i), [&] {
        std::this_thread::sleep_for(1ms);
        ++done;
      });
  });
  rt.register_workflow("short", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.step("s", [] { return 7; });
  });
  rt.start();
  auto long_run = rt.start_workflow<void>("long");
  ASSERT_TRUE(test::eventually([&] { return done >= 5; }));
  EXPECT_EQ(rt.start_workflow<int>("short").get(30s), 7);
  EXPECT_LT(done.load(), long_steps / 2)
    << "the short run waited for the long one's steps";
  long_run.get(60s);
}

TEST_F(workflow_test, many_concurrent_workflows_all_finish_with_exact_results) {
  runtime rt{cfg()};
  rt.register_workflow("sum", [](workflow_context& ctx, int n) -> task<int> {
    int total = 0;
    for (int i = 1; i <= 5; ++i)
      total += co_await ctx.step("add-" + std::to_string(i), [=] { return n * i; });
    co_return total;
  });
  rt.start();
  std::vector<workflow_handle<int>> handles;
  for (int n = 0; n < 100; ++n)
    handles.push_back(rt.start_workflow<int>("sum", n));
  for (int n = 0; n < 100; ++n)
    EXPECT_EQ(handles[n].get(30s), n * 15);
}

TEST_F(workflow_test, a_failing_step_is_retried_until_it_succeeds) {
  runtime rt{cfg()};
  std::atomic<int> attempts{0};
  rt.register_workflow("flaky", [&](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.step(
      "call",
      [&] {
        if (++attempts < 3)
          throw std::runtime_error("try again");
        return 99;
      },
      fast_retries);
  });
  rt.start();
  EXPECT_EQ(rt.start_workflow<int>("flaky").get(10s), 99);
  EXPECT_EQ(attempts.load(), 3);
}

TEST_F(workflow_test, exhausted_retries_surface_as_step_failed_with_the_message) {
  runtime rt{cfg()};
  std::atomic<int> attempts{0};
  rt.register_workflow("doomed", [&](workflow_context& ctx) -> task<std::string> {
    try {
      co_await ctx.step(
        "call", [&] { ++attempts; throw std::runtime_error("service down"); },
        fast_retries);
    } catch (const step_failed& ex) {
      co_return std::string{"handled: "} + ex.what();
    }
    co_return "unreachable";
  });
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("doomed").get(10s),
            "handled: service down");
  EXPECT_EQ(attempts.load(), 3);
}

TEST_F(workflow_test, a_terminal_error_is_not_retried_and_fails_the_run) {
  runtime rt{cfg()};
  std::atomic<int> attempts{0};
  rt.register_workflow("reject", [&](workflow_context& ctx) -> task<int> {
    co_await ctx.step(
      "validate", [&] { ++attempts; throw terminal_error("card declined"); },
      fast_retries);
    co_return 1;
  });
  rt.start();
  auto h = rt.start_workflow<int>("reject");
  try {
    h.get(10s);
    FAIL() << "a failed run must not return a value";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed);
    EXPECT_NE(std::string{ex.what()}.find("card declined"), std::string::npos)
      << ex.what();
  }
  EXPECT_EQ(attempts.load(), 1);
  EXPECT_EQ(h.status(), run_status::error);
}

TEST_F(workflow_test, the_same_id_returns_the_existing_run_without_rerunning) {
  runtime rt{cfg()};
  std::atomic<int> executions{0};
  rt.register_workflow("once", [&](workflow_context& ctx, int x) -> task<int> {
    co_return co_await ctx.step("s", [&] {
      ++executions;
      return x + 1;
    });
  });
  rt.start();
  auto a = rt.start_workflow<int>("once", 1, {.id = "same"});
  EXPECT_EQ(a.get(10s), 2);
  auto b = rt.start_workflow<int>("once", 1, {.id = "same"});
  EXPECT_EQ(b.get(10s), 2);
  EXPECT_EQ(executions.load(), 1);
}

TEST_F(workflow_test, concurrent_starts_of_one_id_make_one_run_and_one_execution) {
  runtime rt{cfg()};
  std::atomic<int> executions{0};
  rt.register_workflow("once", [&](workflow_context& ctx, int x) -> task<int> {
    co_return co_await ctx.step("s", [&] {
      ++executions;
      std::this_thread::sleep_for(20ms);
      return x + 1;
    });
  });
  rt.start();
  // Starts of several ids from many threads share writer batches; the
  // duplicates of an id in one batch must still make one run.
  std::vector<std::future<int>> results;
  for (int t = 0; t < 16; ++t)
    results.push_back(std::async(std::launch::async, [&, t] {
      auto id = "dup-" + std::to_string(t % 4);
      return rt.start_workflow<int>("once", t % 4, {.id = id}).get(10s);
    }));
  for (int t = 0; t < 16; ++t)
    EXPECT_EQ(results[static_cast<size_t>(t)].get(), t % 4 + 1);
  EXPECT_EQ(executions.load(), 4);
}

TEST_F(workflow_test, the_same_id_with_other_inputs_or_name_is_a_clear_error) {
  runtime rt{cfg()};
  rt.register_workflow("a", [](workflow_context&, int x) -> task<int> {
    co_return x;
  });
  rt.register_workflow("b", [](workflow_context&, int x) -> task<int> {
    co_return x;
  });
  rt.start();
  rt.start_workflow<int>("a", 1, {.id = "dup"}).get(10s);
  for (auto attempt : {std::pair{"a", 2}, std::pair{"b", 1}}) {
    try {
      rt.start_workflow<int>(attempt.first, attempt.second, {.id = "dup"});
      FAIL() << "accepted a conflicting start";
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), errc::conflicting_id) << ex.what();
    }
  }
  EXPECT_EQ(rt.retrieve_workflow<int>("dup").get(10s), 1);
}

TEST_F(workflow_test, perdure_logs_through_the_application_s_logger) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  auto logger = std::make_shared<spdlog::logger>("app", sink);
  logger->set_level(spdlog::level::info);
  auto c = cfg();
  c.logger = logger;
  runtime rt{c};
  rt.register_workflow("waits", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.promise<int>("never");
  });
  rt.start();
  auto h = rt.start_workflow<int>("waits", {.id = "logged-run"});
  h.cancel();
  EXPECT_EQ(h.status(), run_status::cancelled);
  EXPECT_TRUE(test::eventually([&] {
    return lines.str().find("run logged-run cancelled") != std::string::npos;
  }, 5s))
    << lines.str();
  // The level is the application's: debug lines stay out.
  EXPECT_EQ(lines.str().find("[debug]"), std::string::npos) << lines.str();
}

TEST_F(workflow_test, another_process_reads_the_result_by_id) {
  runtime owner{cfg("exec-1")};
  owner.register_workflow("double", [](workflow_context& ctx, int x) -> task<int> {
    co_return co_await ctx.step("d", [=] { return 2 * x; });
  });
  owner.start();
  client observer{cfg("exec-2")}; // a client process: it runs nothing
  owner.start_workflow<int>("double", 21, {.id = "shared"});
  EXPECT_EQ(observer.retrieve_workflow<int>("shared").get(10s), 42);
}

TEST_F(workflow_test, a_transaction_step_commits_user_rows_exactly_once) {
  test::sql_client sql{db_};
  sql.exec("CREATE TABLE " + sql.table("ledger")
           + " (account TEXT, amount INTEGER)");
  auto ledger = sql.table("ledger");
  runtime rt{cfg()};
  rt.register_workflow("deposit", [&](workflow_context& ctx, int amount) -> task<int> {
    auto id = ctx.workflow_id();
    auto rows = co_await ctx.transaction("book", [&](sql_session& s) {
      s.exec_params("INSERT INTO " + ledger + " (account, amount) VALUES ($1, $2)",
                    id, amount);
      return s.exec_params("SELECT COUNT(*) FROM " + ledger).rows.at(0).at(0).value();
    });
    co_return std::stoi(rows);
  });
  rt.start();
  EXPECT_EQ(rt.start_workflow<int>("deposit", 50, {.id = "acct-1"}).get(10s), 1);
  EXPECT_EQ(rt.start_workflow<int>("deposit", 50, {.id = "acct-1"}).get(10s), 1);
  EXPECT_EQ(sql.scalar("SELECT SUM(amount) FROM " + ledger), "50");
  EXPECT_EQ(sql.scalar("SELECT kind FROM " + sql.table("journal")
                       + " WHERE run_id = 'acct-1'"),
            "transaction");
}

TEST_F(workflow_test, a_failing_transaction_is_retried_and_leaves_no_partial_rows) {
  test::sql_client sql{db_};
  sql.exec("CREATE TABLE " + sql.table("ledger")
           + " (account TEXT, amount INTEGER)");
  auto ledger = sql.table("ledger");
  runtime rt{cfg()};
  std::atomic<int> attempts{0};
  rt.register_workflow("deposit", [&](workflow_context& ctx) -> task<void> {
    co_await ctx.transaction(
      "book",
      [&](sql_session& s) {
        s.exec_params("INSERT INTO " + ledger + " (account, amount) VALUES ($1, 10)",
                      ctx.workflow_id());
        if (++attempts < 3)
          throw std::runtime_error("constraint check failed");
      },
      fast_retries);
  });
  rt.start();
  rt.start_workflow<void>("deposit").get(10s);
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + ledger), "1");
}

TEST_F(workflow_test, binary_payload_encoding_works_end_to_end) {
  auto c = cfg();
  c.payload_encoding = persistence::encoding::binary;
  runtime rt{c};
  rt.register_workflow("echo", [](workflow_context& ctx, std::string s) -> task<std::string> {
    co_return co_await ctx.step("s", [&] { return s + s; });
  });
  rt.start();
  std::string nul{"a\0b", 3};
  EXPECT_EQ(rt.start_workflow<std::string>("echo", nul).get(10s), nul + nul);
}

TEST_F(workflow_test, a_started_run_is_durable_before_start_returns) {
  runtime rt{cfg()};
  std::promise<void> release;
  auto released = release.get_future().share();
  rt.register_workflow("slow", [&](workflow_context& ctx, int x) -> task<int> {
    co_return co_await ctx.step("wait", [&] {
      released.wait();
      return x;
    });
  });
  rt.start();
  auto h = rt.start_workflow<int>("slow", 7, {.id = "durable-first"});
  // Read by another connection while the run's first step is still blocked.
  test::sql_client sql{db_};
  EXPECT_EQ(sql.scalar("SELECT status FROM " + sql.table("runs")
                         + " WHERE id = 'durable-first'"),
            "PENDING");
  EXPECT_EQ(h.status(), run_status::pending);
  release.set_value();
  EXPECT_EQ(h.get(10s), 7);
}
