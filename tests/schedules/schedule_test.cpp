// Schedules on the store under test, with a manual clock: each tick's run
// starts once (its id names the tick), catch-up and overlap counted
// exactly, a queue as target, trigger and backfill, pause and resume,
// declarative apply, refusals that say what to do, and two tickers racing
// over the same ticks.

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/schedules/detail/planning/tick_plan.hpp"
#include "perdure/schedules/schedule.hpp"
#include "perdure/testing/manual_clock.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
namespace sch = perdure::schedules;

namespace {

using time_point = std::chrono::system_clock::time_point;

time_point utc(int y, unsigned m, unsigned d, int h = 0, int mi = 0) {
  using namespace std::chrono;
  return time_point{sys_days{year{y} / month{m} / day{d}} + hours{h}
                    + minutes{mi}};
}

std::int64_t ms_of(time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           t.time_since_epoch())
    .count();
}

task<std::string> report(workflow_context&, std::string day) {
  co_return "report " + day;
}

/// Runs until a message on "go" (a run that overlaps the next ticks).
task<int> long_job(workflow_context& ctx, std::string) {
  co_return co_await ctx.recv<int>("go");
}

/// The value of series `labels` of family `name` in `rt`'s metrics (0 if
/// it has none).
double metric(client& rt, const std::string& name,
              const std::vector<std::string>& labels) {
  for (auto& f : rt.metrics())
    if (f.name == name)
      for (auto& s : f.series)
        if (s.label_values == labels)
          return s.value;
  return 0;
}

class schedule_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    clock_ = std::make_shared<perdure::testing::manual_clock>(utc(2026, 3, 7, 12));
  }

  config cfg(std::string executor = "local") {
    auto c = db_.runtime_config(std::move(executor));
    c.clock = clock_;
    return c;
  }

  static void register_all(runtime& rt) {
    rt.register_workflow("report", report);
    rt.register_workflow("long_job", long_job);
  }

  sch::schedule_spec every_minute(std::string name, std::string workflow) {
    sch::schedule_spec s;
    s.name = std::move(name);
    s.workflow = std::move(workflow);
    s.cron = "* * * * *";
    s.on_overlap = sch::overlap::allow_all;
    s.input = persistence::encode(std::string{"x"});
    return s;
  }

  /// Ids of the runs of schedule `name`, from the tables.
  std::set<std::string> runs_of(const std::string& name) {
    test::sql_client sql{db_};
    std::set<std::string> out;
    for (auto& r : sql.exec("SELECT id FROM " + sql.table("runs")
                              + " WHERE id LIKE $1",
                            {"sched:" + name + ":%"})
                     .rows)
      out.insert(*r[0]);
    return out;
  }

  test::database db_;
  std::shared_ptr<perdure::testing::manual_clock> clock_;
};

TEST_F(schedule_test, each_tick_starts_one_run_named_by_its_tick) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto spec = every_minute("minutely", "report");
  spec.input = sch::input_of(rt, std::string{"today"});
  sch::create(rt, spec);
  sch::ticker ticker{rt, {.poll = 20ms}};
  std::set<std::string> want;
  for (int i = 1; i <= 30; ++i) {
    clock_->set(utc(2026, 3, 7, 12, i));
    want.insert(sch::detail::tick_run_id("minutely",
                                         ms_of(utc(2026, 3, 7, 12, i))));
    ticker.fire_due();
  }
  EXPECT_EQ(runs_of("minutely"), want);
  for (auto& id : want)
    EXPECT_EQ(rt.retrieve_workflow<std::string>(id).get(20s), "report today");
  auto info = sch::show(rt, "minutely");
  EXPECT_EQ(info.started, 30);
  EXPECT_EQ(info.missed + info.skipped + info.caught_up, 0);
  EXPECT_EQ(info.last_run_id, *want.rbegin());
  ASSERT_TRUE(info.next_fire);
  EXPECT_EQ(*info.next_fire, utc(2026, 3, 7, 12, 31));
}

