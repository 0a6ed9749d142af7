// Durable sleeps, passivation, awakeables and cancellation, on the store
// under test. Time is a manual clock (perdure::testing) except where a real
// process is killed, which cannot share one.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "timers/timer_fixture.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

/// A workflow that steps, sleeps an hour, and steps again, counting runs.
struct napper {
  std::atomic<int> before{0}, after{0};

  void define(runtime& rt) {
    rt.register_workflow("nap", [this](workflow_context& ctx) -> task<int> {
      co_await ctx.step("before", [this] { return ++before; });
      co_await ctx.sleep(1h);
      co_return co_await ctx.step("after", [this] { return ++after; });
    });
  }

  /// Returns a started runtime on `c` that knows "nap".
  std::unique_ptr<runtime> runtime_on(config c) {
    auto rt = std::make_unique<runtime>(std::move(c));
    define(*rt);
    rt->start();
    return rt;
  }
};

class timers_test : public test::timer_fixture {
protected:
  /// Starts run "n" of "nap" on a runtime of `c`, and stops that runtime
  /// once the sleep is recorded (`until_passivated`: once the run left
  /// memory). False if that never happened.
  bool stop_while_napping(napper& n, config c, bool until_passivated = false) {
    auto rt = n.runtime_on(std::move(c));
    rt->start_workflow<int>("nap", {.id = "n"});
    return eventually([&] {
      return until_passivated ? passivated("n")
                              : has_entry("n", persistence::entry_kind::sleep);
    });
  }
};

/// An id an awakeable-using workflow publishes for the test to resolve.
struct mailbox {
  std::mutex mtx;
  std::string id;

  void put(const std::string& x) {
    std::lock_guard guard{mtx};
    id = x;
  }

  std::string get() {
    std::lock_guard guard{mtx};
    return id;
  }
};

} // namespace

// -- sleeping ---------------------------------------------------------------------

TEST_F(timers_test, a_sleep_wakes_when_the_clock_reaches_it_and_not_before) {
  napper n;
  auto rt = n.runtime_on(cfg());
  auto h = rt->start_workflow<int>("nap", {.id = "n"});
  ASSERT_TRUE(eventually([&] { return has_entry("n", persistence::entry_kind::sleep); }));
  clock_->advance(59min);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(n.after.load(), 0) << "woke before the hour was up";
  EXPECT_EQ(h.status(), run_status::pending);
  clock_->advance(2min);
  EXPECT_EQ(h.get(10s), 1);
  EXPECT_EQ(n.before.load(), 1);
}

TEST_F(timers_test, after_a_restart_a_run_sleeps_only_the_remainder) {
  napper n;
  ASSERT_TRUE(stop_while_napping(n, cfg()));
  clock_->advance(40min);
  auto rt = n.runtime_on(cfg());
  auto h = rt->retrieve_workflow<int>("n");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(h.status(), run_status::pending);
  clock_->advance(21min); // 61 minutes after the sleep began
  EXPECT_EQ(h.get(10s), 1);
  EXPECT_EQ(n.before.load(), 1) << "the step before the sleep ran again";
}

TEST_F(timers_test, a_sleep_already_due_after_a_restart_does_not_wait) {
  napper n;
  ASSERT_TRUE(stop_while_napping(n, cfg()));
  clock_->advance(2h);
  auto rt = n.runtime_on(cfg());
  EXPECT_EQ(rt->retrieve_workflow<int>("n").get(10s), 1);
}

TEST_F(timers_test, a_long_sleep_passivates_and_its_timer_brings_the_run_back) {
  napper n;
  auto c = cfg();
  c.passivate_after = 50ms;
  auto rt = n.runtime_on(c);
  auto h = rt->start_workflow<int>("nap", {.id = "n"});
  ASSERT_TRUE(eventually([&] { return passivated("n"); }));
  clock_->advance(61min);
  EXPECT_EQ(h.get(10s), 1);
  EXPECT_EQ(n.before.load(), 1) << "replay after passivation re-ran a step";
}

TEST_F(timers_test, a_passivated_run_stays_out_of_memory_across_a_restart) {
  napper n;
  auto c = cfg();
  c.passivate_after = 50ms;
  ASSERT_TRUE(stop_while_napping(n, c, /*until_passivated=*/true));
  auto rt = n.runtime_on(c);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(rt->retrieve_workflow<int>("n").status(), run_status::pending);
  clock_->advance(61min);
  EXPECT_EQ(rt->retrieve_workflow<int>("n").get(10s), 1);
  EXPECT_EQ(n.before.load(), 1);
}

