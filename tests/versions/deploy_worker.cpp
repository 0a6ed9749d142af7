// A runtime process for the rolling-deploy test, with the code of one side
// of a deploy: workflow "ship" reserves, sleeps durably, books (old code:
// "book-old"; new code: "book-new" behind patch "carrier", "book-old" for
// runs that booked before), and returns how it booked. Every step body
// logs (run_id, step, code, pid) to the side table step_log. Prints READY
// and runs until SIGTERM (a clean stop) or SIGKILL.
//
//   perdure-deploy-worker <url> <schema> <executor> <old|new>

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>

#include "perdure/perdure.hpp"
#include "support/sigterm_wait.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

test::database db;

} // namespace

int main(int argc, char** argv) {
  test::worker_logs_to_stderr(); // stdout carries what the test reads
  if (argc != 5) {
    std::cerr << "usage: perdure-deploy-worker <url> <schema> <executor> "
                 "<old|new>\n";
    return 2;
  }
  db = test::database::named(argv[1], argv[2]);
  auto cfg = db.runtime_config(argv[3]);
  cfg.lease_timeout = 2s;
  cfg.step_threads = 8;
  std::string code = argv[4];
  test::sigterm_wait term; // before the runtime's threads start
  runtime rt{cfg};
  auto step_log = test::thread_client(db).table("step_log");
  auto logged = [&](const std::string& id, const std::string& step) {
    test::thread_client(db).exec(
      "INSERT INTO " + step_log + " (run_id, step, code, pid) VALUES ($1, $2, "
        "$3, $4)",
      {id, step, code, std::int64_t{getpid()}});
    return step;
  };
  if (code == "old") {
    rt.register_workflow("ship", [&](workflow_context& ctx) -> task<std::string> {
      auto id = ctx.workflow_id();
      co_await ctx.step("reserve", [&] { return logged(id, "reserve"); });
      co_await ctx.sleep(300ms);
      co_await ctx.step("book-old", [&] { return logged(id, "book-old"); });
      co_await ctx.sleep(300ms);
      co_await ctx.step("notify", [&] { return logged(id, "notify"); });
      co_return std::string{"old"};
    });
  } else {
    rt.register_workflow(
      "ship",
      [&](workflow_context& ctx) -> task<std::string> {
        auto id = ctx.workflow_id();
        co_await ctx.step("reserve", [&] { return logged(id, "reserve"); });
        co_await ctx.sleep(300ms);
        std::string how = "old";
        if (co_await ctx.patched("carrier")) {
          co_await ctx.step("book-new", [&] { return logged(id, "book-new"); });
          how = "new";
        } else {
          co_await ctx.step("book-old", [&] { return logged(id, "book-old"); });
        }
        co_await ctx.sleep(300ms);
        co_await ctx.step("notify", [&] { return logged(id, "notify"); });
        co_return how;
      },
      {.patches = {"carrier"}});
  }
  rt.start();
  std::cout << "READY" << std::endl;
  term.wait();
  rt.stop();
  std::cout << "STOPPED" << std::endl;
  return 0;
}
