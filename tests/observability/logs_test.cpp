// ctx.log(): the application's logger, silent while a run replays (a
// recovered run does not repeat the lines of what its journal replays),
// each line tagged with the run, its workflow, the step and attempt, the
// executor, the version and the trace id.

#include <gtest/gtest.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <string>
#include <thread>

#include "perdure/json_lines_formatter.hpp"
#include "perdure/perdure.hpp"
#include "perdure/telemetry/trace.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

class logs_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    sink_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10000);
    logger_ = std::make_shared<spdlog::logger>("app", sink_);
    logger_->set_level(spdlog::level::info);
    logger_->set_pattern("%v");
  }

  std::unique_ptr<runtime> make() {
    auto cfg = db_.runtime_config("logs-rt");
    cfg.logger = logger_;
    cfg.app_version = "v7";
    auto rt = std::make_unique<runtime>(cfg);
    rt->register_workflow("greeter", [this](workflow_context& ctx,
                                            std::string who) -> task<std::string> {
      ctx.log().info("greeting {}", who);
      auto n = co_await ctx.step(
        "charge",
        [&] {
          ctx.log().info("charging, try {}", ++tries_);
          if (tries_ == 1)
            throw std::runtime_error("busy");
          return 5;
        },
        retry_policy{.max_attempts = 3, .initial_delay = 1ms});
      ctx.log().info("charged {}", n);
      co_await ctx.step("note", [] { return 0; });
      // After the last recorded operation: a recovery runs this again
      // (and logs it again), as it runs any code past its journal.
      ctx.log().info("waiting for go");
      auto go = co_await ctx.recv<int>("go");
      ctx.log().info("went on with {}", go);
      co_return who;
    });
    return rt;
  }

  /// Every line so far (read under the sink's lock: step threads log).
  std::string lines() {
    std::string out;
    for (auto& l : sink_->last_formatted())
      out += l + "\n";
    return out;
  }

  test::database db_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> logger_;
  std::atomic<int> tries_{0};
};

TEST_F(logs_test, a_recovered_run_logs_nothing_twice_and_every_line_is_tagged) {
  {
    auto rt = make();
    rt->start();
    rt->start_workflow<std::string>("greeter", std::string{"ada"}, {.id = "g1"});
    for (int i = 0; i < 400 && count_of(lines(), "waiting for go") == 0;
         ++i)
      std::this_thread::sleep_for(10ms);
    // Stopped while the run waits: the next start replays what came
    // before the wait.
  }
  {
    auto rt = make();
    rt->start();
    rt->send("g1", "go", 3);
    EXPECT_EQ(rt->retrieve_workflow<std::string>("g1").get(30s), "ada");
  }
  auto out = lines();
  EXPECT_EQ(count_of(out, "greeting ada"), 1) << out;
  EXPECT_EQ(count_of(out, "charging, try"), 2) << out; // two live attempts
  EXPECT_EQ(count_of(out, "charged 5"), 1) << out;
  EXPECT_EQ(count_of(out, "went on with 3"), 1) << out;
  EXPECT_EQ(count_of(out, "[run=g1 workflow=greeter step=0 attempt="), 1)
    << out; // "greeting", before the first step
  // The trace id: the run's own (it was started without a traceparent),
  // derived from its id.
  auto trace = telemetry::hex(telemetry::derived_trace_id("g1"));
  EXPECT_EQ(count_of(out, "step=0 (charge) attempt=2 executor=logs-rt "
                          "version=v7 trace_id=" + trace + "] charging, try 2"),
            1)
    << out;
}

TEST_F(logs_test, json_lines_carry_the_tags_as_fields) {
  logger_->set_formatter(std::make_unique<json_lines_formatter>());
  {
    auto rt = make();
    rt->start();
    rt->start_workflow<std::string>("greeter", std::string{"bob"},
                                    {.id = "g2", .traceparent =
                                       "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                                       "00f067aa0ba902b7-01"});
    rt->send("g2", "go", 1);
    EXPECT_EQ(rt->retrieve_workflow<std::string>("g2").get(30s), "bob");
  }
  int app_lines = 0, perdure_lines = 0;
  for (auto& line : sink_->last_formatted()) {
    auto j = nlohmann::json::parse(line); // every line is one JSON object
    ASSERT_TRUE(j.contains("time") && j.contains("level")
                && j.contains("message"))
      << line;
    if (j.contains("run")) {
      ++app_lines;
      EXPECT_EQ(j["run"], "g2") << line;
      EXPECT_EQ(j["workflow"], "greeter") << line;
      EXPECT_EQ(j["executor"], "logs-rt") << line;
      EXPECT_EQ(j["version"], "v7") << line;
      EXPECT_EQ(j["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736") << line;
      EXPECT_EQ(j["message"].get<std::string>().find('['), std::string::npos)
        << line;
      if (j["message"] == "charging, try 2") {
        EXPECT_EQ(j["step"], "0 (charge)") << line;
      }
    } else if (j["message"].get<std::string>().rfind("perdure:", 0) == 0) {
      ++perdure_lines;
    }
  }
  // greeting, two tries, charged, waiting, went on; Perdure's own lines
  // (if any at this level) parsed as well.
  EXPECT_EQ(app_lines, 6);
  (void)perdure_lines;
}

} // namespace
