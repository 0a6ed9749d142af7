// Traces: one trace id from the starter's traceparent through a run's
// steps, its child and its object call, through a SIGKILL and a takeover
// (PostgreSQL: several processes), with no span for a replayed operation
// and the new attempt linked to the one that died; a collector that is
// down loses no run. Spans are read by a collector of the test's own.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "observability/otlp_collector.hpp"
#include "observability/traced_order.hpp"
#include "perdure/detail/tracing/run_trace.hpp"
#include "perdure/perdure.hpp"
#include "perdure/persistence/records.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/telemetry/otlp.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

const std::string starter_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
const std::string starter_span = "00f067aa0ba902b7";
const std::string starter = "00-" + starter_trace + "-" + starter_span + "-01";

class traces_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    sql_ = std::make_unique<test::sql_client>(db_);
  }

  std::shared_ptr<telemetry::otlp_exporter> exporter(std::string endpoint) {
    return std::make_shared<telemetry::otlp_exporter>(telemetry::otlp_options{
      .endpoint = std::move(endpoint),
      .service_name = "traces-test",
      .flush_every = 100ms});
  }

  /// A runtime's configuration that exports its spans to the collector
  /// (through `spans_`).
  config traced_config() {
    spans_ = exporter(collector_.endpoint() + "/v1/traces");
    auto cfg = db_.runtime_config("traces-rt");
    cfg.span_sink = spans_;
    return cfg;
  }

  /// Runs "signup" (registered by `signup`, beside the queue "mail" and its
  /// workflow "send", which returns 1) in the starter's trace, waits for
  /// queue item `item`, stops the runtime and flushes the spans. Stopped
  /// before the flush: an attempt's span ends with its actor, which may be
  /// after its end was committed (and the handle returned).
  void run_signup(const std::function<void(runtime&)>& signup,
                  const std::string& item) {
    auto rt = std::make_unique<runtime>(traced_config());
    queues::register_queue(*rt, "mail", {});
    rt->register_workflow("send", [](workflow_context& ctx, int n)
                                    -> task<int> {
      co_return co_await ctx.step("deliver", [n] { return n; });
    });
    signup(*rt);
    rt->start();
    rt->start_workflow<int>("signup", {.traceparent = starter}).get(30s);
    EXPECT_EQ(rt->retrieve_workflow<int>(item).get(30s), 1);
    rt.reset();
    spans_->flush();
  }

  /// The one span named `name`, or a failure.
  test::received_span one(const std::string& name) {
    auto found = collector_.named(name);
    EXPECT_EQ(found.size(), 1u) << "spans named '" << name << "'";
    return found.empty() ? test::received_span{} : found.front();
  }

  /// What the test relies on in the spans of one "order" run, whoever ran
  /// it: one trace, the starter's; each live operation a child of its
  /// attempt; the child run and the object invocation children of the
  /// operations that started them. `died_after_reserve`: the attempt
  /// that ran reserve died unreported (its span is the link's target).
  void check_order_trace(bool died_after_reserve = false) {
    auto spans = collector_.spans();
    ASSERT_FALSE(spans.empty());
    for (auto& s : spans)
      EXPECT_EQ(s.trace_id, starter_trace) << s.name;
    EXPECT_TRUE(collector_.malformed().empty());
    auto attempts = collector_.named("run order");
    ASSERT_FALSE(attempts.empty());
    std::set<std::string> attempt_ids;
    for (auto& a : attempts) {
      EXPECT_EQ(a.parent_span_id, starter_span);
      attempt_ids.insert(a.span_id);
    }
    for (auto name : {"step reserve", "step charge", "start ship",
                      "call account/add", "step notify"}) {
      auto s = one(name);
      if (died_after_reserve && s.name == "step reserve")
        EXPECT_EQ(attempt_ids.count(s.parent_span_id), 0u);
      else
        EXPECT_EQ(attempt_ids.count(s.parent_span_id), 1u) << name;
    }
    auto ship = one("run ship");
    EXPECT_EQ(ship.parent_span_id, one("start ship").span_id);
    EXPECT_EQ(one("step label").parent_span_id, ship.span_id);
    EXPECT_EQ(one("run account/add").parent_span_id,
              one("call account/add").span_id);
  }

  test::database db_;
  std::unique_ptr<test::sql_client> sql_;
  test::otlp_collector collector_;
  std::shared_ptr<telemetry::otlp_exporter> spans_;
};

TEST(run_trace_ids, each_operation_of_each_activation_has_its_own_span) {
  persistence::run_record run;
  run.id = "ids-run";
  run.owner.epoch = 3;
  std::set<std::string> ids;
  for (int activation = 0; activation < 3; ++activation) {
    detail::run_trace trace{run, /*reporting=*/true};
    ids.insert(telemetry::hex(trace.attempt().span));
    for (std::int32_t seq = 0; seq < 2000; ++seq) {
      auto op = trace.operation(seq);
      EXPECT_EQ(op.trace, trace.trace());
      EXPECT_EQ(trace.operation(seq).span, op.span) << "derived: stable";
      ids.insert(telemetry::hex(op.span));
    }
  }
  detail::run_trace{run, true}.forget();
  EXPECT_EQ(ids.size(), 3u * 2001u) << "two operations share a span id";
  EXPECT_EQ(ids.count("0000000000000000"), 0u);
}

