// A runtime process for the multi-process schedule test: its time is the
// test's file clock; it registers workflow "tick" (returns its input),
// fires schedules with a ticker, prints READY and runs until SIGTERM (a
// clean stop) or a kill.
//
//   perdure-schedule-worker <url> <schema> <executor> <clock file>

#include <chrono>
#include <iostream>
#include <string>

#include "perdure/perdure.hpp"
#include "perdure/schedules/schedule.hpp"
#include "schedules/file_clock.hpp"
#include "support/sigterm_wait.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 5) {
    std::cerr << "usage: perdure-schedule-worker <url> <schema> <executor> "
                 "<clock file>\n";
    return 2;
  }
  auto db = test::database::named(argv[1], argv[2]);
  auto cfg = db.runtime_config(argv[3]);
  cfg.lease_timeout = 2s;
  cfg.clock = std::make_shared<test::file_clock>(argv[4]);
  test::sigterm_wait term; // before the runtime's threads start
  runtime rt{cfg};
  rt.register_workflow("tick", [](workflow_context&, std::string zone)
                                 -> task<std::string> { co_return zone; });
  rt.start();
  {
    schedules::ticker ticker{rt, {.poll = 10ms, .batch = 2}};
    std::cout << "READY" << std::endl;
    term.wait();
  }
  rt.stop();
  std::cout << "STOPPED" << std::endl;
}
