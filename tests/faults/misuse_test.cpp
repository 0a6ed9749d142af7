// What a user can get wrong, and what the runtime must stay right under:
// sleeps too long to represent, stop() called from step code, every step
// thread busy while deadlines, cancellations and deliveries are due.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <limits>
#include <thread>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/testing/manual_clock.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class misuse_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  test::database db_;
};

TEST_F(misuse_test, a_sleep_too_long_to_represent_never_wakes_early) {
  auto clock = std::make_shared<perdure::testing::manual_clock>();
  auto cfg = db_.runtime_config();
  cfg.clock = clock;
  runtime rt{cfg};
  rt.register_workflow("ms", [](workflow_context& ctx) -> task<int> {
    co_await ctx.sleep(std::chrono::milliseconds::max());
    co_return 1;
  });
  rt.register_workflow("hours", [](workflow_context& ctx) -> task<int> {
    co_await ctx.sleep(std::chrono::hours::max()); // overflows as ms
    co_return 2;
  });
  rt.register_workflow("recv", [](workflow_context& ctx) -> task<int> {
    auto got = co_await ctx.recv<int>("t", std::chrono::hours::max());
    co_return got ? *got : -1;
  });
  rt.start();
  auto ms = rt.start_workflow<int>("ms", {.id = "ms"});
  auto hours = rt.start_workflow<int>("hours", {.id = "hours"});
  auto recv = rt.start_workflow<int>("recv", {.id = "recv"});
  test::sql_client sql{db_};
  std::string payload = test::store_under_test() == "postgres"
                          ? "convert_from(payload, 'UTF8')"
                          : "payload";
  ASSERT_TRUE(test::eventually([&] {
    return sql.scalar("SELECT COUNT(*) FROM " + sql.table("journal")) == "3";
  }));
  clock->advance(std::chrono::hours{24 * 365 * 100}); // a hundred years
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(ms.status(), run_status::pending);
  EXPECT_EQ(hours.status(), run_status::pending);
  EXPECT_EQ(recv.status(), run_status::pending);
  EXPECT_EQ(sql.scalar("SELECT " + payload + " FROM " + sql.table("journal")
                       + " WHERE run_id = 'ms'"),
            std::to_string(std::numeric_limits<std::int64_t>::max()))
    << "saturated, not wrapped around";
  rt.send("recv", "t", 5);
  EXPECT_EQ(recv.get(10s), 5);
  rt.cancel("ms");
  EXPECT_EQ(ms.status(), run_status::cancelled);
}

/// Registers "stopper": a step that stops `rt` and returns what stop()
/// threw (or "stopped").
void register_stopper(runtime& rt) {
  rt.register_workflow("stopper", [&rt](workflow_context& ctx) -> task<std::string> {
    co_return co_await ctx.step("stop", [&rt] {
      try {
        rt.stop();
        return std::string{"stopped"};
      } catch (const perdure::error& ex) {
        return std::string{to_string(ex.code())};
      }
    });
  });
}

TEST_F(misuse_test, stop_called_from_step_code_is_a_clear_error) {
  runtime rt{db_.runtime_config()};
  register_stopper(rt);
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("stopper").get(10s),
            "invalid_argument");
}

// Found by review of the runtime's split into services: a queue's worker
// pool belongs to the runtime too, so stop() from an item's step is the
// same clear error (it hung: stop() waited for the actor waiting for it).
TEST_F(misuse_test, stop_called_from_a_queue_item_s_step_is_a_clear_error) {
  runtime rt{db_.runtime_config()};
  register_stopper(rt);
  queues::register_queue(rt, "q", {.worker_concurrency = 1});
  rt.start();
  EXPECT_EQ(queues::enqueue<std::string>(rt, "q", "stopper").get(10s),
            "invalid_argument");
}

/// Returns what `rt.stop()` threw, or "stopped".
std::string stop_and_say(runtime& rt) {
  try {
    rt.stop();
    return "stopped";
  } catch (const perdure::error& ex) {
    return to_string(ex.code());
  }
}

