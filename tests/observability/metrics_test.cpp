// The runtime's metrics after a known workload are exact: runs started and
// ended by status, steps by outcome, retries, blocked runs, queue starts
// and dead letters, object calls, recoveries after a restart; /metrics on
// the admin endpoint serves them as Prometheus text (checked by promtool
// where it is installed).

#include <gtest/gtest.h>

#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <unistd.h>

#include "perdure/admin/endpoint.hpp"
#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/telemetry/prometheus.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

struct counter_state {
  std::int64_t total = 0;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(total);
  }
};

/// The value of series `name{labels...}` (labels in the family's order),
/// or -1 if there is none.
double value_of(const telemetry::snapshot& snap, const std::string& name,
                const std::vector<std::string>& labels = {}) {
  for (auto& f : snap)
    if (f.name == name)
      for (auto& s : f.series)
        if (s.label_values == labels)
          return s.value;
  return -1;
}

class metrics_test : public ::testing::Test {
protected:
  void SetUp() override { db_ = test::database::fresh(); }

  std::unique_ptr<runtime> make(const std::string& executor = "metrics-rt",
                                int max_recovery_attempts = -1) {
    auto cfg = db_.runtime_config(executor);
    if (max_recovery_attempts >= 0)
      cfg.max_recovery_attempts = max_recovery_attempts;
    cfg.admin_listen = "127.0.0.1:0";
    cfg.store_gauges_interval = 50ms;
    auto rt = std::make_unique<runtime>(cfg);
    rt->register_workflow("order", [this](workflow_context& ctx,
                                          int n) -> task<int> {
      auto a = co_await ctx.step("reserve", [&] { return n; });
      auto b = co_await ctx.step(
        "charge",
        [&] {
          if (n == 1 && ++charge_tries_ == 1)
            throw std::runtime_error("card service busy");
          return a * 2;
        },
        retry_policy{.max_attempts = 3, .initial_delay = 1ms});
      co_return b;
    });
    rt->register_workflow("doomed", [](workflow_context& ctx) -> task<int> {
      co_return co_await ctx.step(
        "explode", []() -> int { throw std::runtime_error("no"); },
        retry_policy{.max_attempts = 2, .initial_delay = 1ms});
    });
    rt->register_workflow("waits", [](workflow_context& ctx) -> task<int> {
      co_return co_await ctx.recv<int>("go");
    });
    rt->register_object<counter_state>("counter").handler(
      "add", [](object_context<counter_state>& ctx, std::int64_t n)
               -> task<std::int64_t> {
        ctx.state().total += n;
        co_return ctx.state().total;
      });
    queues::register_queue(*rt, "jobs",
                           {.retry = {.max_attempts = 2, .backoff = 1ms}});
    return rt;
  }

  test::database db_;
  std::atomic<int> charge_tries_{0};
};

