// Exactly once per tick across processes and kills: three hourly schedules
// in three zones, from March to November 2026 (both daylight-saving
// changes of each zone: over 18 000 ticks), fired by three worker
// processes (one on SQLite, one runtime per file) sharing a file clock the
// test moves six hours at a time; a worker is SIGKILLed and restarted
// every few steps, mid-pass or not. Every tick of each zone's sequence
// has exactly one run, none is missed, and the counters equal the runs.

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/schedules/detail/planning/tick_plan.hpp"
#include "perdure/schedules/schedule.hpp"
#include "schedules/file_clock.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
namespace sch = perdure::schedules;

namespace {

std::int64_t ms(int y, unsigned m, unsigned d) {
  using namespace std::chrono;
  return duration_cast<milliseconds>(
           sys_days{year{y} / month{m} / day{d}}.time_since_epoch())
    .count();
}

TEST(schedule_processes, every_tick_once_across_daylight_saving_and_kills) {
  auto db = test::database::fresh();
  auto dir = std::filesystem::temp_directory_path()
             / ("perdure-clock-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto clock_file = (dir / "now").string();
  auto from = ms(2026, 3, 1), to = ms(2026, 11, 10);
  test::file_clock::set(clock_file, from);

  const char* zones[] = {"America/New_York", "Europe/Berlin",
                         "Australia/Lord_Howe"};
  {
    auto cfg = db.runtime_config("setup");
    cfg.clock = std::make_shared<test::file_clock>(clock_file);
    client c{cfg};
    for (auto* zone : zones) {
      sch::schedule_spec s;
      s.name = std::string{"hourly-"} + (zone[0] == 'A' && zone[1] == 'm'
                                           ? "ny"
                                           : zone[0] == 'E' ? "berlin"
                                                            : "lord-howe");
      s.workflow = "tick";
      s.cron = "0 * * * *";
      s.time_zone = zone;
      s.input = persistence::encode(std::string{zone});
      s.on_overlap = sch::overlap::allow_all;
      s.catch_up = sch::catchup::all;
      s.catchup_window = 48h;
      sch::create(c, s);
    }
  }

  int processes = db.postgres ? 3 : 1;
  std::vector<std::unique_ptr<test::child_process>> workers(
    static_cast<std::size_t>(processes));
  int restarts = 0;
  auto launch = [&](std::size_t i) {
    workers[i] = std::make_unique<test::child_process>(std::vector<std::string>{
      PERDURE_SCHEDULE_WORKER, db.url, db.schema,
      "w" + std::to_string(i) + "-" + std::to_string(restarts++), clock_file});
    ASSERT_TRUE(workers[i]->wait_for("READY", 30s)) << workers[i]->output();
  };
  for (std::size_t i = 0; i < workers.size(); ++i)
    launch(i);

  test::sql_client sql{db};
  auto undecided = [&](std::int64_t now) {
    return std::stoll(sql.scalar("SELECT count(*) FROM "
                                   + sql.table("schedules")
                                   + " WHERE next_tick <= $1",
                                 {now}));
  };
  std::mt19937 rng{2026};
  int kills = 0;
  std::int64_t step = 0;
  for (auto now = from; now < to; ++step) {
    now = std::min<std::int64_t>(now + 6 * 3'600'000, to);
    test::file_clock::set(clock_file, now);
    if (step % 9 == 4) {
      // A kill at a random moment of the passes this step makes.
      std::this_thread::sleep_for(std::chrono::milliseconds{rng() % 15});
      auto i = rng() % workers.size();
      workers[i]->sigkill();
      ++kills;
      launch(i);
    }
    ASSERT_TRUE(test::eventually([&] { return undecided(now) == 0; }, 60s))
      << "ticks due by " << now << " not decided";
  }

  std::int64_t total = 0;
  for (auto* zone : zones) {
    sch::fire_times times{sch::cron_expression::parse("0 * * * *"), zone};
    std::string name = std::string{"hourly-"}
                       + (zone[0] == 'A' && zone[1] == 'm' ? "ny"
                          : zone[0] == 'E'                 ? "berlin"
                                                           : "lord-howe");
    std::set<std::string> want;
    for (auto t = sch::detail::next_tick_after(times, from, std::nullopt);
         t && *t <= to; t = sch::detail::next_tick_after(times, *t, std::nullopt))
      want.insert(sch::detail::tick_run_id(name, *t));
    std::set<std::string> got;
    for (auto& r : sql.exec("SELECT id FROM " + sql.table("runs")
                              + " WHERE id LIKE $1",
                            {"sched:" + name + ":%"})
                     .rows)
      got.insert(*r[0]);
    EXPECT_EQ(got.size(), want.size()) << name;
    EXPECT_TRUE(got == want) << name << ": the runs are not the ticks";
    auto counts = sql.exec("SELECT started, missed, skipped FROM "
                             + sql.table("schedules") + " WHERE name = $1",
                           {name});
    ASSERT_EQ(counts.rows.size(), 1u);
    EXPECT_EQ(std::stoll(*counts.rows[0][0]),
              static_cast<long long>(want.size()))
      << name << ": started counted other than the runs";
    EXPECT_EQ(*counts.rows[0][1], "0") << name << " missed ticks";
    EXPECT_EQ(*counts.rows[0][2], "0") << name;
    total += static_cast<std::int64_t>(want.size());
  }
  EXPECT_GE(total, 10'000);
  EXPECT_GE(kills, 10);
  // Every run ran (the killed workers' runs taken over).
  EXPECT_TRUE(test::eventually(
    [&] {
      return sql.scalar("SELECT count(*) FROM " + sql.table("runs")
                        + " WHERE status <> 'SUCCESS'")
             == "0";
    },
    120s));
  for (auto& w : workers)
    w->signal(SIGTERM);
  for (auto& w : workers)
    EXPECT_EQ(w->wait_exit(30s), 0) << w->output();
  std::filesystem::remove_all(dir);
}

} // namespace
