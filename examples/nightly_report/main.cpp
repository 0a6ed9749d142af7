// A nightly report on a cron schedule, with catch-up: at 02:00 Berlin time
// a report run starts, exactly once per night however many processes run
// the ticker. The service goes down for two nights and, back up, catches
// up on both, oldest first; one of them is the night the clocks spring
// forward, when 02:00 does not exist and the report runs at 03:00.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/reports.db ./perdure-nightly-report
//
// The time is a manual clock, so the nights pass in a second.

#include <perdure/perdure.hpp>
#include <perdure/schedules/schedule.hpp>
#include <perdure/testing/manual_clock.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

using namespace std::chrono_literals;
namespace sch = perdure::schedules;

namespace {

using time_point = std::chrono::system_clock::time_point;

time_point utc(int y, unsigned m, unsigned d, int h) {
  using namespace std::chrono;
  return time_point{sys_days{year{y} / month{m} / day{d}} + hours{h}};
}

/// The report: its night is in its run id (`sched:<name>:<UTC time>`).
perdure::task<std::string> nightly_report(perdure::workflow_context& ctx,
                                          std::string team) {
  auto id = ctx.workflow_id();
  auto night = id.substr(id.find(':', 6) + 1); // after `sched:<name>:`
  auto rows = co_await ctx.step("collect", [] { return 1234; });
  co_await ctx.step("send", [&] {
    std::cout << "  report for " << team << ", tick " << night << ": "
              << rows << " rows\n";
    return true;
  });
  co_return night;
}

/// Waits for every report run the schedule started so far.
void wait_for_reports(perdure::runtime& rt) {
  perdure::run_filter reports;
  reports.id_prefix = "sched:nightly-report:";
  reports.limit = 100;
  for (auto& r : rt.list_runs(reports).runs)
    rt.retrieve_workflow<std::string>(r.id).get(30s);
}

void show(perdure::runtime& rt) {
  auto s = sch::show(rt, "nightly-report");
  std::cout << "  schedule: started " << s.started << ", caught up "
            << s.caught_up << ", missed " << s.missed << "\n";
}

} // namespace

int main() {
  perdure::config cfg;
  if (auto* url = std::getenv("PERDURE_DATABASE_URL"))
    cfg.database_url = url;
  auto clock = std::make_shared<perdure::testing::manual_clock>(
    utc(2026, 3, 27, 12));
  cfg.clock = clock;
  perdure::runtime rt{cfg};
  rt.register_workflow("nightly_report", nightly_report);
  rt.start();
  // Owned by this code: applied at every start, changed by changing it.
  sch::apply(rt, "reports-service",
             {{.name = "nightly-report",
               .workflow = "nightly_report",
               .cron = "0 2 * * *",
               .time_zone = "Europe/Berlin",
               .input = sch::input_of(rt, std::string{"finance"}),
               .on_overlap = sch::overlap::buffer_all,
               .catch_up = sch::catchup::all,
               .catchup_window = 72h}});
  {
    std::cout << "night of March 28 (02:00 CET is 01:00 UTC):\n";
    sch::ticker ticker{rt};
    clock->set(utc(2026, 3, 28, 1));
    ticker.fire_due();
    wait_for_reports(rt);
    show(rt);
  }
  std::cout << "the service is down for two nights; back on March 30 at noon:\n";
  clock->set(utc(2026, 3, 30, 12));
  {
    // Oldest first: March 30's report waits (buffer_all) for March 29's
    // to end, and starts at the next look, a second later.
    sch::ticker ticker{rt};
    for (int look = 0; look < 3; ++look) {
      ticker.fire_due();
      wait_for_reports(rt);
      clock->advance(2s);
    }
    show(rt);
  }
  std::cout << "(March 29: 02:00 did not exist in Berlin; its report ran at "
               "03:00 CEST, 01:00 UTC)\n";
  rt.stop();
}
