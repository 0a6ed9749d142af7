// The admin endpoint: health checks, the JSON API (reads, actions behind
// the token) and the web console driven in headless Chromium.

#include <gtest/gtest.h>

#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "perdure/admin/endpoint.hpp"
#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

class endpoint_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    auto cfg = db_.runtime_config("admin-rt");
    cfg.admin_listen = "127.0.0.1:0";
    cfg.admin_token = "s3cret";
    rt_ = std::make_unique<runtime>(cfg);
    rt_->register_workflow("double", [](workflow_context& ctx, int x) -> task<int> {
      auto a = co_await ctx.step("reserve", [&] { return x; });
      co_return co_await ctx.step("times-two", [&] { return 2 * a; });
    });
    rt_->register_workflow("listen", [](workflow_context& ctx) -> task<int> {
      co_return co_await ctx.recv<int>("go");
    });
    rt_->register_workflow("sleepy", [](workflow_context& ctx) -> task<int> {
      co_await ctx.sleep(1h);
      co_return 1;
    });
    rt_->start();
    ep_ = std::make_unique<admin::endpoint>(*rt_);
    ASSERT_TRUE(ep_->listening());
    http_ = std::make_unique<httplib::Client>("127.0.0.1", ep_->port());
  }

  void TearDown() override {
    ep_.reset();
    rt_.reset();
  }

  json get(const std::string& path, int want = 200) {
    auto res = http_->Get(path, {{"Authorization", "Bearer s3cret"}});
    EXPECT_TRUE(res) << path;
    if (!res)
      return {};
    EXPECT_EQ(res->status, want) << path << ": " << res->body;
    return json::parse(res->body, nullptr, false);
  }

  httplib::Result post(const std::string& path, const std::string& body,
                       const std::string& token) {
    httplib::Headers h;
    if (!token.empty())
      h.emplace("Authorization", "Bearer " + token);
    return http_->Post(path, h, body, "application/json");
  }

  test::database db_;
  std::unique_ptr<runtime> rt_;
  std::unique_ptr<admin::endpoint> ep_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(endpoint_test, health_checks_answer) {
  auto health = http_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ready = http_->Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;
  rt_->stop(); // not ready once stopped: nothing would run
  ready = http_->Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("not started"), std::string::npos) << ready->body;
}

TEST_F(endpoint_test, the_api_reads_what_the_cli_reads) {
  EXPECT_EQ(rt_->start_workflow<int>("double", 4, {.id = "d1"}).get(20s), 8);
  auto list = get("/api/runs?workflow=double");
  ASSERT_EQ(list["runs"].size(), 1u) << list.dump();
  EXPECT_EQ(list["runs"][0]["id"], "d1");
  EXPECT_EQ(list["runs"][0]["status"], "SUCCESS");
  auto run = get("/api/runs/d1");
  ASSERT_EQ(run["journal"].size(), 2u);
  EXPECT_EQ(run["journal"][1]["name"], "times-two");
  EXPECT_EQ(run["output"], 8);
  auto missing = get("/api/runs/nope", 404);
  EXPECT_NE(missing["error"].get<std::string>().find("no workflow run"),
            std::string::npos);
  EXPECT_EQ(get("/api/runs?status=NOPE", 400)["error"].get<std::string>().substr(0, 14),
            "unknown status");
  EXPECT_FALSE(get("/api/executors")["executors"].empty());
  EXPECT_TRUE(get("/api/doctor")["ok"].get<bool>());
  EXPECT_TRUE(get("/api/queues")["queues"].empty());
  auto exported = get("/api/runs/d1/export");
  EXPECT_EQ(exported["workflow"], "double");
  auto console = http_->Get("/");
  ASSERT_TRUE(console);
  EXPECT_NE(console->body.find("<title>Perdure console</title>"), std::string::npos);
  EXPECT_EQ(http_->Get("/console.js")->get_header_value("Content-Type"),
            "text/javascript; charset=utf-8");
}

