// The process the crash test kills. It starts (or re-attaches to) W
// workflows of S steps each and waits for all of them. Every execution of a
// plain step is recorded in the side table step_log with this process's
// incarnation number; step 5 is a transactional step that writes tx_rows.
//
//   perdure-crash-worker <url> <schema> <incarnation> <workflows> <steps>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr int transactional_step = 5;

test::database db;
int incarnation = 0;

test::sql_client& side_table() {
  return test::thread_client(db);
}

} // namespace

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 6) {
    std::cerr << "usage: perdure-crash-worker <url> <schema> <incarnation> "
                 "<workflows> <steps>\n";
    return 2;
  }
  db = test::database::named(argv[1], argv[2]);
  incarnation = std::stoi(argv[3]);
  int workflows = std::stoi(argv[4]);
  int steps = std::stoi(argv[5]);

  auto cfg = db.runtime_config("crash-worker");
  cfg.step_threads = 8;
  runtime rt{cfg};
  auto step_log = side_table().table("step_log");
  auto tx_rows = side_table().table("tx_rows");
  rt.register_workflow("crashy", [&](workflow_context& ctx, int n) -> task<long> {
    long total = 0;
    auto id = ctx.workflow_id();
    for (int i = 0; i < steps; ++i) {
      if (i == transactional_step) {
        total += co_await ctx.transaction("tx", [&](sql_session& s) {
          s.exec_params("INSERT INTO " + tx_rows + " (run_id) VALUES ($1)", id);
          return 1000L;
        });
        continue;
      }
      total += co_await ctx.step("s" + std::to_string(i), [&, i] {
        side_table().exec("INSERT INTO " + step_log
                            + " (run_id, seq, incarnation) VALUES ($1, $2, $3)",
                          {id, std::int64_t{i}, std::int64_t{incarnation}});
        std::this_thread::sleep_for(5ms);
        return static_cast<long>(i * i + n);
      });
    }
    co_return total;
  });
  rt.start();
  std::vector<workflow_handle<long>> handles;
  for (int n = 0; n < workflows; ++n) {
    handles.push_back(
      rt.start_workflow<long>("crashy", n, {.id = "wf-" + std::to_string(n)}));
    // Ready once a run is stored, not after all: storing 200 can take as
    // long as running them, and a kill after the work is over tests nothing.
    if (n == 0)
      std::cout << "READY" << std::endl;
  }
  for (auto& h : handles)
    h.get(120s);
  std::cout << "DONE" << std::endl;
  return 0;
}
