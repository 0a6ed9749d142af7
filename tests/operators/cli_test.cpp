// The `perdure` CLI against a store holding runs in every status, an
// object, a saga and a queue: each command's human and JSON output, bulk
// actions by filter with a dry run first, exit codes, and a CLI action
// racing a running process.

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "operators/cli_runner.hpp"
#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/sagas/saga.hpp"
#include "perdure/retention/collector.hpp"
#include "perdure/schedules/schedule.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// An operator's tool changes no schema (its role may be read-only):
// without migrate_schema a store with no (or an older) schema is an error
// that says what to do, and once migrated it opens as it is.
TEST(schema_check, a_client_that_may_not_migrate_says_to_run_perdure_migrate) {
  auto db = test::database::fresh();
  auto cfg = db.runtime_config("reader");
  cfg.migrate_schema = false;
  try {
    client c{cfg};
    FAIL() << "opened a store without its schema";
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string{e.what()}.find("perdure migrate"), std::string::npos)
      << e.what();
  }
  { client migrating{db.runtime_config("migrator")}; }
  client c{cfg};
  auto info = c.store_info();
  EXPECT_EQ(info.schema_version, info.latest_schema_version);
}

struct tally {
  std::int64_t total = 0;
  template <class A>
  void serialize(A& a) {
    a(CEREAL_NVP(total));
  }
};

class cli_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    rt_ = std::make_unique<runtime>(db_.runtime_config("ops-rt"));
    auto& rt = *rt_;
    rt.register_workflow("double", [](workflow_context& ctx, int x) -> task<int> {
      co_return co_await ctx.step("times-two", [&] { return 2 * x; });
    });
    rt.register_workflow("fail", [this](workflow_context& ctx) -> task<int> {
      co_await ctx.step("reserve", [] { return 1; });
      co_return co_await ctx.step("charge", [this] {
        if (!fixed_)
          throw terminal_error("card declined (the bug)");
        return 7;
      });
    });
    rt.register_workflow("approve", [](workflow_context& ctx) -> task<std::string> {
      auto approval = co_await ctx.awakeable<std::string>();
      co_await ctx.step("ask", [&] { return approval.id(); });
      co_return "approved by " + co_await approval;
    });
    rt.register_workflow("sleepy", [](workflow_context& ctx) -> task<int> {
      co_await ctx.sleep(1h);
      co_return 1;
    });
    rt.register_workflow("blocking", [this](workflow_context& ctx) -> task<int> {
      co_return co_await ctx.step("slow", [this] {
        in_step_ = true;
        while (!release_)
          std::this_thread::sleep_for(5ms);
        return 3;
      });
    });
    rt.register_workflow("trip", [](workflow_context& ctx) -> task<int> {
      co_return co_await sagas::run<int>(ctx, [&](sagas::saga& s) -> task<int> {
        auto book = [] { return 1; };
        auto undo = [](const int&) {};
        co_await s.step("flight", book, undo);
        auto refuse = []() -> int { throw terminal_error("no hotel"); };
        co_await s.step("hotel", refuse, undo);
        co_return 0;
      });
    });
    rt.register_object<tally>("tally").handler(
      "add", [](object_context<tally>& ctx, std::int64_t n) -> task<std::int64_t> {
        ctx.state().total += n;
        co_return ctx.state().total;
      });
    queues::register_queue(rt, "mail", {.concurrency = 2,
                                        .retry = {.max_attempts = 1}});
    rt.start();
  }

  void TearDown() override {
    release_ = true;
  }

  test::cli_result cli(std::vector<std::string> args) {
    return test::run_cli(db_, args);
  }

  json cli_json(std::vector<std::string> args) {
    args.push_back("--json");
    auto r = cli(args);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    auto j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }

  /// One run in each status the store reports, by id.
  void populate() {
    EXPECT_EQ(rt_->start_workflow<int>("double", 21, {.id = "ok-1"}).get(20s), 42);
    auto failed = rt_->start_workflow<int>("fail", {.id = "failed-1"});
    EXPECT_THROW(failed.get(20s), perdure::error);
    auto sleeper = rt_->start_workflow<int>("sleepy", {.id = "sleeper-1"});
    auto cancelled = rt_->start_workflow<int>("sleepy", {.id = "cancelled-1"});
    cancelled.cancel();
    EXPECT_THROW(cancelled.get(20s), perdure::error);
    waiting_ = rt_->start_workflow<std::string>("approve", {.id = "approve-1"});
    auto trip = rt_->start_workflow<int>("trip", {.id = "trip-1"});
    EXPECT_THROW(trip.get(20s), perdure::error);
    EXPECT_EQ(rt_->call<std::int64_t>("tally", "k1", "add", std::int64_t{5}), 5);
    auto dead = queues::enqueue<int>(*rt_, "mail", "fail", {.id = "mail-1"});
    EXPECT_THROW(dead.get(20s), perdure::error);
    ASSERT_TRUE(test::eventually([&] {
      return rt_->history("approve-1").size() >= 2;
    }));
  }

  test::database db_;
  std::unique_ptr<runtime> rt_;
  std::optional<workflow_handle<std::string>> waiting_;
  std::atomic<bool> fixed_{false}, in_step_{false}, release_{false};
};

