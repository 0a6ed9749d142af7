// A runtime process for the multi-process queue tests. Registers workflow
// "item" (steps "s0".."s<steps-1>", each logging its start and end to the
// side table item_log with this process's pid, holding `hold` ms) and the
// queues "rated" (20 starts per second, 8 workers), "limited" (3 at once
// across processes, 1 per partition, 2 workers) and "jobs" (4 workers);
// starts, prints READY and runs until SIGTERM (a clean stop) or a kill.
//
//   perdure-queue-worker <url> <schema> <executor>

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "support/sigterm_wait.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

test::database db;

} // namespace

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 4) {
    std::cerr << "usage: perdure-queue-worker <url> <schema> <executor>\n";
    return 2;
  }
  db = test::database::named(argv[1], argv[2]);
  auto cfg = db.runtime_config(argv[3]);
  cfg.lease_timeout = 2s;
  test::sigterm_wait term; // before the runtime's threads start
  runtime rt{cfg};
  auto log = test::sql_client{db}.table("item_log");
  // (steps, hold ms, partition)
  using spec = std::tuple<int, int, std::string>;
  rt.register_workflow("item", [log](workflow_context& ctx,
                                     spec in) -> task<int> {
    auto id = ctx.workflow_id();
    // Named copies: a lambda below takes them (clang 14 cannot capture
    // structured bindings).
    auto steps = std::get<0>(in);
    auto hold = std::get<1>(in);
    auto partition = std::get<2>(in);
    int sum = 0;
    for (int s = 0; s < steps; ++s)
      sum += co_await ctx.step("s" + std::to_string(s), [&, s] {
        auto enter = test::wall_ms(); // before connecting: when it began
        auto& sql = test::thread_client(db);
        std::this_thread::sleep_for(std::chrono::milliseconds{hold});
        sql.exec("INSERT INTO " + log
                   + " (run_id, step, pid, part, enter_ms, leave_ms) VALUES "
                     "($1, $2, $3, $4, $5, $6)",
                 {id, std::int64_t{s}, std::int64_t{getpid()}, partition,
                  enter, test::wall_ms()});
        return s;
      });
    co_return sum;
  });
  queues::register_queue(rt, "rated",
                         {.worker_concurrency = 8,
                          .rate = queues::rate_limit{20, 1000ms}});
  // Two workers each: the limit of 3 holds only if the processes count
  // each other's items.
  queues::register_queue(rt, "limited", {.concurrency = 3,
                                         .worker_concurrency = 2,
                                         .partition_concurrency = 1});
  queues::register_queue(rt, "jobs", {.worker_concurrency = 4});
  rt.start();
  std::cout << "READY" << std::endl;
  term.wait();
  rt.stop();
  std::cout << "STOPPED" << std::endl;
  return 0;
}
