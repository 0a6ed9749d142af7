// Faults the torture run (tests/torture) found, each pinned where it was
// found: every test here failed before its fix.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class torture_findings_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  test::database db_;
};

// A run a client starts and signals at once: the runtime adopts it (the
// start's notice) while the message's notice asks it to wake the run, which
// is not in memory yet. The wake claimed the run again at a new epoch and
// spawned a second actor, and both ran the first step's body (the first
// one's checkpoint fenced): a body run twice with no crash at all.
TEST_F(torture_findings_test, a_run_signalled_as_it_is_adopted_runs_each_step_once) {
  std::mutex mtx;
  std::map<std::string, int> bodies;
  runtime rt{db_.runtime_config("adopter")};
  rt.register_workflow("signalled", [&](workflow_context& ctx) -> task<int> {
    auto id = ctx.workflow_id();
    auto first = [&] {
      {
        std::lock_guard guard{mtx};
        ++bodies[id];
      }
      std::this_thread::sleep_for(20ms); // both copies inside at once
      return 1;
    };
    auto v = co_await ctx.step("first", first);
    co_return v + co_await ctx.recv<int>("go");
  });
  rt.start();
  client c{db_.runtime_config()};
  std::vector<workflow_handle<int>> runs;
  for (int n = 0; n < 60; ++n) {
    auto id = "s" + std::to_string(n);
    runs.push_back(c.start_workflow<int>("signalled", {.id = id}));
    c.send(id, "go", 1);
  }
  for (auto& h : runs)
    EXPECT_EQ(h.get(30s), 2);
  std::lock_guard guard{mtx};
  for (auto& [id, n] : bodies)
    EXPECT_EQ(n, 1) << "the first step of " << id << " ran " << n << " times";
}

// A run leaving memory writes its wake-up time and then reads the store
// once more, for a delivery committed before that time was written whose
// notice was lost (a cut connection). When that read failed (the store was
// restarting), the run took the failure for "nothing delivered" and left
// for good: a transfer waited for ever on an account call that had ended.
// Here every read of the wait fails for a while, long enough to span the
// run's passivation, and the message's notice is spent on a failed read.
TEST_F(torture_findings_test, a_failed_read_never_passivates_a_run_past_its_delivery) {
  using clock = std::chrono::steady_clock;
  std::mutex mtx;
  std::optional<clock::time_point> failing_until;
  int failed_reads = 0;
  auto hooks = std::make_shared<config::test_hooks>();
  hooks->wait_checking = [&](const std::string&, std::int32_t) {
    std::lock_guard guard{mtx};
    if (failing_until && clock::now() < *failing_until) {
      ++failed_reads;
      throw std::runtime_error{"store unavailable (injected)"};
    }
  };
  auto cfg = db_.runtime_config("waiter");
  cfg.passivate_after = 300ms;
  cfg.testing = hooks;
  runtime rt{cfg};
  rt.register_workflow("waits", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.recv<int>("go");
  });
  rt.start();
  client c{db_.runtime_config()};
  auto h = c.start_workflow<int>("waits", {.id = "w"});
  std::this_thread::sleep_for(100ms); // waiting, in memory
  {
    std::lock_guard guard{mtx};
    failing_until = clock::now() + 1500ms; // past passivation at 300 ms
  }
  c.send("w", "go", 7);
  EXPECT_EQ(h.get(10s), 7);
  std::lock_guard guard{mtx};
  EXPECT_GE(failed_reads, 2); // the wake's read and the confirmation's
}

} // namespace