std::set<std::string> ids_of(const json& runs) {
  std::set<std::string> out;
  for (auto& r : runs)
    out.insert(r["id"].get<std::string>());
  return out;
}

TEST_F(cli_test, runs_list_shows_every_status_as_a_table_and_as_json) {
  populate();
  auto human = cli({"runs", "list", "--limit", "100"});
  ASSERT_EQ(human.code, 0) << human.err;
  for (auto* word : {"ID", "WORKFLOW", "STATUS", "ok-1", "SUCCESS", "failed-1",
                     "ERROR", "sleeper-1", "PENDING", "cancelled-1",
                     "CANCELLED", "trip-1", "COMPENSATED", "mail-1",
                     "DEAD_LETTER", "tally/k1.add", "fail @mail"})
    EXPECT_NE(human.out.find(word), std::string::npos) << word << "\n" << human.out;
  EXPECT_EQ(human.out.find("\x1b["), std::string::npos) << "no colour off a terminal";
  auto j = cli_json({"runs", "list", "--limit", "100"});
  std::map<std::string, std::string> status;
  for (auto& r : j["runs"])
    status[r["id"]] = r["status"];
  EXPECT_EQ(status["ok-1"], "SUCCESS");
  EXPECT_EQ(status["failed-1"], "ERROR");
  EXPECT_EQ(status["sleeper-1"], "PENDING");
  EXPECT_EQ(status["approve-1"], "PENDING");
  EXPECT_EQ(status["cancelled-1"], "CANCELLED");
  EXPECT_EQ(status["trip-1"], "COMPENSATED");
  EXPECT_EQ(status["mail-1"], "DEAD_LETTER");
  EXPECT_TRUE(j["next_cursor"].is_null());
  // Newest first.
  std::vector<std::string> created;
  for (auto& r : j["runs"])
    created.push_back(r["created_at"]);
  EXPECT_TRUE(std::is_sorted(created.rbegin(), created.rend()));
}