// A real process is SIGKILLed while sleeping (real clock): the restarted
// runtime wakes the run when the recorded time comes, not a full sleep later.
TEST_F(timers_test, a_process_killed_while_sleeping_wakes_at_the_recorded_time) {
  auto define = [](runtime& rt) {
    rt.register_workflow("nap", [](workflow_context& ctx) -> task<int> {
      co_await ctx.sleep(3s);
      co_return 7;
    });
  };
  auto pid = fork_runtime(define, "nap", "k");
  ASSERT_GE(pid, 0);
  auto sleep_recorded = eventually([&] { return has_entry("k", persistence::entry_kind::sleep); });
  kill_process(pid);
  ASSERT_TRUE(sleep_recorded);
  auto journal = store_->load_journals({"k"});
  auto due = std::chrono::system_clock::time_point{
    std::chrono::milliseconds{std::stoll(journal.at(0).payload)}};
  std::this_thread::sleep_for(1s);
  runtime rt{db_.runtime_config()};
  define(rt);
  auto restarted = std::chrono::system_clock::now();
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<int>("k").get(10s), 7);
  auto woke = std::chrono::system_clock::now();
  EXPECT_GE(woke, due) << "woke before the recorded time";
  EXPECT_LT(woke - restarted, 2800ms) << "slept the whole duration again";
}

// -- awakeables ---------------------------------------------------------------------

class awakeable_test : public timers_test {
protected:
  /// Defines "approve": creates an awakeable, publishes its id in a step,
  /// optionally blocks in a second step until `gate`, then awaits it.
  void define(runtime& rt, mailbox& box, std::atomic<bool>* gate = nullptr) {
    rt.register_workflow("approve", [&box, gate](workflow_context& ctx) -> task<std::string> {
      auto a = co_await ctx.awakeable<int>();
      co_await ctx.step("publish", [&] { box.put(a.id()); });
      if (gate)
        co_await ctx.step("hold", [gate] {
          while (!gate->load())
            std::this_thread::sleep_for(1ms);
        });
      try {
        auto v = co_await a;
        co_return "approved " + std::to_string(v);
      } catch (const terminal_error& ex) {
        co_return std::string{"rejected: "} + ex.what();
      }
    });
  }
};

TEST_F(awakeable_test, a_resolution_is_delivered_to_the_waiting_run) {
  mailbox box;
  runtime rt{cfg()};
  define(rt, box);
  rt.start();
  auto h = rt.start_workflow<std::string>("approve", {.id = "a"});
  ASSERT_TRUE(eventually([&] { return !box.get().empty(); }));
  std::this_thread::sleep_for(20ms);
  rt.resolve_awakeable(box.get(), 42);
  EXPECT_EQ(h.get(10s), "approved 42");
}

TEST_F(awakeable_test, a_resolution_before_the_await_is_not_lost) {
  mailbox box;
  std::atomic<bool> gate{false};
  runtime rt{cfg()};
  define(rt, box, &gate);
  rt.start();
  auto h = rt.start_workflow<std::string>("approve", {.id = "a"});
  ASSERT_TRUE(eventually([&] { return !box.get().empty(); }));
  rt.resolve_awakeable(box.get(), 7); // the run is still in "hold"
  gate = true;
  EXPECT_EQ(h.get(10s), "approved 7");
}

TEST_F(awakeable_test, a_rejection_reaches_the_code_as_a_terminal_error) {
  mailbox box;
  runtime rt{cfg()};
  define(rt, box);
  rt.start();
  auto h = rt.start_workflow<std::string>("approve", {.id = "a"});
  ASSERT_TRUE(eventually([&] { return !box.get().empty(); }));
  rt.reject_awakeable(box.get(), "card declined");
  EXPECT_EQ(h.get(10s), "rejected: card declined");
}