TEST_F(traces_test, one_trace_runs_from_the_starter_through_children_and_calls) {
  {
    runtime rt{traced_config()};
    test::register_traced_order(rt, [] {});
    rt.start();
    auto h = rt.start_workflow<std::string>(
      "order", {.id = "o1", .traceparent = starter});
    EXPECT_EQ(h.get(30s), "done");
  }
  // The trace is stored with the run and handed to its child.
  EXPECT_EQ(sql_->scalar("SELECT traceparent FROM " + sql_->table("runs")
                         + " WHERE id = 'o1'"),
            starter);
  EXPECT_EQ(sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                         + " WHERE parent_id = 'o1' AND traceparent LIKE '00-"
                         + starter_trace + "-%'"),
            "2");
  spans_->flush();
  check_order_trace();
  EXPECT_EQ(one("run order").service, "traces-test");
  EXPECT_GT(spans_->totals().exported, 0u);
  EXPECT_EQ(spans_->totals().dropped, 0u);
}

TEST_F(traces_test, a_malformed_traceparent_is_refused) {
  auto cfg = db_.runtime_config("traces-rt");
  runtime rt{cfg};
  test::register_traced_order(rt, [] {});
  rt.start();
  try {
    rt.start_workflow<std::string>("order", {.traceparent = "00-XYZ-01"});
    FAIL() << "started";
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string{e.what()}.find("W3C"), std::string::npos)
      << e.what();
  }
}

TEST_F(traces_test, a_collector_that_is_down_loses_no_run) {
  // Nothing listens on port 1: every request fails at once.
  auto spans = exporter("http://127.0.0.1:1/v1/traces");
  auto cfg = db_.runtime_config("traces-rt");
  cfg.span_sink = spans;
  runtime rt{cfg};
  test::register_traced_order(rt, [] {});
  rt.start();
  std::vector<workflow_handle<std::string>> runs;
  for (int i = 0; i < 20; ++i)
    runs.push_back(rt.start_workflow<std::string>("order"));
  for (auto& h : runs)
    EXPECT_EQ(h.get(60s), "done");
  spans->flush();
  auto t = spans->totals();
  EXPECT_EQ(t.exported, 0u);
  EXPECT_GT(t.dropped, 0u);
  EXPECT_GE(t.failed_requests, 1u);
}

/// Sets environment variables for the processes a test starts, and unsets
/// them however the test ends.
struct env_for_children {
  std::vector<std::string> names;
  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    names.push_back(name);
  }
  ~env_for_children() {
    for (auto& n : names)
      unsetenv(n.c_str());
  }
};

TEST_F(traces_test, a_trace_survives_a_sigkill_and_a_takeover) {
  if (!db_.postgres)
    GTEST_SKIP() << "SQLite runs one runtime per file";
  client{db_.runtime_config("setup")};
  env_for_children env;
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", collector_.endpoint());
  env.set("OTEL_SERVICE_NAME", "traced-worker");
  env.set("OTEL_BSP_SCHEDULE_DELAY", "100");
  auto worker = [&](const std::string& executor, const std::string& mode) {
    auto w = std::make_unique<test::child_process>(std::vector<std::string>{
      PERDURE_TRACED_WORKER, db_.url, db_.schema, executor, mode});
    EXPECT_TRUE(w->wait_for("READY", 20s)) << w->output();
    return w;
  };
  auto a = worker("a", "hang");
  client c{db_.runtime_config("web")};
  auto h = c.start_workflow<std::string>(
    "order", {.id = "o2", .traceparent = starter});
  ASSERT_TRUE(a->wait_for("CHARGING", 20s)) << a->output();
  // What a reported before it died: its reserve step.
  ASSERT_TRUE(test::eventually(
    [&] { return !collector_.named("step reserve").empty(); }, 10s));
  auto reserve = collector_.named("step reserve").front();
  a->sigkill();
  auto b = worker("b", "run");
  EXPECT_EQ(h.get(60s), "done");
  // Everything b reports of the run: its attempt, the child's and the
  // call's attempts, and the steps of all three.
  ASSERT_TRUE(test::eventually(
    [&] {
      for (auto name : {"run order", "step notify", "run ship", "step label",
                        "run account/add"})
        if (collector_.named(name).empty())
          return false;
      return true;
    },
    10s));
  check_order_trace(true);
  // a's attempt never ended (no span); b's is linked to it, and b replayed
  // reserve without a span of its own.
  auto attempt = one("run order");
  EXPECT_EQ(attempt.service, "traced-worker");
  ASSERT_EQ(attempt.links.size(), 1u);
  EXPECT_EQ(attempt.links[0].first, starter_trace);
  EXPECT_EQ(attempt.links[0].second, reserve.parent_span_id)
    << "the new attempt links to the attempt that ran reserve";
  EXPECT_NE(attempt.span_id, reserve.parent_span_id);
  EXPECT_EQ(one("step charge").parent_span_id, attempt.span_id);
}