TEST_F(cli_test, runs_list_filters_and_pages) {
  populate();
  EXPECT_EQ(ids_of(cli_json({"runs", "list", "--status", "error"})["runs"]),
            std::set<std::string>{"failed-1"});
  EXPECT_EQ(ids_of(cli_json({"runs", "list", "--workflow", "sleepy"})["runs"]),
            (std::set<std::string>{"sleeper-1", "cancelled-1"}));
  EXPECT_EQ(ids_of(cli_json({"runs", "list", "--id-prefix", "sleep"})["runs"]),
            std::set<std::string>{"sleeper-1"});
  EXPECT_EQ(ids_of(cli_json({"runs", "list", "--queue", "mail"})["runs"]),
            std::set<std::string>{"mail-1"});
  auto calls = cli_json({"runs", "list", "--object", "tally/k1"})["runs"];
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["object_key"], "k1");
  auto active = ids_of(cli_json({"runs", "list", "--active"})["runs"]);
  EXPECT_EQ(active, (std::set<std::string>{"sleeper-1", "approve-1"}));
  EXPECT_TRUE(cli_json({"runs", "list", "--created", "..1h"})["runs"].empty())
    << "nothing was created before an hour ago";
  EXPECT_EQ(cli_json({"runs", "list", "--created", "1h.."})["runs"].size(),
            cli_json({"runs", "list", "--limit", "100"})["runs"].size());
  auto ended = ids_of(cli_json({"runs", "list", "--ended", "10m"})["runs"]);
  EXPECT_EQ(ended.count("sleeper-1"), 0u) << "a PENDING run has not ended";
  EXPECT_EQ(ended.count("ok-1"), 1u);
  EXPECT_EQ(ids_of(cli_json({"runs", "list", "--version", "no-such"})["runs"]),
            std::set<std::string>{});
  EXPECT_EQ(ids_of(cli_json({"runs", "list", "--executor", "ops-rt",
                             "--workflow", "double"})["runs"]),
            std::set<std::string>{"ok-1"});
  // Pages of 2 walk every run once.
  std::set<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    std::vector<std::string> args{"runs", "list", "--limit", "2"};
    if (!cursor.empty()) {
      args.push_back("--cursor");
      args.push_back(cursor);
    }
    auto page = cli_json(args);
    for (auto& id : ids_of(page["runs"]))
      EXPECT_TRUE(seen.insert(id).second) << id << " on two pages";
    cursor = page["next_cursor"].is_null() ? "" : page["next_cursor"].get<std::string>();
    ++pages;
  } while (!cursor.empty() && pages < 50);
  EXPECT_EQ(seen.size(), cli_json({"runs", "list", "--limit", "100"})["runs"].size());
  EXPECT_GE(pages, 4);
}