// Found by review (session 26): a workflow body or an object handler runs
// on an actor thread, and stop() waits for every actor, its own included:
// it never returned. It is the step code's clear error now, and the
// runtime goes on running and stops when asked from an application thread.
TEST_F(misuse_test, stop_called_from_a_workflow_body_is_a_clear_error) {
  runtime rt{db_.runtime_config()};
  rt.register_workflow("body_stopper", [&rt](workflow_context&) -> task<std::string> {
    co_return stop_and_say(rt);
  });
  rt.register_workflow("one", [](workflow_context&) -> task<int> { co_return 1; });
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("body_stopper").get(10s),
            "invalid_argument");
  EXPECT_EQ(rt.start_workflow<int>("one").get(10s), 1) << "still running";
  rt.stop();
}

TEST_F(misuse_test, stop_called_from_an_object_handler_is_a_clear_error) {
  runtime rt{db_.runtime_config()};
  rt.register_object<int>("stopper").handler(
    "stop", [&rt](object_context<int>& ctx) -> task<std::string> {
      ctx.state() += 1;
      co_return stop_and_say(rt);
    });
  rt.start();
  EXPECT_EQ(rt.call<std::string>("stopper", "k", "stop"), "invalid_argument");
  EXPECT_EQ(rt.call<std::string>("stopper", "k", "stop"), "invalid_argument")
    << "the key still takes calls";
  rt.stop();
}

TEST_F(misuse_test, busy_step_threads_hold_up_no_deadline_cancel_or_delivery) {
  auto cfg = db_.runtime_config();
  cfg.step_threads = 2;
  runtime rt{cfg};
  std::promise<void> release;
  auto gate = release.get_future().share();
  rt.register_workflow("hog", [&](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.step("hold", [&] {
      gate.wait();
      return 1;
    });
  });
  rt.register_workflow("waiter", [](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.awakeable<int>();
    co_return co_await a;
  });
  rt.start();
  auto hog1 = rt.start_workflow<int>("hog");
  auto hog2 = rt.start_workflow<int>("hog");
  test::sql_client sql{db_};
  auto started = std::chrono::steady_clock::now();
  auto timed = rt.start_workflow<int>("waiter", {.id = "timed",
                                                 .timeout = 300ms});
  auto cancelled = rt.start_workflow<int>("waiter", {.id = "cancelled"});
  auto resolved = rt.start_workflow<int>("waiter", {.id = "resolved"});
  ASSERT_TRUE(test::eventually([&] {
    return sql.scalar("SELECT COUNT(*) FROM " + sql.table("journal")
                      + " WHERE kind = 'awakeable'")
           == "3";
  }));
  rt.cancel("cancelled");
  rt.resolve_awakeable("awk_0_resolved", 9);
  EXPECT_EQ(resolved.get(5s), 9) << "delivered while every step thread works";
  EXPECT_TRUE(test::eventually([&] { return timed.status() == run_status::cancelled; },
                         5s))
    << "the deadline acted while every step thread works";
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_EQ(cancelled.status(), run_status::cancelled);
  EXPECT_EQ(hog1.status(), run_status::pending);
  release.set_value();
  EXPECT_EQ(hog1.get(10s), 1);
  EXPECT_EQ(hog2.get(10s), 1);
}

TEST_F(misuse_test, a_cancel_during_a_step_keeps_what_the_step_uses_alive) {
  // The step writes to a local of the workflow after the cancel ended the
  // run: the frame must outlive the body (AddressSanitizer, in
  // `scripts/test --sanitize`, reports it otherwise).
  runtime rt{db_.runtime_config()};
  std::promise<void> entered;
  rt.register_workflow("busy", [&](workflow_context& ctx) -> task<int> {
    std::string local = "before";
    co_await ctx.step("work", [&] {
      entered.set_value();
      std::this_thread::sleep_for(300ms);
      local.assign(1000, 'x'); // the frame's memory
    });
    co_return static_cast<int>(local.size());
  });
  rt.start();
  auto h = rt.start_workflow<int>("busy", {.id = "busy"});
  entered.get_future().wait();
  rt.cancel("busy");
  EXPECT_EQ(h.status(), run_status::cancelled);
  std::this_thread::sleep_for(500ms); // the body finishes after the cancel
  rt.stop();
}

} // namespace