TEST_F(awakeable_test, resolving_twice_is_an_error_and_the_first_value_stays) {
  mailbox box;
  std::atomic<bool> gate{false};
  runtime rt{cfg()};
  define(rt, box, &gate);
  rt.start();
  auto h = rt.start_workflow<std::string>("approve", {.id = "a"});
  ASSERT_TRUE(eventually([&] { return !box.get().empty(); }));
  rt.resolve_awakeable(box.get(), 1);
  try {
    rt.resolve_awakeable(box.get(), 2);
    FAIL() << "a second resolution was accepted";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::already_resolved);
  }
  EXPECT_THROW(rt.reject_awakeable(box.get(), "late"), error);
  gate = true;
  EXPECT_EQ(h.get(10s), "approved 1");
}

TEST_F(awakeable_test, unknown_or_malformed_ids_are_clear_errors) {
  mailbox box;
  runtime rt{cfg()};
  define(rt, box);
  rt.start();
  auto h = rt.start_workflow<std::string>("approve", {.id = "a"});
  ASSERT_TRUE(eventually([&] { return !box.get().empty(); }));
  auto real = box.get();
  for (std::string bad :
       {std::string{""}, std::string{"nope"}, std::string{"awk_"},
        std::string{"awk_x_a"}, std::string{"awk_0_"}, std::string{"awk_99_a"},
        std::string{"awk_1_a"}, // index 1 is the "publish" step, not one
        std::string{"awk_0_nosuchrun"}, std::string{"awk_0_a'); DROP TABLE runs; --"},
        std::string{"awk_99999999999999999999_a"}, real + "x"}) {
    try {
      rt.resolve_awakeable(bad, 1);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const error& ex) {
      EXPECT_EQ(ex.code(), errc::not_found) << bad;
    }
  }
  rt.resolve_awakeable(real, 5); // the real one still works
  EXPECT_EQ(h.get(10s), "approved 5");
}

TEST_F(awakeable_test, a_passivated_waiting_run_is_brought_back_by_its_resolution) {
  mailbox box;
  auto c = cfg();
  c.passivate_after = 50ms;
  runtime rt{c};
  define(rt, box);
  rt.start();
  auto h = rt.start_workflow<std::string>("approve", {.id = "a"});
  // Waiting longer than passivate_after is measured on the run's clock.
  ASSERT_TRUE(eventually([&] {
    clock_->advance(1s);
    return passivated("a");
  }));
  rt.resolve_awakeable(box.get(), 9);
  EXPECT_EQ(h.get(10s), "approved 9");
  EXPECT_FALSE(passivated("a"));
}

TEST_F(awakeable_test, a_resolution_from_another_process_survives_the_owners_restart) {
  mailbox box;
  auto c = cfg();
  c.passivate_after = 50ms;
  {
    runtime rt{c};
    define(rt, box);
    rt.start();
    rt.start_workflow<std::string>("approve", {.id = "a"});
    ASSERT_TRUE(eventually([&] {
      clock_->advance(1s);
      return passivated("a");
    }));
  }
  {
    // Another process (executor) sharing the database resolves it while the
    // owner is down.
    runtime other{cfg("other")};
    other.start();
    other.resolve_awakeable(box.get(), 3);
  }
  runtime rt{c};
  define(rt, box);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<std::string>("a").get(10s), "approved 3");
}

// -- cancellation -----------------------------------------------------------------

TEST_F(timers_test, cancelling_a_sleeping_run_ends_it_promptly) {
  napper n;
  auto rt = n.runtime_on(cfg());
  auto h = rt->start_workflow<int>("nap", {.id = "n"});
  ASSERT_TRUE(eventually([&] { return has_entry("n", persistence::entry_kind::sleep); }));
  auto t0 = std::chrono::steady_clock::now();
  h.cancel();
  try {
    h.get(5s);
    FAIL() << "a cancelled run returned a result";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_cancelled);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(h.status(), run_status::cancelled);
  clock_->advance(2h);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(n.after.load(), 0) << "a cancelled run went on after its sleep";
}

TEST_F(timers_test, cancelling_a_passivated_run_and_unknown_or_ended_runs) {
  napper n;
  auto c = cfg();
  c.passivate_after = 50ms;
  auto rt = n.runtime_on(c);
  auto h = rt->start_workflow<int>("nap", {.id = "n"});
  ASSERT_TRUE(eventually([&] { return passivated("n"); }));
  rt->cancel("n");
  EXPECT_THROW(h.get(5s), error);
  EXPECT_EQ(h.status(), run_status::cancelled);
  clock_->advance(2h);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(n.after.load(), 0);
  EXPECT_EQ(h.status(), run_status::cancelled);
  try {
    rt->cancel("no-such-run");
    FAIL() << "cancelling an unknown run succeeded";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::not_found);
  }
}