TEST_F(cli_test, bad_filters_and_unknown_ids_say_what_to_do_with_their_exit_codes) {
  populate();
  auto bad_status = cli({"runs", "list", "--status", "FINISHED"});
  EXPECT_EQ(bad_status.code, 2);
  EXPECT_NE(bad_status.err.find("unknown status 'FINISHED'"), std::string::npos)
    << bad_status.err;
  auto bad_time = cli({"runs", "list", "--created", "yesterday.."});
  EXPECT_EQ(bad_time.code, 2);
  EXPECT_NE(bad_time.err.find("ISO 8601"), std::string::npos) << bad_time.err;
  auto bad_object = cli({"runs", "list", "--object", "/k"});
  EXPECT_EQ(bad_object.code, 2);
  auto unknown = cli({"runs", "show", "no-such-run"});
  EXPECT_EQ(unknown.code, 3);
  EXPECT_NE(unknown.err.find("no workflow run with id 'no-such-run'"),
            std::string::npos) << unknown.err;
  auto unknown_json = cli({"runs", "show", "no-such-run", "--json"});
  EXPECT_EQ(unknown_json.code, 3);
  EXPECT_EQ(json::parse(unknown_json.out)["exit_code"], 3);
  auto no_target = cli({"runs", "cancel"});
  EXPECT_EQ(no_target.code, 2);
  EXPECT_NE(no_target.err.find("give run ids, or a filter"), std::string::npos);
  auto ended = cli({"runs", "cancel", "ok-1"});
  EXPECT_EQ(ended.code, 4) << "a run that ended is not reported cancelled";
  EXPECT_NE(ended.err.find("had ended SUCCESS"), std::string::npos) << ended.err;
  auto not_resumable = cli({"runs", "resume", "ok-1"});
  EXPECT_EQ(not_resumable.code, 4);
  EXPECT_NE(not_resumable.err.find("is SUCCESS"), std::string::npos)
    << not_resumable.err;
  auto usage = cli({"runs", "frobnicate"});
  EXPECT_EQ(usage.code, 2);
  if (!db_.postgres) {
    auto missing = db_.url + ".missing";
    auto r = test::run_cli(test::database::named(missing, db_.schema),
                           {"runs", "list"});
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_NE(r.err.find("no SQLite database"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(missing.substr(9)))
      << "the CLI never creates a database";
  }
}

TEST_F(cli_test, runs_show_has_the_journal_children_waits_and_undo_stack) {
  populate();
  auto human = cli({"runs", "show", "failed-1"});
  ASSERT_EQ(human.code, 0) << human.err;
  for (auto* word : {"Run failed-1", "workflow", "fail", "ERROR", "Journal",
                     "reserve", "charge", "card declined", "owner", "ops-rt"})
    EXPECT_NE(human.out.find(word), std::string::npos) << word << "\n" << human.out;
  auto j = cli_json({"runs", "show", "failed-1"});
  ASSERT_EQ(j["journal"].size(), 2u) << j.dump(2);
  EXPECT_EQ(j["journal"][0]["name"], "reserve");
  EXPECT_EQ(j["journal"][0]["result"], 1);
  EXPECT_EQ(j["journal"][1]["outcome"], "terminal");
  EXPECT_GE(j["journal"][1]["duration_ms"].get<std::int64_t>(), 0);
  auto waiting = cli_json({"runs", "show", "approve-1"});
  ASSERT_FALSE(waiting["waits"].empty()) << waiting.dump(2);
  EXPECT_EQ(waiting["waits"][0]["kind"], "awakeable");
  EXPECT_EQ(waiting["waits"][0]["what"], "awk_0_approve-1");
  auto sleeper = cli({"runs", "show", "sleeper-1"});
  EXPECT_NE(sleeper.out.find("sleep until"), std::string::npos) << sleeper.out;
  auto trip = cli_json({"runs", "show", "trip-1"});
  EXPECT_EQ(trip["status"], "COMPENSATED");
  std::set<std::string> names;
  for (auto& e : trip["journal"])
    names.insert(e["name"]);
  EXPECT_EQ(names.count("undo:flight"), 1u) << trip.dump(2);
  EXPECT_TRUE(trip["undo_stack"].empty()) << "everything was undone";
}

TEST_F(cli_test, an_awakeable_resolved_from_the_cli_finishes_the_run) {
  populate();
  auto r = cli({"awakeables", "resolve", "awk_0_approve-1", "\"ops on call\""});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("resolved awk_0_approve-1"), std::string::npos);
  EXPECT_EQ(waiting_->get(20s), "approved by ops on call");
  auto again = cli({"awakeables", "resolve", "awk_0_approve-1", "\"x\""});
  EXPECT_EQ(again.code, 4) << "already resolved";
  auto unknown = cli({"awakeables", "reject", "awk_9_nobody", "no"});
  EXPECT_EQ(unknown.code, 3);
  auto not_json = cli({"awakeables", "resolve", "awk_0_approve-1", "plain text"});
  EXPECT_EQ(not_json.code, 2);
  EXPECT_NE(not_json.err.find("must be JSON"), std::string::npos);
}