TEST_F(schedule_test, catch_up_after_downtime_is_counted_exactly) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto all = every_minute("all", "report");
  all.catch_up = sch::catchup::all;
  all.catchup_window = 5min;
  auto latest = every_minute("latest", "report");
  latest.catchup_window = 1h;
  sch::create(rt, all);
  sch::create(rt, latest);
  // Ten minutes with nobody firing, then one ticker.
  clock_->set(utc(2026, 3, 7, 12, 10));
  sch::ticker ticker{rt, {.poll = 20ms}};
  ticker.fire_due();
  auto a = sch::show(rt, "all");
  EXPECT_EQ(a.started, 6); // 12:05 .. 12:10: inside the 5 min window
  EXPECT_EQ(a.missed, 4);  // 12:01 .. 12:04
  EXPECT_EQ(a.caught_up, 5);
  EXPECT_EQ(runs_of("all").size(), 6u);
  auto l = sch::show(rt, "latest");
  EXPECT_EQ(l.started, 1);
  EXPECT_EQ(l.missed, 9);
  // The same counts in the metrics of the process that decided them.
  auto ticks = "perdure_schedule_ticks_total";
  EXPECT_EQ(metric(rt, ticks, {"all", "started"}), 6);
  EXPECT_EQ(metric(rt, ticks, {"all", "missed"}), 4);
  EXPECT_EQ(metric(rt, ticks, {"all", "caught_up"}), 5);
  EXPECT_EQ(metric(rt, ticks, {"latest", "started"}), 1);
  EXPECT_EQ(metric(rt, ticks, {"latest", "missed"}), 9);
  // One lateness sample per tick started: 6 + 1.
  EXPECT_EQ(metric(rt, "perdure_schedule_lateness_seconds", {}), 7);
  EXPECT_EQ(runs_of("latest"),
            (std::set<std::string>{sch::detail::tick_run_id(
              "latest", ms_of(utc(2026, 3, 7, 12, 10)))}));
}

TEST_F(schedule_test, a_running_run_makes_ticks_skip_or_wait) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto skip = every_minute("skip", "long_job");
  skip.on_overlap = sch::overlap::skip;
  auto buffer = every_minute("buffer", "long_job");
  buffer.on_overlap = sch::overlap::buffer_one;
  sch::create(rt, skip);
  sch::create(rt, buffer);
  sch::ticker ticker{rt, {.poll = 20ms}};
  for (int i = 1; i <= 3; ++i) {
    clock_->set(utc(2026, 3, 7, 12, i));
    ticker.fire_due();
  }
  auto s = sch::show(rt, "skip");
  EXPECT_EQ(s.started, 1);
  EXPECT_EQ(s.skipped, 2);
  auto b = sch::show(rt, "buffer");
  EXPECT_EQ(b.started, 1);
  EXPECT_EQ(b.skipped, 1); // the third: one waits already
  ASSERT_EQ(b.buffered.size(), 1u);
  EXPECT_EQ(b.buffered[0], utc(2026, 3, 7, 12, 2));
  // The first run ends: the waiting tick starts at the next look (a
  // second later).
  rt.send(b.last_run_id, "go", 1);
  EXPECT_EQ(rt.retrieve_workflow<int>(b.last_run_id).get(20s), 1);
  clock_->advance(2s);
  ticker.fire_due();
  b = sch::show(rt, "buffer");
  EXPECT_EQ(b.started, 2);
  EXPECT_TRUE(b.buffered.empty());
  EXPECT_EQ(b.last_run_id, sch::detail::tick_run_id(
                             "buffer", ms_of(utc(2026, 3, 7, 12, 2))));
}

TEST_F(schedule_test, cancel_other_cancels_the_running_run) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto spec = every_minute("replace", "long_job");
  spec.on_overlap = sch::overlap::cancel_other;
  sch::create(rt, spec);
  sch::ticker ticker{rt, {.poll = 20ms}};
  clock_->set(utc(2026, 3, 7, 12, 1));
  ticker.fire_due();
  auto first = sch::show(rt, "replace").last_run_id;
  clock_->set(utc(2026, 3, 7, 12, 2));
  ticker.fire_due();
  EXPECT_TRUE(test::eventually(
    [&] {
      return rt.retrieve_workflow<int>(first).status() == run_status::cancelled;
    }));
  auto second = sch::show(rt, "replace").last_run_id;
  EXPECT_NE(first, second);
  rt.send(second, "go", 3);
  EXPECT_EQ(rt.retrieve_workflow<int>(second).get(20s), 3);
}

