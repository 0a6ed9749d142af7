// The process the saga crash tests kill. It starts `sagas` sagas ("s<n>",
// fixed ids: started again, it finds them) of four transactional steps; saga
// n fails for good at step n % 5 (0: none fails). Each step and each
// compensation writes one row to `effects` in its own transaction, so a
// row per effect is what exactly-once means. Then it waits for all of them
// and exits 0.
//
//   perdure-saga-worker <url> <schema> <executor> <sagas>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/sagas/saga.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

/// Records effect `what` of saga `saga`, in the step's own transaction.
void effect(sql_session& s, const std::string& table, const std::string& saga,
            const std::string& what) {
  std::this_thread::sleep_for(5ms); // time for a kill to land in between
  s.exec_params("INSERT INTO " + table + " (saga, what) VALUES ($1, $2)", saga,
                what);
}

} // namespace

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 5) {
    std::cerr << "usage: perdure-saga-worker <url> <schema> <executor> <sagas>\n";
    return 2;
  }
  auto db = test::database::named(argv[1], argv[2]);
  int sagas = std::stoi(argv[4]);
  auto cfg = db.runtime_config(argv[3]);
  cfg.lease_timeout = 2s;
  runtime rt{cfg};
  auto table = test::sql_client{db}.table("effects");
  rt.register_workflow("four", [table](workflow_context& ctx, int fail_at) -> task<int> {
    auto id = ctx.workflow_id();
    co_return co_await sagas::run<int>(ctx, [&](sagas::saga& s) -> task<int> {
      for (int k = 1; k <= 4; ++k) {
        auto name = "s" + std::to_string(k);
        auto undo = [table, id, name](sql_session& sql, const int& got) {
          effect(sql, table, id, "undo " + name + "=" + std::to_string(got));
        };
        co_await s.transaction(
          name,
          [&](sql_session& sql) {
            if (k == fail_at)
              throw terminal_error(name + " refused");
            effect(sql, table, id, "do " + name);
            return k;
          },
          undo);
      }
      co_return 0;
    });
  });
  rt.start();
  std::cout << "READY" << std::endl; // a kill may land among the starts too
  std::vector<workflow_handle<int>> started;
  for (int n = 0; n < sagas; ++n)
    started.push_back(
      rt.start_workflow<int>("four", n % 5, {.id = "s" + std::to_string(n)}));
  int compensated = 0, succeeded = 0;
  for (auto& h : started) {
    try {
      h.get(120s);
      ++succeeded;
    } catch (const perdure::error& ex) {
      if (ex.code() != errc::compensated) {
        std::cout << "UNEXPECTED " << h.id() << ": " << ex.what() << std::endl;
        return 1;
      }
      ++compensated;
    }
  }
  std::cout << "DONE " << succeeded << " " << compensated << std::endl;
  return 0;
}
