// The schedule_lateness scenario: how late a tick's run starts.
//   p50_ms / p99_ms   from a tick's time to its run's body running (the
//                     run id names the tick; the body reads the wall
//                     clock), over every tick of the measured seconds
//   ticks             how many ticks that was

#include "schedule_bench.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/schedules/schedule.hpp"

namespace perdure::bench {

namespace {

/// The tick a run id names (`sched:<name>:2026-11-28T02:00:05Z`), in ms.
std::int64_t tick_of(const std::string& id) {
  auto at = id.rfind(':', id.size() - 4); // the last ':' before the seconds
  at = id.rfind(':', at - 1);
  at = id.rfind(':', at - 1); // the one after the name
  auto iso = id.substr(at + 1);
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &s);
  using namespace std::chrono;
  auto t = sys_days{year{y} / month{static_cast<unsigned>(mo)}
                    / day{static_cast<unsigned>(d)}}
           + hours{h} + minutes{mi} + seconds{s};
  return duration_cast<milliseconds>(t.time_since_epoch()).count();
}

std::int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

} // namespace

void schedule_lateness(const options& o) {
  int count = o.workflows > 0 ? o.workflows : 1000;
  int seconds = o.steps > 0 ? o.steps : 65;
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  runtime rt{cfg};
  std::mutex mtx;
  std::vector<double> late;
  std::atomic<std::int64_t> begin{std::numeric_limits<std::int64_t>::max()};
  rt.register_workflow("tick", [&](workflow_context& ctx) -> task<int> {
    auto now = wall_ms();
    auto tick = tick_of(ctx.workflow_id());
    if (tick >= begin) {
      std::lock_guard guard{mtx};
      late.push_back(static_cast<double>(now - tick));
    }
    co_return 0;
  });
  rt.start();
  for (int i = 0; i < count; ++i)
    schedules::create(rt, {.name = "s" + std::to_string(i),
                           .workflow = "tick",
                           .cron = std::to_string(i % 60) + " * * * * *",
                           .on_overlap = schedules::overlap::allow_all});
  {
    schedules::ticker ticker{rt};
    // Ticks from the next second on are measured (not those due while
    // the schedules were being made).
    begin = wall_ms() + 1000;
    std::this_thread::sleep_for(std::chrono::seconds{seconds});
  }
  std::this_thread::sleep_for(std::chrono::seconds{2}); // the last runs
  rt.stop();
  std::sort(late.begin(), late.end());
  auto at = [&](double q) {
    return late.empty()
             ? 0.0
             : late[static_cast<std::size_t>(q * static_cast<double>(late.size() - 1))];
  };
  header(o)
    .add("schedules", count)
    .add("seconds", seconds)
    .add("ticks", static_cast<double>(late.size()))
    .add("p50_ms", at(0.5))
    .add("p99_ms", at(0.99))
    .add("max_ms", late.empty() ? 0.0 : late.back())
    .print();
}

} // namespace perdure::bench