TEST_F(schedule_test, a_queue_as_the_target) {
  runtime rt{cfg()};
  register_all(rt);
  queues::register_queue(rt, "reports", {.concurrency = 1});
  rt.start();
  auto spec = every_minute("queued", "report");
  spec.queue = "reports";
  spec.input = sch::input_of(rt, std::string{"q"});
  sch::create(rt, spec);
  sch::ticker ticker{rt, {.poll = 20ms}};
  clock_->set(utc(2026, 3, 7, 12, 1));
  ticker.fire_due();
  auto id = sch::show(rt, "queued").last_run_id;
  EXPECT_EQ(rt.retrieve_workflow<std::string>(id).get(20s), "report q");
  test::sql_client sql{db_};
  EXPECT_EQ(sql.scalar("SELECT queue_name FROM " + sql.table("runs")
                         + " WHERE id = $1",
                       {id}),
            "reports");
}

TEST_F(schedule_test, trigger_and_backfill_never_start_a_tick_twice) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto spec = every_minute("bf", "report");
  spec.cron = "*/10 * * * *";
  sch::create(rt, spec);
  // 10:00 .. 11:00: 7 ticks.
  EXPECT_EQ(sch::backfill(rt, "bf", utc(2026, 3, 7, 10), utc(2026, 3, 7, 11)),
            7);
  EXPECT_EQ(sch::backfill(rt, "bf", utc(2026, 3, 7, 10, 30),
                          utc(2026, 3, 7, 11, 20)),
            2); // 11:10 and 11:20 are new
  auto id = sch::trigger(rt, "bf");
  EXPECT_EQ(id.rfind("sched:bf:trigger:", 0), 0u) << id;
  EXPECT_EQ(runs_of("bf").size(), 10u);
  EXPECT_EQ(sch::show(rt, "bf").started, 10);
  for (auto& r : runs_of("bf"))
    EXPECT_EQ(rt.retrieve_workflow<std::string>(r).get(20s), "report x");
}

TEST_F(schedule_test, paused_ticks_are_not_fired_and_resume_starts_from_now) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  sch::create(rt, every_minute("p", "report"));
  sch::ticker ticker{rt, {.poll = 20ms}};
  sch::pause(rt, "p");
  EXPECT_FALSE(sch::show(rt, "p").next_fire);
  clock_->set(utc(2026, 3, 7, 12, 5));
  clock_->advance(30s);
  ticker.fire_due();
  EXPECT_TRUE(runs_of("p").empty());
  sch::resume(rt, "p");
  EXPECT_EQ(sch::show(rt, "p").next_fire, utc(2026, 3, 7, 12, 6));
  clock_->set(utc(2026, 3, 7, 12, 6));
  ticker.fire_due();
  EXPECT_EQ(runs_of("p").size(), 1u);
  sch::remove(rt, "p");
  EXPECT_THROW(sch::show(rt, "p"), perdure::error);
}

TEST_F(schedule_test, apply_makes_an_owners_schedules_exactly_the_given_ones) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto a = every_minute("a", "report");
  auto b = every_minute("b", "report");
  auto r = sch::apply(rt, "svc", {a, b});
  EXPECT_EQ(r.created, 2);
  r = sch::apply(rt, "svc", {a, b});
  EXPECT_EQ(r.unchanged, 2);
  b.cron = "0 * * * *";
  r = sch::apply(rt, "svc", {b});
  EXPECT_EQ(r.updated, 1);
  EXPECT_EQ(r.removed, 1);
  auto all = sch::list(rt);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].spec.cron, "0 * * * *");
  EXPECT_EQ(all[0].owner, "svc");
  EXPECT_THROW(sch::apply(rt, "svc", {b, b}), perdure::error);
  // Another owner's name, or one made by create, is not taken over.
  sch::create(rt, every_minute("mine", "report"));
  try {
    sch::apply(rt, "svc", {b, every_minute("mine", "report")});
    FAIL() << "took over a schedule made by create";
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::conflicting_id);
    EXPECT_EQ(sch::list(rt).size(), 2u); // nothing changed
  }
}