TEST_F(traces_test, a_queue_item_enqueued_in_a_step_joins_its_trace) {
  run_signup(
    [](runtime& rt) {
      rt.register_workflow("signup", [&rt](workflow_context& ctx)
                                       -> task<int> {
        co_await ctx.step("enqueue", [&] {
          queues::enqueue<int>(rt, "mail", "send", 1, {.id = "mail-1"});
          return 0;
        });
        co_return 0;
      });
    },
    "mail-1");
  auto enqueue = one("step enqueue");
  auto item = one("run send");
  EXPECT_EQ(item.trace_id, starter_trace);
  EXPECT_EQ(item.parent_span_id, enqueue.span_id)
    << "the item's run is a child of the step that enqueued it";
}

TEST_F(traces_test, a_queue_item_staged_in_a_transaction_joins_its_trace) {
  run_signup(
    [](runtime& rt) {
      rt.register_workflow("signup", [](workflow_context& ctx) -> task<int> {
        co_await ctx.transaction("stage", [&](sql_session& s) {
          queues::enqueue(s, "mail", "send", 1, {.id = "mail-2"});
          return 0;
        });
        co_return 0;
      });
    },
    "mail-2");
  auto stage = one("step stage");
  EXPECT_EQ(stage.trace_id, starter_trace);
  auto item = one("run send");
  EXPECT_EQ(item.trace_id, starter_trace);
  EXPECT_EQ(item.parent_span_id, stage.span_id)
    << "the staged item's run is a child of the transaction that staged it";
}

TEST_F(traces_test, a_trace_its_starter_did_not_sample_reports_no_spans) {
  auto cfg = traced_config();
  const std::string quiet_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
  auto unsampled = "00-" + quiet_trace + "-" + starter_span + "-00";
  {
    runtime rt{cfg};
    test::register_traced_order(rt, [] {});
    rt.start();
    EXPECT_EQ(rt.start_workflow<std::string>(
                  "order", {.id = "quiet", .traceparent = unsampled})
                .get(30s),
              "done");
    // A sampled run beside it reports (the exporter works).
    EXPECT_EQ(rt.start_workflow<std::string>(
                  "order", {.id = "loud", .traceparent = starter})
                .get(30s),
              "done");
  }
  spans_->flush();
  // The flag is kept with the run and handed on: its child stays unsampled.
  EXPECT_EQ(sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                         + " WHERE parent_id = 'quiet' AND traceparent LIKE "
                           "'%-00'"),
            "2");
  std::size_t of_quiet = 0, of_loud = 0;
  for (auto& s : collector_.spans()) {
    of_quiet += s.trace_id == quiet_trace;
    of_loud += s.trace_id == starter_trace;
  }
  EXPECT_EQ(of_quiet, 0u) << "spans of a run whose trace was not sampled";
  EXPECT_GT(of_loud, 0u);
}

TEST_F(traces_test, a_run_woken_from_passivation_links_to_its_activation_before) {
  auto cfg = traced_config();
  cfg.passivate_after = 50ms;
  {
    runtime rt{cfg};
    rt.register_workflow("nap", [](workflow_context& ctx) -> task<int> {
      co_await ctx.step("before", [] { return 1; });
      co_await ctx.sleep(1500ms); // passivated meanwhile
      co_return co_await ctx.step("after", [] { return 2; });
    });
    rt.start();
    EXPECT_EQ(
      rt.start_workflow<int>("nap", {.traceparent = starter}).get(30s), 2);
  }
  spans_->flush();
  auto attempts = collector_.named("run nap");
  ASSERT_EQ(attempts.size(), 2u) << "one attempt span per activation";
  auto before = one("step before");
  auto after = one("step after");
  auto first = attempts[0].span_id == before.parent_span_id ? attempts[0]
                                                             : attempts[1];
  auto woken = attempts[0].span_id == before.parent_span_id ? attempts[1]
                                                             : attempts[0];
  EXPECT_EQ(first.span_id, before.parent_span_id);
  EXPECT_NE(woken.span_id, first.span_id);
  EXPECT_EQ(after.parent_span_id, woken.span_id);
  for (auto& a : attempts) {
    EXPECT_EQ(a.trace_id, starter_trace);
    EXPECT_EQ(a.parent_span_id, starter_span);
  }
  ASSERT_EQ(woken.links.size(), 1u);
  EXPECT_EQ(woken.links[0].second, first.span_id)
    << "the woken activation links to the one before passivation";
}

} // namespace