TEST_F(timers_test, cancelling_an_ended_run_changes_nothing) {
  runtime rt{cfg()};
  rt.register_workflow("quick", [](workflow_context&) -> task<int> { co_return 1; });
  rt.start();
  auto h = rt.start_workflow<int>("quick", {.id = "q"});
  EXPECT_EQ(h.get(10s), 1);
  h.cancel();
  EXPECT_EQ(h.status(), run_status::success);
  EXPECT_EQ(h.get(1s), 1);
}

TEST_F(timers_test, a_deadline_cancels_the_run_also_after_a_restart) {
  napper n;
  {
    auto rt = n.runtime_on(cfg());
    auto h = rt->start_workflow<int>("nap", {.id = "d1", .timeout = 30min});
    rt->start_workflow<int>("nap", {.id = "d2", .timeout = 30min});
    ASSERT_TRUE(eventually([&] { return has_entry("d1", persistence::entry_kind::sleep); }));
    clock_->advance(31min);
    try {
      h.get(5s);
      FAIL() << "a run past its deadline returned";
    } catch (const error& ex) {
      EXPECT_EQ(ex.code(), errc::workflow_cancelled);
    }
    // d2 has the same deadline: it is cancelled too, by this process.
    EXPECT_TRUE(eventually([&] {
      return store_->get_run("d2")->status == run_status::cancelled;
    }));
    clock_->set(clock_->now() - 31min); // never backwards: no effect
  }
  // A new run whose deadline must survive the restart.
  {
    auto rt = n.runtime_on(cfg());
    rt->start_workflow<int>("nap", {.id = "d3", .timeout = 30min});
    ASSERT_TRUE(eventually([&] { return has_entry("d3", persistence::entry_kind::sleep); }));
  }
  auto rt = n.runtime_on(cfg());
  clock_->advance(29min);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(store_->get_run("d3")->status, run_status::pending);
  clock_->advance(2min);
  EXPECT_THROW(rt->retrieve_workflow<int>("d3").get(5s), error);
  EXPECT_EQ(store_->get_run("d3")->status, run_status::cancelled);
  EXPECT_EQ(n.after.load(), 0);
}

// A real process is SIGKILLed while awaiting; the resolution arrives while
// it is down, from another process; the restarted owner delivers it.
TEST_F(awakeable_test, a_process_killed_while_awaiting_gets_the_value_after_restart) {
  auto define = [](runtime& rt) {
    rt.register_workflow("wait", [](workflow_context& ctx) -> task<int> {
      auto a = co_await ctx.awakeable<int>();
      co_return co_await a + 1;
    });
  };
  auto pid = fork_runtime(define, "wait", "k");
  ASSERT_GE(pid, 0);
  auto created = eventually([&] { return has_entry("k", persistence::entry_kind::awakeable); });
  std::this_thread::sleep_for(50ms); // let it reach the await
  kill_process(pid);
  ASSERT_TRUE(created);
  {
    runtime other{db_.runtime_config("other")};
    other.start();
    other.resolve_awakeable("awk_0_k", 41);
  }
  runtime rt{db_.runtime_config()};
  define(rt);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<int>("k").get(10s), 42);
}

TEST_F(timers_test, cancelling_a_run_inside_a_step_ends_it_and_records_nothing_more) {
  std::atomic<bool> inside{false}, release{false}, after{false};
  runtime rt{cfg()};
  rt.register_workflow("busy", [&](workflow_context& ctx) -> task<int> {
    co_await ctx.step("long", [&] {
      inside = true;
      while (!release.load())
        std::this_thread::sleep_for(1ms);
      return 1;
    });
    co_await ctx.step("next", [&] { after = true; });
    co_return 2;
  });
  rt.start();
  auto h = rt.start_workflow<int>("busy", {.id = "b"});
  ASSERT_TRUE(eventually([&] { return inside.load(); }));
  auto t0 = std::chrono::steady_clock::now();
  h.cancel();
  EXPECT_THROW(h.get(5s), error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "not prompt";
  release = true;
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(after.load()) << "the run went on after its cancellation";
  EXPECT_TRUE(store_->load_journals({"b"}).empty())
    << "the step finishing after the cancellation was checkpointed";
  EXPECT_EQ(h.status(), run_status::cancelled);
}