TEST_F(schedule_test, a_row_this_process_cannot_read_is_left_to_others) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  sch::create(rt, every_minute("good", "report"));
  sch::create(rt, every_minute("strange", "report"));
  // As a process with newer time zone data would have stored it.
  test::sql_client sql{db_};
  sql.exec("UPDATE " + sql.table("schedules")
             + " SET time_zone = 'Mars/Olympus_Mons' WHERE name = 'strange'");
  auto before = sql.scalar("SELECT due_at FROM " + sql.table("schedules")
                           + " WHERE name = 'strange'");
  sch::ticker ticker{rt, {.poll = 20ms}};
  for (int i = 1; i <= 3; ++i) {
    clock_->set(utc(2026, 3, 7, 12, i));
    ticker.fire_due();
  }
  EXPECT_EQ(runs_of("good").size(), 3u);
  EXPECT_TRUE(runs_of("strange").empty());
  // Untouched: its cursor is the one another process will fire from.
  EXPECT_EQ(sql.scalar("SELECT due_at FROM " + sql.table("schedules")
                       + " WHERE name = 'strange'"),
            before);
  EXPECT_EQ(sch::show(rt, "strange").missed, 0);
}

TEST_F(schedule_test, bad_specs_are_refused_saying_what_to_do) {
  runtime rt{cfg()};
  register_all(rt);
  rt.start();
  auto refusal = [&](sch::schedule_spec s) -> std::string {
    try {
      sch::create(rt, s);
    } catch (const perdure::error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
      return e.what();
    }
    return "";
  };
  auto s = every_minute("bad", "report");
  s.cron = "61 * * * *";
  EXPECT_NE(refusal(s).find("minute 61 is out of range"), std::string::npos);
  s = every_minute("bad", "report");
  s.time_zone = "Europe/Atlantis";
  EXPECT_NE(refusal(s).find("not in this system's time zone data"),
            std::string::npos);
  s = every_minute("bad", "report");
  s.jitter = 2min;
  EXPECT_NE(refusal(s).find("less than its catch-up window"),
            std::string::npos);
  s = every_minute("bad name!", "report");
  EXPECT_NE(refusal(s).find("letters, digits"), std::string::npos);
  s = every_minute("bad", "report");
  s.cron = "0 0 30 2 *";
  EXPECT_NE(refusal(s).find("never fires"), std::string::npos);
  s = every_minute("bad", "report");
  s.catchup_window = 1h;
  s.jitter = 90s;
  EXPECT_NE(refusal(s).find("time between its ticks"), std::string::npos);
  sch::create(rt, every_minute("twice", "report"));
  try {
    sch::create(rt, every_minute("twice", "report"));
    FAIL();
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::conflicting_id);
    EXPECT_NE(std::string{e.what()}.find("schedules::update"),
              std::string::npos);
  }
}

/// Two runtimes on one database, their tickers passing at once over the
/// same 60 ticks of 20 schedules: every tick starts once, and the counts
/// add up to exactly the ticks (PostgreSQL: SQLite runs one runtime per
/// file).
TEST_F(schedule_test, two_tickers_racing_start_each_tick_once) {
  if (!db_.postgres)
    GTEST_SKIP() << "SQLite runs one runtime per file";
  runtime one{cfg("one")};
  runtime two{cfg("two")};
  register_all(one);
  register_all(two);
  one.start();
  two.start();
  for (int i = 0; i < 20; ++i)
    sch::create(one, every_minute("race" + std::to_string(i), "report"));
  sch::ticker t1{one, {.poll = 20ms, .batch = 7}};
  sch::ticker t2{two, {.poll = 20ms, .batch = 7}};
  for (int m = 1; m <= 60; ++m) {
    clock_->set(utc(2026, 3, 7, 12, m));
    std::thread other{[&] { t2.fire_due(); }};
    t1.fire_due();
    other.join();
    // The loops (woken by the jump) may still be passing: wait for all.
    ASSERT_TRUE(test::eventually([&] {
      for (auto& s : sch::list(one))
        if (s.started + s.missed + s.skipped < m)
          return false;
      return true;
    }));
  }
  std::int64_t started = 0;
  for (auto& s : sch::list(one)) {
    // Decided once each: a tick decided twice would count twice here (a
    // second start is kept out by its id, a second skip or miss is not).
    EXPECT_EQ(s.started + s.skipped + s.missed, 60) << s.spec.name;
    EXPECT_EQ(s.started, 60) << s.spec.name;
    EXPECT_EQ(s.missed + s.skipped, 0) << s.spec.name;
    EXPECT_EQ(runs_of(s.spec.name).size(), 60u) << s.spec.name;
    started += s.started;
  }
  EXPECT_EQ(started, 1200);
}

} // namespace