// Users choose ids like `order/7`: the API takes them percent-encoded
// (`%2F`), as the console writes them, and tells a wrong path or method.
TEST_F(endpoint_test, ids_holding_a_slash_are_reached_encoded) {
  EXPECT_EQ(rt_->start_workflow<int>("double", 5, {.id = "order/7"}).get(20s), 10);
  auto run = get("/api/runs/order%2F7");
  EXPECT_EQ(run["id"], "order/7");
  EXPECT_EQ(run["output"], 10);
  EXPECT_EQ(get("/api/runs/order%2F7/export")["workflow"], "double");
  get("/api/runs/order/7", 404); // unencoded, it names another path
  auto h = rt_->start_workflow<int>("sleepy", {.id = "tenant/a/cancel"});
  auto done = post("/api/runs/tenant%2Fa%2Fcancel/cancel", "{}", "s3cret");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200) << done->body;
  EXPECT_EQ(json::parse(done->body)["cancelled"], "tenant/a/cancel");
  EXPECT_EQ(h.status(), run_status::cancelled);
  auto wrong = http_->Get("/api/runs/x/cancel",
                          {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405) << wrong->body;
  EXPECT_NE(wrong->body.find("POST acts"), std::string::npos);
}

TEST_F(endpoint_test, hostile_requests_are_refused_and_harm_nothing) {
  auto h = rt_->start_workflow<int>("sleepy", {.id = "target"});
  // With a token, reads need it too (they show payloads).
  EXPECT_EQ(http_->Get("/api/runs/target")->status, 401);
  // A form a web page posts (no preflight) is not an action.
  httplib::Headers token{{"Authorization", "Bearer s3cret"}};
  auto form = http_->Post("/api/runs/target/cancel", token, "x=1",
                          "application/x-www-form-urlencoded");
  EXPECT_EQ(form->status, 415);
  // Another name resolving here (DNS rebinding) is refused.
  httplib::Headers rebound{{"Host", "evil.example:80"},
                           {"Authorization", "Bearer s3cret"}};
  EXPECT_EQ(http_->Get("/api/runs", rebound)->status, 403);
  // A misspelled filter does not widen a bulk action.
  auto typo = post("/api/runs/cancel?workflow=sleepy&dry-run=1", "{}", "s3cret");
  EXPECT_EQ(typo->status, 400) << typo->body;
  // A path of invalid UTF-8 is a 404, not the end of the process.
  auto bad = http_->Get("/%ff%fe", token);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 404);
  EXPECT_EQ(http_->Get("/healthz")->status, 200);
  EXPECT_EQ(h.status(), run_status::pending) << "nothing above cancelled it";
  // Cancelling a run that ended is refused, not reported done.
  EXPECT_EQ(rt_->start_workflow<int>("double", 1, {.id = "over"}).get(20s), 2);
  EXPECT_EQ(post("/api/runs/over/cancel", "{}", "s3cret")->status, 400);
}

