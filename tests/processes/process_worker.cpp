// A runtime process for the processes tests: registers workflow "job" (ten
// steps, each logged to the side table step_log with this process's pid
// and returning that pid; step 5 transactional, writing tx_rows) and
// "tx_hold" (one transactional step writing tx_rows, then holding its
// transaction open for 4 s), starts,
// prints READY and runs until killed (SIGTERM: a clean stop).
//
//   perdure-process-worker <url> <schema> <executor> <lease ms> <step ms>

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "support/sigterm_wait.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using perdure::test::wall_ms;

namespace {

test::database db;

test::sql_client& side_table() {
  return test::thread_client(db);
}

} // namespace

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 6) {
    std::cerr << "usage: perdure-process-worker <url> <schema> <executor> "
                 "<lease ms> <step ms>\n";
    return 2;
  }
  db = test::database::named(argv[1], argv[2]);
  auto cfg = db.runtime_config(argv[3]);
  cfg.lease_timeout = std::chrono::milliseconds{std::stoi(argv[4])};
  auto step_time = std::chrono::milliseconds{std::stoi(argv[5])};
  cfg.step_threads = 8;
  test::sigterm_wait term; // before the runtime's threads start
  runtime rt{cfg};
  auto step_log = side_table().table("step_log");
  auto tx_rows = side_table().table("tx_rows");
  rt.register_workflow("job", [&](workflow_context& ctx, int n) -> task<int> {
    auto id = ctx.workflow_id();
    for (int i = 0; i < 10; ++i) {
      if (i == 5) {
        co_await ctx.transaction("tx", [&](sql_session& s) {
          s.exec_params("INSERT INTO " + tx_rows + " (run_id) VALUES ($1)", id);
          return static_cast<long>(getpid());
        });
        continue;
      }
      co_await ctx.step("s" + std::to_string(i), [&, i] {
        auto started = wall_ms(); // before connecting: when the body began
        side_table().exec("INSERT INTO " + step_log
                            + " (run_id, seq, pid, at_ms) VALUES ($1, $2, $3, "
                              "$4)",
                          {id, std::int64_t{i}, std::int64_t{getpid()},
                           started});
        std::this_thread::sleep_for(step_time);
        return static_cast<long>(getpid());
      });
    }
    co_return n;
  });
  // One transactional step that holds its transaction open for 4 s (a
  // process stalled inside it holds the run's row locks).
  rt.register_workflow("tx_hold", [&](workflow_context& ctx) -> task<long> {
    auto id = ctx.workflow_id();
    co_return co_await ctx.transaction("hold", [&](sql_session& s) {
      s.exec_params("INSERT INTO " + tx_rows + " (run_id) VALUES ($1)", id);
      std::this_thread::sleep_for(std::chrono::seconds{4});
      return static_cast<long>(getpid());
    });
  });
  try {
    rt.start();
  } catch (const perdure::error& ex) {
    std::cout << "REFUSED " << to_string(ex.code()) << std::endl;
    return 3;
  }
  std::cout << "READY" << std::endl;
  term.wait();
  rt.stop();
  std::cout << "STOPPED" << std::endl;
  return 0;
}