TEST_F(cli_test, bulk_cancel_by_filter_looks_first_asks_and_then_cancels) {
  for (int i = 0; i < 30; ++i)
    (void)rt_->start_workflow<int>("sleepy", {.id = "nap-" + std::to_string(i)});
  auto ok = rt_->start_workflow<int>("double", 1, {.id = "keep-me"});
  EXPECT_EQ(ok.get(20s), 2);
  auto look = cli_json({"runs", "cancel", "--workflow", "sleepy", "--dry-run"});
  EXPECT_EQ(look["matched"], 30);
  EXPECT_EQ(look["done"], 0);
  EXPECT_EQ(look["sample"].size(), 10u);
  EXPECT_EQ(rt_->list_runs({.status = run_status::pending, .limit = 100}).runs.size(), 30u)
    << "a dry run changes nothing";
  auto unasked = cli({"runs", "cancel", "--workflow", "sleepy"});
  EXPECT_EQ(unasked.code, 6) << "no terminal to confirm on, no --yes";
  EXPECT_NE(unasked.err.find("--yes"), std::string::npos) << unasked.err;
  EXPECT_EQ(rt_->list_runs({.status = run_status::pending, .limit = 100}).runs.size(), 30u);
  auto done = cli_json({"runs", "cancel", "--workflow", "sleepy", "--yes"});
  EXPECT_EQ(done["matched"], 30);
  EXPECT_EQ(done["done"], 30);
  EXPECT_EQ(rt_->list_runs({.status = run_status::cancelled, .limit = 100}).runs.size(), 30u);
  EXPECT_EQ(rt_->retrieve_workflow<int>("keep-me").status(), run_status::success);
  auto again = cli_json({"runs", "cancel", "--workflow", "sleepy", "--dry-run"});
  EXPECT_EQ(again["matched"], 0) << "ended runs are not listed for a cancel";
}

TEST_F(cli_test, bulk_resume_by_filter_finishes_failed_runs_on_fixed_code) {
  std::vector<workflow_handle<int>> failed;
  for (int i = 0; i < 5; ++i) {
    failed.push_back(rt_->start_workflow<int>("fail", {.id = "f-" + std::to_string(i)}));
    EXPECT_THROW(failed.back().get(20s), perdure::error);
  }
  auto look = cli_json({"runs", "resume", "--status", "ERROR", "--dry-run"});
  EXPECT_EQ(look["matched"], 5);
  fixed_ = true;
  auto done = cli_json({"runs", "resume", "--status", "ERROR", "--workflow", "fail",
                        "--reason", "card bug fixed", "--yes"});
  EXPECT_EQ(done["done"], 5);
  for (auto& h : failed)
    EXPECT_EQ(h.get(20s), 7);
  auto history = cli_json({"runs", "show", "f-0"})["journal"];
  bool recorded = false;
  for (auto& e : history)
    recorded = recorded || (e["outcome"] == "event" && e["kind"] == "resume"
                            && e["reason"] == "card bug fixed");
  EXPECT_TRUE(recorded) << history.dump(2);
}

TEST_F(cli_test, fork_and_export_by_id) {
  populate();
  fixed_ = true;
  auto fork = cli_json({"runs", "fork", "failed-1", "--from-last-failure",
                        "--new-id", "failed-1-fixed"});
  EXPECT_EQ(fork["done"], 1);
  EXPECT_EQ(fork["created"][0]["fork"], "failed-1-fixed");
  EXPECT_EQ(rt_->retrieve_workflow<int>("failed-1-fixed").get(20s), 7);
  auto exported = cli({"runs", "export", "ok-1"});
  ASSERT_EQ(exported.code, 0) << exported.err;
  auto j = json::parse(exported.out);
  EXPECT_EQ(j["workflow"], "double");
  auto dir = std::filesystem::temp_directory_path()
             / ("perdure-export-" + std::to_string(::getpid()));
  auto many = cli({"runs", "export", "--workflow", "sleepy", "--output-dir",
                   dir.string()});
  ASSERT_EQ(many.code, 0) << many.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "sleeper-1.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "cancelled-1.json"));
  std::filesystem::remove_all(dir);
}

