// A runtime process for the trace test: the traced "order" workflow, spans
// exported by the OTLP exporter the environment describes
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME). With `hang`, the charge
// step never returns (the test kills the process there). Prints READY, runs
// until SIGTERM or SIGKILL.
//
//   perdure-traced-worker <url> <schema> <executor> <hang|run>


#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "observability/traced_order.hpp"
#include "perdure/perdure.hpp"
#include "perdure/telemetry/otlp.hpp"
#include "support/sigterm_wait.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 5) {
    std::cerr << "usage: perdure-traced-worker <url> <schema> <executor> "
                 "<hang|run>\n";
    return 2;
  }
  auto db = test::database::named(argv[1], argv[2]);
  auto cfg = db.runtime_config(argv[3]);
  cfg.lease_timeout = 2s;
  cfg.span_sink = config::from_env().span_sink;
  if (!cfg.span_sink) {
    std::cerr << "no OTEL_EXPORTER_OTLP_ENDPOINT\n";
    return 2;
  }
  bool hang = std::string{argv[4]} == "hang";
  test::sigterm_wait term; // before the runtime's threads start
  runtime rt{cfg};
  test::register_traced_order(rt, [hang] {
    if (!hang)
      return;
    std::cout << "CHARGING" << std::endl;
    for (;;)
      std::this_thread::sleep_for(1s);
  });
  rt.start();
  std::cout << "READY" << std::endl;
  term.wait();
  rt.stop();
  std::cout << "STOPPED" << std::endl;
  return 0;
}