TEST_F(metrics_test, a_known_workload_reads_exactly) {
  auto rt = make();
  rt->start();
  for (int n = 0; n < 5; ++n)
    EXPECT_EQ(rt->start_workflow<int>("order", n).get(30s), 2 * n);
  EXPECT_THROW(rt->start_workflow<int>("doomed").get(30s), std::exception);
  EXPECT_EQ(queues::enqueue<int>(*rt, "jobs", "order", 7).get(30s), 14);
  EXPECT_THROW(queues::enqueue<int>(*rt, "jobs", "doomed").get(30s),
               std::exception);
  for (int i = 1; i <= 3; ++i)
    EXPECT_EQ(rt->call<std::int64_t>("counter", "k", "add", std::int64_t{1}), i);
  auto snap = rt->metrics();
  EXPECT_EQ(value_of(snap, "perdure_runs_started_total", {"order"}), 6);
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total", {"order", "SUCCESS"}), 6);
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total", {"doomed", "ERROR"}), 1);
  // The queued doomed item: one run (two attempts), then its dead letter.
  EXPECT_EQ(value_of(snap, "perdure_runs_started_total", {"doomed"}), 2);
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total", {"doomed", "DEAD_LETTER"}), 1);
  EXPECT_EQ(value_of(snap, "perdure_dead_letters_total", {"jobs"}), 1);
  EXPECT_EQ(value_of(snap, "perdure_queue_starts_total", {"jobs"}), 3);
  EXPECT_EQ(value_of(snap, "perdure_queue_wait_seconds", {"jobs"}), 3);
  // 12 order steps ran once each, one charge attempt before them failed.
  EXPECT_EQ(value_of(snap, "perdure_steps_total", {"order", "ok"}), 12);
  EXPECT_EQ(value_of(snap, "perdure_step_retries_total", {"order"}), 1);
  EXPECT_EQ(value_of(snap, "perdure_step_duration_seconds", {"order"}), 13);
  // doomed: 3 attempts of 2 tries each; each attempt's last one failed.
  EXPECT_EQ(value_of(snap, "perdure_steps_total", {"doomed", "failed"}), 3);
  EXPECT_EQ(value_of(snap, "perdure_step_retries_total", {"doomed"}), 3);
  EXPECT_EQ(value_of(snap, "perdure_object_calls_total", {"counter", "SUCCESS"}), 3);
  EXPECT_EQ(value_of(snap, "perdure_object_call_duration_seconds", {"counter"}), 3);
  EXPECT_EQ(value_of(snap, "perdure_runs_started_total", {"counter/add"}), 3);
  EXPECT_EQ(value_of(snap, "perdure_run_duration_seconds", {"order", "SUCCESS"}), 6);
  EXPECT_GE(value_of(snap, "perdure_group_commit_batch_size"), 1);
  EXPECT_GE(value_of(snap, "perdure_checkpoint_commit_seconds"), 1);
  EXPECT_EQ(value_of(snap, "perdure_fenced_writes_total"), 0);
  EXPECT_EQ(value_of(snap, "perdure_store_unavailable_total"), 0);
  EXPECT_GE(value_of(snap, "perdure_lease_age_seconds"), 0);
  EXPECT_LT(value_of(snap, "perdure_lease_age_seconds"), 5);
  EXPECT_EQ(value_of(snap, "perdure_runs_in_memory"), 0);
  // The store-wide gauges, computed within an interval (50 ms here), from
  // rows that are final: an object call's end may commit with its key's
  // next batch, after its caller has its reply.
  for (int i = 0; i < 200; ++i) {
    snap = rt->metrics();
    if (value_of(snap, "perdure_store_runs", {"DEAD_LETTER", ""}) == 1
        && value_of(snap, "perdure_store_runs", {"SUCCESS", ""}) == 9)
      break;
    std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(value_of(snap, "perdure_store_runs", {"ERROR", ""}), 1);
  EXPECT_EQ(value_of(snap, "perdure_store_runs", {"DEAD_LETTER", ""}), 1);
  EXPECT_EQ(value_of(snap, "perdure_store_runs", {"SUCCESS", ""}), 9)
    << "6 orders and 3 object calls";
  EXPECT_GE(value_of(snap, "perdure_store_gauges_age_seconds"), 0);
}

TEST_F(metrics_test, a_restart_counts_its_recoveries_and_no_replayed_step) {
  {
    auto rt = make();
    rt->start();
    for (int n = 0; n < 4; ++n)
      rt->start_workflow<int>("waits", {.id = "w" + std::to_string(n)});
    rt->start_workflow<int>("order", 3, {.id = "o"}).get(30s);
    // Stopped with four runs waiting: the next start recovers them.
  }
  auto rt = make();
  rt->start();
  for (int n = 0; n < 4; ++n)
    rt->send("w" + std::to_string(n), "go", n);
  for (int n = 0; n < 4; ++n)
    EXPECT_EQ(rt->retrieve_workflow<int>("w" + std::to_string(n)).get(30s), n);
  auto snap = rt->metrics();
  EXPECT_EQ(value_of(snap, "perdure_recoveries_total"), 4);
  EXPECT_EQ(value_of(snap, "perdure_runs_started_total", {"waits"}), 0)
    << "a recovered run is not started again";
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total", {"waits", "SUCCESS"}), 4);
  EXPECT_LE(value_of(snap, "perdure_steps_total", {"order", "ok"}), 0)
    << "nothing of the ended run ran here";
}

TEST_F(metrics_test, the_endpoint_serves_prometheus_text) {
  auto rt = make();
  rt->start();
  admin::endpoint ep{*rt};
  ASSERT_TRUE(ep.listening());
  rt->start_workflow<int>("order", 2).get(30s);
  httplib::Client http{"127.0.0.1", ep.port()};
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"),
            telemetry::prometheus_content_type);
  EXPECT_NE(res->body.find("# TYPE perdure_runs_ended_total counter\n"
                           "perdure_runs_ended_total{workflow=\"order\","
                           "status=\"SUCCESS\"} 1\n"),
            std::string::npos)
    << res->body;
  EXPECT_NE(res->body.find("perdure_step_duration_seconds_bucket{workflow="
                           "\"order\",le=\"+Inf\"} 2\n"),
            std::string::npos);
  const char* promtool = std::getenv("PERDURE_PROMTOOL");
  if (!promtool)
    promtool = "/usr/bin/promtool";
  if (!std::filesystem::exists(promtool))
    GTEST_SKIP() << "no promtool (scripts/test unpacks Debian's into build/tools)";
  auto path = std::filesystem::temp_directory_path()
              / ("perdure-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream{path} << res->body;
  auto cmd = std::string{promtool} + " check metrics < " + path.string()
             + " > " + path.string() + ".out 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in{path.string() + ".out"};
  std::string said{std::istreambuf_iterator<char>{in}, {}};
  EXPECT_EQ(said, "") << said;
}

TEST_F(metrics_test, a_transactional_step_counts_as_a_step) {
  auto rt = make();
  rt->register_workflow("ledger", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.transaction("post", [](sql_session&) { return 3; });
  });
  rt->start();
  EXPECT_EQ(rt->start_workflow<int>("ledger").get(30s), 3);
  auto snap = rt->metrics();
  EXPECT_EQ(value_of(snap, "perdure_steps_total", {"ledger", "ok"}), 1);
  EXPECT_EQ(value_of(snap, "perdure_step_duration_seconds", {"ledger"}), 1);
}