TEST_F(cli_test, objects_queues_executors_versions_and_doctor) {
  populate();
  EXPECT_EQ(cli_json({"objects", "list", "tally"})["keys"], json::array({"k1"}));
  EXPECT_EQ(cli_json({"objects", "state", "tally", "k1"})["state"]["total"], 5);
  auto state = cli({"objects", "state", "tally", "k1"});
  EXPECT_NE(state.out.find("\"total\": 5"), std::string::npos) << state.out;
  EXPECT_EQ(cli({"objects", "state", "tally", "nobody"}).code, 3);
  EXPECT_EQ(cli_json({"objects", "calls", "tally", "k1"})["calls"].size(), 1u);
  auto queues = cli_json({"queues", "list"})["queues"];
  ASSERT_EQ(queues.size(), 1u);
  EXPECT_EQ(queues[0]["name"], "mail");
  EXPECT_EQ(queues[0]["dead_letters"], 1);
  EXPECT_EQ(queues[0]["limits"]["concurrency"], 2);
  auto human = cli({"queues", "list"});
  EXPECT_NE(human.out.find("concurrency 2"), std::string::npos) << human.out;
  EXPECT_EQ(cli({"queues", "stats", "nope"}).code, 3);
  EXPECT_EQ(ids_of(cli_json({"queues", "dead-letters", "mail"})["dead_letters"]),
            std::set<std::string>{"mail-1"});
  fixed_ = true;
  auto requeued = cli({"queues", "requeue", "mail-1"});
  ASSERT_EQ(requeued.code, 0) << requeued.err;
  EXPECT_EQ(rt_->retrieve_workflow<int>("mail-1").get(20s), 7);
  auto executors = cli_json({"executors"})["executors"];
  ASSERT_GE(executors.size(), 1u);
  bool live = false;
  for (auto& e : executors)
    live = live || (e["id"] == "ops-rt" && e["state"] == "live"
                    && e["runs_held"].get<int>() >= 2 && !e["overdue"]);
  EXPECT_TRUE(live) << executors.dump(2);
  auto versions = cli_json({"versions"})["versions"];
  ASSERT_GE(versions.size(), 1u);
  auto doctor = cli({"doctor"});
  EXPECT_EQ(doctor.code, 0) << doctor.out << doctor.err;
  EXPECT_NE(doctor.out.find("ok    schema"), std::string::npos) << doctor.out;
  // With the runtime gone, its PENDING work is stranded: doctor says so.
  rt_->stop();
  auto stopped = cli_json({"executors"})["executors"];
  for (auto& e : stopped)
    EXPECT_NE(e["state"], "live") << e.dump();
  auto sick = cli({"doctor", "--json"});
  EXPECT_EQ(sick.code, 1) << sick.out;
  EXPECT_EQ(json::parse(sick.out)["ok"], false) << sick.out;
}

TEST_F(cli_test, schedules_are_listed_paused_resumed_backfilled_and_removed) {
  namespace sch = perdure::schedules;
  sch::create(*rt_, {.name = "five",
                     .workflow = "double",
                     .cron = "*/5 * * * *",
                     .time_zone = "Europe/Berlin",
                     .input = sch::input_of(*rt_, 21)});
  auto all = cli_json({"schedules", "list"})["schedules"];
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["name"], "five");
  EXPECT_EQ(all[0]["state"], "active");
  EXPECT_EQ(all[0]["time_zone"], "Europe/Berlin");
  EXPECT_EQ(all[0]["input"], 21);
  EXPECT_FALSE(all[0]["next_fire"].is_null());
  auto human = cli({"schedules", "list"});
  EXPECT_NE(human.out.find("*/5 * * * *"), std::string::npos) << human.out;
  ASSERT_EQ(cli({"schedules", "pause", "five"}).code, 0);
  EXPECT_EQ(cli_json({"schedules", "show", "five"})["state"], "paused");
  EXPECT_EQ(cli_json({"schedules", "resume", "five"})["resumed"], true);
  EXPECT_EQ(cli_json({"schedules", "show", "five"})["state"], "active");
  EXPECT_EQ(cli_json({"schedules", "resume", "five"})["resumed"], false);
  // 00:00, 00:05 and 00:10 UTC are ticks (Berlin is a whole hour ahead).
  auto unasked = cli({"schedules", "backfill", "five", "--from",
                      "2026-11-27T00:00Z", "--to", "2026-11-27T00:10Z"});
  EXPECT_EQ(unasked.code, 6) << unasked.out << unasked.err;
  EXPECT_EQ(cli_json({"schedules", "backfill", "five", "--from",
                      "2026-11-27T00:00Z", "--to", "2026-11-27T00:10Z",
                      "--dry-run"})["ticks"],
            3);
  EXPECT_EQ(cli({"schedules", "backfill", "five", "--from",
                 "2026-11-27T00:10Z", "--to", "2026-11-27T00:00Z"})
              .code,
            2);
  auto filled = cli_json({"schedules", "backfill", "five", "--from",
                          "2026-11-27T00:00Z", "--to", "2026-11-27T00:10Z",
                          "--yes"});
  EXPECT_EQ(filled["started"], 3);
  EXPECT_EQ(rt_->retrieve_workflow<int>("sched:five:2026-11-27T00:05:00Z")
              .get(20s),
            42);
  auto triggered = cli_json({"schedules", "trigger", "five"});
  EXPECT_EQ(rt_->retrieve_workflow<int>(triggered["started"].get<std::string>())
              .get(20s),
            42);
  EXPECT_EQ(cli_json({"schedules", "show", "five"})["started"], 4);
  EXPECT_EQ(cli({"schedules", "backfill", "five", "--from", "yesterday"}).code,
            2);
  EXPECT_EQ(cli_json({"schedules", "remove", "five", "--dry-run"})
              ["would_remove"],
            "five");
  ASSERT_EQ(cli({"schedules", "remove", "five", "--yes"}).code, 0);
  auto gone = cli({"schedules", "show", "five"});
  EXPECT_EQ(gone.code, 3);
  EXPECT_NE(gone.err.find("perdure schedules list"), std::string::npos)
    << gone.err;
  EXPECT_EQ(cli({"schedules", "pause", "nope"}).code, 3);
}

