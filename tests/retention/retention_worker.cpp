// A runtime process for the retention process test: runs a steady
// workload (workflow "job": three steps, ids job-<executor>-<n>) and a
// collector that collects every ended run at once (tombstones kept a
// day), in small batches that hand the turn over quickly; prints READY,
// then runs until SIGTERM (a clean stop) or a kill.
//
//   perdure-retention-worker <url> <schema> <executor>

#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "perdure/retention/collector.hpp"
#include "support/sigterm_wait.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;
namespace ret = perdure::retention;

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 4) {
    std::cerr << "usage: perdure-retention-worker <url> <schema> <executor>\n";
    return 2;
  }
  auto db = test::database::named(argv[1], argv[2]);
  std::string executor = argv[3];
  auto cfg = db.runtime_config(executor);
  cfg.lease_timeout = 1s;
  test::sigterm_wait term; // before the runtime's threads start
  runtime rt{cfg};
  rt.register_workflow("job", [](workflow_context& ctx, int n) -> task<int> {
    auto a = co_await ctx.step("a", [n] { return n + 1; });
    auto b = co_await ctx.step("b", [a] { return a * 2; });
    co_return co_await ctx.step("c", [b] { return b - 1; });
  });
  rt.start();
  ret::policies all;
  all.all = ret::policy{ret::keep{0ms, 24h}, ret::keep{0ms, 24h},
                        ret::keep{0ms, 24h}};
  std::atomic<bool> stop{false};
  std::thread load{[&] {
    for (int n = 0; !stop; ++n) {
      try {
        rt.start_workflow<int>("job", n,
                               {.id = "job-" + executor + "-" + std::to_string(n)})
          .get(30s);
      } catch (const std::exception&) {
        if (!stop)
          std::this_thread::sleep_for(10ms);
      }
    }
  }};
  {
    ret::collector gc{rt, all,
                      {.interval = 20ms, .batch = 25, .batch_time = 1s,
                       .duty = 1.0, .turn = 300ms}};
    std::cout << "READY" << std::endl;
    term.wait();
    stop = true;
    load.join();
  }
  rt.stop();
  std::cout << "STOPPED" << std::endl;
}