TEST_F(metrics_test, a_cancel_that_refuses_a_write_is_no_fenced_write) {
  auto rt = make();
  // The step cancels its own run through a client of its own (as the CLI
  // would): the step's write then finds the row ended, before the
  // cancel's notice reaches the run.
  client canceller{db_.runtime_config("canceller")};
  rt->register_workflow("self_cancel", [&canceller](workflow_context& ctx)
                                           -> task<int> {
    auto id = ctx.workflow_id();
    co_return co_await ctx.step("cancel", [&] {
      canceller.cancel(id);
      return 1;
    });
  });
  rt->start();
  for (int i = 0; i < 5; ++i) {
    auto h = rt->start_workflow<int>("self_cancel");
    EXPECT_THROW(h.get(30s), std::exception);
  }
  auto snap = rt->metrics();
  for (int i = 0; i < 200; ++i) { // counted when the row has been read
    if (value_of(snap, "perdure_runs_ended_total",
                 {"self_cancel", "CANCELLED"}) == 5)
      break;
    std::this_thread::sleep_for(10ms);
    snap = rt->metrics();
  }
  EXPECT_EQ(value_of(snap, "perdure_fenced_writes_total"), 0)
    << "a client's cancel counted as a fence";
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total",
                     {"self_cancel", "CANCELLED"}),
            5);
}

TEST_F(metrics_test, a_run_given_up_before_it_starts_counts_as_ended) {
  {
    auto rt = make();
    rt->start();
    rt->start_workflow<int>("waits", {.id = "w"});
    // Stopped waiting: the next start recovers it, one attempt more.
  }
  auto rt = make("metrics-rt", /*max_recovery_attempts=*/0);
  rt->start();
  EXPECT_THROW(rt->retrieve_workflow<int>("w").get(30s), std::exception);
  EXPECT_EQ(rt->retrieve_workflow<int>("w").status(),
            run_status::retries_exceeded);
  auto snap = rt->metrics();
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total",
                     {"waits", "RETRIES_EXCEEDED"}),
            1);
}

TEST_F(metrics_test, a_workflow_named_like_a_handler_keeps_its_own_series) {
  auto rt = make();
  rt->register_workflow("counter/add", [](workflow_context&) -> task<int> {
    co_return 1;
  });
  rt->start();
  EXPECT_EQ(rt->start_workflow<int>("counter/add").get(30s), 1);
  EXPECT_EQ(rt->call<std::int64_t>("counter", "k", "add", std::int64_t{2}), 2);
  auto snap = rt->metrics();
  EXPECT_EQ(value_of(snap, "perdure_runs_ended_total",
                     {"counter/add", "SUCCESS"}),
            1)
    << "the workflow's end counted as an object call";
  EXPECT_EQ(value_of(snap, "perdure_object_calls_total",
                     {"counter", "SUCCESS"}),
            1);
}

} // namespace