TEST_F(cli_test, retention_shows_the_turn_totals_and_a_collected_run) {
  auto before = cli_json({"retention"});
  EXPECT_EQ(before["holder"], "") << before.dump();
  EXPECT_EQ(before["runs_collected"], 0);
  EXPECT_NE(cli({"retention"}).out.find("no collector has run"),
            std::string::npos);
  EXPECT_EQ(rt_->start_workflow<int>("double", 4, {.id = "gone-1"}).get(20s),
            8);
  std::this_thread::sleep_for(5ms); // ended before now: past a keep of 0
  namespace ret = perdure::retention;
  ret::policies p;
  p.workflows["double"].succeeded = ret::keep{0ms, 24h};
  {
    ret::collector gc{*rt_, p, {.interval = 1h}};
    EXPECT_EQ(gc.collect_now().collected, 1);
    auto held = cli_json({"retention"});
    EXPECT_NE(held["holder"].get<std::string>(), "") << held.dump();
    EXPECT_EQ(held["runs_collected"], 1);
    EXPECT_EQ(held["tombstones"], 1);
  }
  auto shown = cli({"runs", "show", "gone-1"});
  EXPECT_EQ(shown.code, 0) << shown.err;
  EXPECT_NE(shown.out.find("collected"), std::string::npos) << shown.out;
  EXPECT_FALSE(cli_json({"runs", "show", "gone-1"})["collected_at"].is_null());
  auto resumed = cli({"runs", "resume", "gone-1"});
  EXPECT_NE(resumed.code, 0);
  EXPECT_NE(resumed.err.find("retention collected it"), std::string::npos)
    << resumed.err;
}

TEST_F(cli_test, a_cancel_from_the_cli_while_a_step_runs_ends_the_run_cancelled) {
  auto h = rt_->start_workflow<int>("blocking", {.id = "busy"});
  ASSERT_TRUE(test::eventually([&] { return in_step_.load(); }));
  auto r = cli({"runs", "cancel", "busy"});
  ASSERT_EQ(r.code, 0) << r.err;
  release_ = true;
  EXPECT_THROW(h.get(20s), perdure::error);
  EXPECT_EQ(h.status(), run_status::cancelled);
  auto journal = cli_json({"runs", "show", "busy"})["journal"];
  EXPECT_TRUE(journal.empty()) << "the step's result after the cancel is not recorded: "
                               << journal.dump();
}

} // namespace