TEST_F(endpoint_test, actions_need_the_token_and_act) {
  auto h = rt_->start_workflow<int>("sleepy", {.id = "s1"});
  for (int i = 0; i < 3; ++i)
    (void)rt_->start_workflow<int>("sleepy", {.id = "bulk-" + std::to_string(i)});
  auto refused = post("/api/runs/s1/cancel", "{}", "");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(post("/api/runs/s1/cancel", "{}", "wrong")->status, 401);
  EXPECT_EQ(h.status(), run_status::pending) << "a refused action did nothing";
  auto done = post("/api/runs/s1/cancel", "{}", "s3cret");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200) << done->body;
  EXPECT_THROW(h.get(20s), perdure::error);
  EXPECT_EQ(h.status(), run_status::cancelled);
  auto everything = post("/api/runs/cancel", "{}", "s3cret");
  EXPECT_EQ(everything->status, 400) << "a bulk action without a filter";
  auto look = post("/api/runs/cancel?id_prefix=bulk-&dry_run=1", "{}", "s3cret");
  ASSERT_EQ(look->status, 200) << look->body;
  EXPECT_EQ(json::parse(look->body)["matched"], 3);
  EXPECT_EQ(rt_->list_runs({.status = run_status::pending}).runs.size(), 3u);
  auto bulk = post("/api/runs/cancel?id_prefix=bulk-", "{}", "s3cret");
  EXPECT_EQ(json::parse(bulk->body)["done"], 3);
  EXPECT_TRUE(rt_->list_runs({.status = run_status::pending}).runs.empty());
  auto listener = rt_->start_workflow<int>("listen", {.id = "l1"});
  EXPECT_EQ(post("/api/runs/l1/send/go", "41", "")->status, 401);
  auto sent = post("/api/runs/l1/send/go", "41", "s3cret");
  EXPECT_EQ(sent->status, 200) << sent->body;
  EXPECT_EQ(listener.get(20s), 41);
  EXPECT_EQ(post("/api/runs/l1/send/go", "not json", "s3cret")->status, 400);
  auto again = post("/api/runs/s1/resume", "{\"reason\":\"by hand\"}", "s3cret");
  EXPECT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(rt_->retrieve_workflow<int>("s1").status(), run_status::pending);
}

TEST_F(endpoint_test, off_unless_configured_and_never_open_beyond_loopback) {
  client plain{db_.runtime_config("plain")};
  admin::endpoint off{plain};
  EXPECT_FALSE(off.listening());
  try {
    admin::endpoint open{plain, {.listen = "0.0.0.0:0"}};
    FAIL() << "an endpoint beyond loopback without a token";
  } catch (const perdure::error& e) {
    EXPECT_NE(std::string{e.what()}.find("without a token"), std::string::npos);
  }
  admin::endpoint guarded{plain, {.listen = "0.0.0.0:0", .token = "t"}};
  EXPECT_TRUE(guarded.listening());
  EXPECT_THROW((admin::endpoint{plain, {.listen = "nonsense"}}), perdure::error);
}

/// The console's pages in a real browser: Debian's chromium, driven over
/// the DevTools protocol by console_check.py.
TEST_F(endpoint_test, the_console_shows_a_run_and_cancels_one_in_chromium) {
  std::string chromium;
  for (auto* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::filesystem::exists(p))
      chromium = p;
  if (chromium.empty()) {
    if (std::getenv("CI"))
      FAIL() << "chromium is not installed (scripts/test installs it)";
    GTEST_SKIP() << "chromium is not installed: apt-get install chromium";
  }
  EXPECT_EQ(rt_->start_workflow<int>("double", 4, {.id = "shown"}).get(20s), 8);
  auto victim = rt_->start_workflow<int>("sleepy", {.id = "victim"});
  // A console served by a client process with no token configured, on
  // loopback, for an operator at the machine (the token is covered above).
  client console_process{db_.runtime_config("console")};
  admin::endpoint open{console_process, {.listen = "127.0.0.1:0"}};
  auto shot = std::filesystem::path{PERDURE_BINARY_DIR} / "console-run.png";
  auto cmd = std::string{"/usr/bin/python3 "} + PERDURE_CONSOLE_CHECK + " "
             + chromium + " http://127.0.0.1:" + std::to_string(open.port())
             + " shown reserve,times-two victim " + shot.string() + " 2>&1";
  std::string output;
  auto* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[512];
  while (auto n = std::fread(buf, 1, sizeof buf, pipe))
    output.append(buf, n);
  auto status = ::pclose(pipe);
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("run page of shown shows steps"), std::string::npos)
    << output;
  EXPECT_TRUE(std::filesystem::exists(shot));
  EXPECT_THROW(victim.get(20s), perdure::error);
  EXPECT_EQ(victim.status(), run_status::cancelled)
    << "the console's Cancel ended the run";
}

} // namespace
