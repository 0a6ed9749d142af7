#pragma once

// What the timer tests share: a fresh database on the store under test, a
// manual clock every runtime of the test reads, and questions about runs
// asked of the store directly.

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "perdure/config.hpp"
#include "perdure/runtime.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/testing/manual_clock.hpp"
#include "support/test_support.hpp"

namespace perdure::test {

class timer_fixture : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = database::fresh();
    store_ = persistence::open_store(db_.store_options());
    store_->migrate();
  }

  /// Returns a runtime config on the test's database and manual clock.
  config cfg(std::string executor = "local") {
    auto c = db_.runtime_config(std::move(executor));
    c.step_threads = 4;
    c.clock = clock_;
    return c;
  }

  /// Waits (really) until `pred()` holds; false after `limit`.
  template <class P>
  static bool eventually(P pred, std::chrono::milliseconds limit
                                 = std::chrono::seconds{10}) {
    return test::eventually(std::move(pred), limit);
  }

  /// Forks a process that builds a runtime (executor "local", real clock),
  /// lets `define` register its workflows, starts `workflow` as run `id`
  /// and waits to be killed; returns its pid (-1 if fork failed).
  template <class Define>
  pid_t fork_runtime(Define define, const std::string& workflow,
                     const std::string& id) {
    auto pid = fork();
    if (pid == 0) {
      runtime rt{db_.runtime_config()};
      define(rt);
      rt.start();
      rt.start_workflow<int>(workflow, {.id = id});
      pause();
      _exit(0);
    }
    return pid;
  }

  /// SIGKILLs process `pid` and reaps it.
  static void kill_process(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }

  /// Returns how many journal entries of kind `k` run `id` has.
  int entries(const std::string& id, persistence::entry_kind k) {
    int n = 0;
    for (auto& e : store_->load_journals({id}))
      n += e.kind == k ? 1 : 0;
    return n;
  }

  /// Returns whether run `id` has a journal entry of kind `k`.
  bool has_entry(const std::string& id, persistence::entry_kind k) {
    return entries(id, k) > 0;
  }

  /// Returns whether run `id` is passivated (has a wake-up time to come).
  bool passivated(const std::string& id) {
    auto r = store_->get_run(id);
    return r && r->wake_at_ms.value_or(0) > 0;
  }

  std::shared_ptr<perdure::testing::manual_clock> clock_
    = std::make_shared<perdure::testing::manual_clock>();
  database db_;
  std::unique_ptr<persistence::store> store_;
};

} // namespace perdure::test
