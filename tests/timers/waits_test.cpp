// Promises, messages, select, events and child workflows, on the store under
// test, with a manual clock for timeouts.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "timers/timer_fixture.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class waits_test : public test::timer_fixture {};

/// Defines "child" (waits for its promise "go", then returns 5) and
/// "parent" (starts a child and returns its output, or how it failed).
void define_parent_of_a_waiting_child(runtime& rt) {
  rt.register_workflow("child", [](workflow_context& ctx) -> task<int> {
    co_await ctx.promise<int>("go");
    co_return 5;
  });
  rt.register_workflow("parent", [](workflow_context& ctx) -> task<std::string> {
    auto child = co_await ctx.start_child<int>("child", 0);
    try {
      co_return std::to_string(co_await child);
    } catch (const terminal_error& ex) {
      co_return std::string{"child failed: "} + ex.what();
    }
  });
}

/// Defines "wait": the next message on topic "t" within 10 minutes, or
/// "timeout".
void define_recv_within_10min(runtime& rt) {
  rt.register_workflow("wait", [](workflow_context& ctx) -> task<std::string> {
    auto got = co_await ctx.recv<int>("t", 10min);
    co_return got ? std::to_string(*got) : std::string{"timeout"};
  });
}

} // namespace

// -- promises ---------------------------------------------------------------------

TEST_F(waits_test, a_promise_completed_before_or_after_the_wait_is_delivered) {
  runtime rt{cfg()};
  std::atomic<bool> gate{false};
  rt.register_workflow("review", [&](workflow_context& ctx) -> task<std::string> {
    co_await ctx.step("hold", [&] {
      while (!gate.load())
        std::this_thread::sleep_for(1ms);
    });
    auto first = co_await ctx.promise<std::string>("first");
    auto second = co_await ctx.promise<std::string>("second");
    co_return first + "+" + second;
  });
  rt.start();
  auto h = rt.start_workflow<std::string>("review", {.id = "r"});
  rt.resolve_promise("r", "first", std::string{"early"}); // before any wait
  gate = true;
  ASSERT_TRUE(eventually([&] { return entries("r", persistence::entry_kind::await) == 1; }));
  rt.resolve_promise("r", "second", std::string{"late"});
  EXPECT_EQ(h.get(10s), "early+late");
  try {
    rt.resolve_promise("r", "first", std::string{"again"});
    FAIL() << "a promise was completed twice";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::already_resolved);
  }
  try {
    rt.resolve_promise("nobody", "first", 1);
    FAIL() << "a promise of an unknown run was accepted";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::not_found);
  }
  EXPECT_THROW(rt.resolve_promise("r", "", 1), error);
}

TEST_F(waits_test, a_rejected_promise_throws_terminal_error_in_the_workflow) {
  runtime rt{cfg()};
  rt.register_workflow("review", [](workflow_context& ctx) -> task<std::string> {
    try {
      co_await ctx.promise<int>("ok");
      co_return std::string{"accepted"};
    } catch (const terminal_error& ex) {
      co_return std::string{"refused: "} + ex.what();
    }
  });
  rt.start();
  auto h = rt.start_workflow<std::string>("review", {.id = "r"});
  rt.reject_promise("r", "ok", "no budget");
  EXPECT_EQ(h.get(10s), "refused: no budget");
}

// -- messages ----------------------------------------------------------------------

TEST_F(waits_test, messages_arrive_in_sending_order_each_once) {
  runtime rt{cfg()};
  rt.register_workflow("sum", [](workflow_context& ctx) -> task<std::string> {
    std::string seen;
    for (int i = 0; i < 4; ++i)
      seen += std::to_string(co_await ctx.recv<int>("numbers")) + ",";
    seen += co_await ctx.recv<std::string>("words");
    co_return seen;
  });
  rt.start();
  auto h = rt.start_workflow<std::string>("sum", {.id = "s"});
  rt.send("s", "words", std::string{"done"}); // another topic, sent first
  for (int i = 1; i <= 4; ++i)
    rt.send("s", "numbers", i * 10);
  rt.send("s", "numbers", 99); // never received
  EXPECT_EQ(h.get(10s), "10,20,30,40,done");
  try {
    rt.send("nobody", "numbers", 1);
    FAIL() << "a message to an unknown run was accepted";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::not_found);
  }
}

TEST_F(waits_test, received_messages_are_not_received_again_after_a_restart) {
  std::atomic<bool> gate{false};
  auto define = [&](runtime& rt) {
    rt.register_workflow("two", [&](workflow_context& ctx) -> task<std::string> {
      auto a = co_await ctx.recv<std::string>("t");
      co_await ctx.step("hold", [&] {
        while (!gate.load())
          std::this_thread::sleep_for(1ms);
      });
      auto b = co_await ctx.recv<std::string>("t");
      co_return a + b;
    });
  };
  {
    runtime rt{cfg()};
    define(rt);
    rt.start();
    rt.start_workflow<std::string>("two", {.id = "m"});
    rt.send("m", "t", std::string{"x"});
    rt.send("m", "t", std::string{"y"});
    ASSERT_TRUE(eventually([&] { return entries("m", persistence::entry_kind::await) == 1; }));
    gate = true; // "hold" finishes while stopping; the run stays PENDING
  }
  runtime rt{cfg()};
  define(rt);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<std::string>("m").get(10s), "xy");
}

TEST_F(waits_test, recv_times_out_on_the_clock_and_replay_keeps_the_timeout) {
  runtime rt{cfg()};
  define_recv_within_10min(rt);
  rt.start();
  auto h = rt.start_workflow<std::string>("wait", {.id = "w"});
  ASSERT_TRUE(eventually([&] { return entries("w", persistence::entry_kind::deadline) == 1; }));
  clock_->advance(9min);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(h.status(), run_status::pending);
  clock_->advance(2min);
  EXPECT_EQ(h.get(10s), "timeout");
  // A message after the timeout changes nothing.
  rt.send("w", "t", 5);
  EXPECT_EQ(h.get(1s), "timeout");
}

TEST_F(waits_test, after_a_restart_recv_waits_only_the_rest_of_its_timeout) {
  {
    runtime rt{cfg()};
    define_recv_within_10min(rt);
    rt.start();
    rt.start_workflow<std::string>("wait", {.id = "w"});
    ASSERT_TRUE(eventually([&] { return entries("w", persistence::entry_kind::deadline) == 1; }));
  }
  clock_->advance(8min);
  runtime rt{cfg()};
  define_recv_within_10min(rt);
  rt.start();
  auto h = rt.retrieve_workflow<std::string>("w");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(h.status(), run_status::pending);
  clock_->advance(3min); // 11 minutes after the deadline was recorded
  EXPECT_EQ(h.get(10s), "timeout");
}

TEST_F(waits_test, a_message_before_the_timeout_wins) {
  runtime rt{cfg()};
  define_recv_within_10min(rt);
  rt.start();
  auto h = rt.start_workflow<std::string>("wait", {.id = "w"});
  ASSERT_TRUE(eventually([&] { return entries("w", persistence::entry_kind::deadline) == 1; }));
  rt.send("w", "t", 5);
  EXPECT_EQ(h.get(10s), "5");
  clock_->advance(1h);
  EXPECT_EQ(h.get(1s), "5");
}

// -- select -------------------------------------------------------------------------

TEST_F(waits_test, select_records_the_first_wait_to_complete) {
  std::atomic<bool> published{false};
  std::string awk;
  runtime rt{cfg()};
  rt.register_workflow("race", [&](workflow_context& ctx) -> task<std::string> {
    auto approval = co_await ctx.awakeable<std::string>();
    co_await ctx.step("publish", [&] {
      awk = approval.id();
      published = true;
    });
    std::vector<wait_on> waits{ctx.on(approval), ctx.on_message("cancel")};
    auto first = co_await ctx.select(std::move(waits));
    if (first.index() == 0)
      co_return "approved by " + first.value<std::string>();
    co_return "cancelled: " + first.value<std::string>();
  });
  rt.start();
  auto h = rt.start_workflow<std::string>("race", {.id = "x"});
  ASSERT_TRUE(eventually([&] { return published.load(); }));
  rt.send("x", "cancel", std::string{"customer"});
  EXPECT_EQ(h.get(10s), "cancelled: customer");
  // The later resolution is stored but changes nothing, also on replay.
  rt.resolve_awakeable(awk, std::string{"boss"});
  auto journal = store_->load_journals({"x"});
  ASSERT_EQ(journal.size(), 3u);
  EXPECT_EQ(journal[2].payload.substr(0, 2), "1:") << "the winner is recorded";
}

TEST_F(waits_test, select_within_a_timeout_reports_the_timeout) {
  runtime rt{cfg()};
  rt.register_workflow("race", [](workflow_context& ctx) -> task<int> {
    std::vector<wait_on> waits{ctx.on_message("a"), ctx.on_promise("b")};
    auto first = co_await ctx.select_within(30s, std::move(waits));
    co_return first.index();
  });
  rt.start();
  auto h = rt.start_workflow<int>("race", {.id = "y"});
  ASSERT_TRUE(eventually([&] { return entries("y", persistence::entry_kind::deadline) == 1; }));
  clock_->advance(31s);
  EXPECT_EQ(h.get(10s), -1);
}

// -- events -----------------------------------------------------------------------------

TEST_F(waits_test, events_are_published_durably_and_read_with_a_timeout) {
  runtime rt{cfg()};
  std::atomic<bool> gate{false};
  rt.register_workflow("progress", [&](workflow_context& ctx) -> task<int> {
    co_await ctx.set_event("stage", std::string{"charging"});
    co_await ctx.step("hold", [&] {
      while (!gate.load())
        std::this_thread::sleep_for(1ms);
    });
    co_await ctx.set_event("stage", std::string{"shipped"});
    co_return 1;
  });
  rt.start();
  EXPECT_FALSE(rt.get_event<std::string>("p", "stage").has_value());
  auto h = rt.start_workflow<int>("progress", {.id = "p"});
  EXPECT_EQ(rt.get_event<std::string>("p", "stage", 10s), "charging");
  EXPECT_FALSE(rt.get_event<std::string>("p", "other", 50ms).has_value());
  gate = true;
  EXPECT_EQ(h.get(10s), 1);
  EXPECT_EQ(rt.get_event<std::string>("p", "stage"), "shipped");
  EXPECT_EQ(entries("p", persistence::entry_kind::event), 2);
}

// -- child workflows ---------------------------------------------------------------------

namespace {

struct family {
  std::atomic<int> child_runs{0};

  void define(runtime& rt) {
    rt.register_workflow("child", [this](workflow_context& ctx, int x) -> task<int> {
      co_return co_await ctx.step("work", [this, x] {
        ++child_runs;
        return x * 2;
      });
    });
    rt.register_workflow("parent", [](workflow_context& ctx, int x) -> task<int> {
      auto c = co_await ctx.start_child<int>("child", x);
      auto doubled = co_await c;
      co_return doubled + 1;
    });
    rt.register_workflow("bad-parent", [](workflow_context& ctx) -> task<std::string> {
      try {
        co_await ctx.start_child<int>("no-such-workflow", 1);
        co_return std::string{"started"};
      } catch (const terminal_error& ex) {
        co_return std::string{ex.what()};
      }
    });
  }
};

} // namespace

TEST_F(waits_test, a_child_runs_once_and_its_parent_gets_its_output) {
  family f;
  runtime rt{cfg()};
  f.define(rt);
  rt.start();
  EXPECT_EQ(rt.start_workflow<int>("parent", 20, {.id = "p"}).get(10s), 41);
  EXPECT_EQ(f.child_runs.load(), 1);
  auto child = store_->get_run("p.0");
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(child->parent_id, std::optional<std::string>{"p"});
  EXPECT_EQ(child->status, run_status::success);
  EXPECT_NE(rt.start_workflow<std::string>("bad-parent", {.id = "b"}).get(10s).find(
              "no workflow registered"),
            std::string::npos);
}

TEST_F(waits_test, a_failed_child_surfaces_in_the_parent) {
  runtime rt{cfg()};
  rt.register_workflow("child", [](workflow_context& ctx) -> task<int> {
    co_await ctx.step("boom", [] { throw terminal_error("out of stock"); });
    co_return 0;
  });
  rt.register_workflow("parent", [](workflow_context& ctx) -> task<std::string> {
    auto c = co_await ctx.start_child<int>("child", 0);
    try {
      co_await c;
      co_return std::string{"ok"};
    } catch (const terminal_error& ex) {
      co_return std::string{ex.what()};
    }
  });
  rt.start();
  auto out = rt.start_workflow<std::string>("parent", {.id = "p"}).get(10s);
  EXPECT_NE(out.find("out of stock"), std::string::npos) << out;
  EXPECT_NE(out.find("ERROR"), std::string::npos) << out;
}

TEST_F(waits_test, cancelling_a_parent_cancels_its_waiting_children) {
  runtime rt{cfg()};
  rt.register_workflow("child", [](workflow_context& ctx) -> task<int> {
    co_await ctx.sleep(1h);
    co_return 1;
  });
  rt.register_workflow("parent", [](workflow_context& ctx) -> task<int> {
    auto c = co_await ctx.start_child<int>("child", 0);
    co_return co_await c;
  });
  rt.start();
  auto h = rt.start_workflow<int>("parent", {.id = "p"});
  ASSERT_TRUE(eventually([&] { return entries("p.0", persistence::entry_kind::sleep) == 1; }));
  h.cancel();
  EXPECT_THROW(h.get(5s), error);
  EXPECT_EQ(rt.retrieve_workflow<int>("p.0").status(), run_status::cancelled);
}

TEST_F(waits_test, a_passivated_parent_is_woken_by_its_childs_end) {
  runtime rt{[&] {
    auto c = cfg();
    c.passivate_after = 50ms;
    return c;
  }()};
  rt.register_workflow("child", [&](workflow_context& ctx) -> task<int> {
    co_await ctx.promise<int>("go");
    co_return 5;
  });
  rt.register_workflow("parent", [](workflow_context& ctx) -> task<int> {
    auto c = co_await ctx.start_child<int>("child", 0);
    co_return co_await c + 1;
  });
  rt.start();
  auto h = rt.start_workflow<int>("parent", {.id = "p"});
  ASSERT_TRUE(eventually([&] {
    clock_->advance(1s);
    return passivated("p");
  }));
  rt.resolve_promise("p.0", "go", 1);
  EXPECT_EQ(h.get(10s), 6);
}

// Both out of memory: the child's cancellation must still reach the parent.
TEST_F(waits_test, cancelling_a_passivated_child_wakes_its_passivated_parent) {
  auto c = cfg();
  c.passivate_after = 50ms;
  runtime rt{c};
  define_parent_of_a_waiting_child(rt);
  rt.start();
  auto h = rt.start_workflow<std::string>("parent", {.id = "p"});
  ASSERT_TRUE(eventually([&] {
    clock_->advance(1s);
    return passivated("p") && passivated("p.0");
  }));
  rt.cancel("p.0");
  auto out = h.get(10s);
  EXPECT_NE(out.find("CANCELLED"), std::string::npos) << out;
}

// Recovery itself may end a child (recovered too often): its passivated
// parent still hears of it.
TEST_F(waits_test, a_child_ended_by_recovery_wakes_its_passivated_parent) {
  auto c = cfg();
  c.passivate_after = 50ms;
  auto& define = define_parent_of_a_waiting_child;
  {
    runtime rt{c};
    define(rt);
    rt.start();
    rt.start_workflow<std::string>("parent", {.id = "p"});
    ASSERT_TRUE(eventually([&] {
      clock_->advance(1s);
      return passivated("p") && passivated("p.0");
    }));
  }
  // As if the child had been in memory at each of many crashes.
  test::sql_client sql{db_};
  sql.exec("UPDATE " + sql.table("runs")
           + " SET recovery_attempts = 1000, wake_at = NULL WHERE id = 'p.0'");
  runtime rt{c};
  define(rt);
  rt.start();
  auto out = rt.retrieve_workflow<std::string>("p").get(10s);
  EXPECT_NE(out.find("RETRIES_EXCEEDED"), std::string::npos) << out;
}

// A parent brought back by its child's end is in memory again: a restart
// must recover it, not take it for still passivated.
TEST_F(waits_test, a_parent_woken_by_its_childs_end_is_recovered_after_a_restart) {
  auto c = cfg();
  c.passivate_after = 50ms;
  auto define = [](runtime& rt) {
    rt.register_workflow("child", [](workflow_context& ctx) -> task<int> {
      co_await ctx.promise<int>("go");
      co_return 5;
    });
    rt.register_workflow("parent", [](workflow_context& ctx) -> task<int> {
      auto child = co_await ctx.start_child<int>("child", 0);
      auto v = co_await child;
      auto extra = co_await ctx.recv<int>("t", 1h); // waits in memory
      co_return v + extra.value_or(100);
    });
  };
  {
    runtime rt{c};
    define(rt);
    rt.start();
    rt.start_workflow<int>("parent", {.id = "p"});
    ASSERT_TRUE(eventually([&] {
      clock_->advance(1s);
      return passivated("p");
    }));
    rt.resolve_promise("p.0", "go", 1);
    ASSERT_TRUE(eventually([&] { return entries("p", persistence::entry_kind::deadline) == 1; }))
      << "the parent did not come back for its child's end";
  }
  runtime rt{c};
  define(rt);
  rt.start();
  clock_->advance(2h); // only a parent in memory has a timer for its recv
  EXPECT_EQ(rt.retrieve_workflow<int>("p").get(10s), 105);
}

// The parent's process is SIGKILLed right after the child's start was
// checkpointed, again and again: the child still runs exactly once.
TEST_F(waits_test, a_child_is_started_exactly_once_under_crashes) {
  test::sql_client sql{db_};
  auto define = [](runtime& rt) {
    rt.register_workflow("child", [](workflow_context& ctx) -> task<int> {
      co_await ctx.sleep(2s);
      co_return 1;
    });
    rt.register_workflow("parent", [](workflow_context& ctx) -> task<int> {
      auto c = co_await ctx.start_child<int>("child", 0);
      co_return co_await c;
    });
  };
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto pid = fork_runtime(define, "parent", "p");
    ASSERT_GE(pid, 0);
    eventually([&] { return entries("p", persistence::entry_kind::child) == 1; });
    std::this_thread::sleep_for(std::chrono::milliseconds{30 * attempt});
    kill_process(pid);
  }
  runtime rt{db_.runtime_config()};
  define(rt);
  rt.start();
  EXPECT_EQ(rt.retrieve_workflow<int>("p").get(15s), 1);
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                         + " WHERE parent_id = $1",
                       {std::string{"p"}}),
            "1");
  EXPECT_EQ(entries("p", persistence::entry_kind::child), 1);
  EXPECT_EQ(entries("p.0", persistence::entry_kind::sleep), 1)
    << "the child's sleep was recorded more than once";
}

// -- across processes (PostgreSQL: LISTEN/NOTIFY) ------------------------------------

TEST_F(waits_test, deliveries_from_another_process_reach_a_waiting_run_promptly) {
  if (test::store_under_test() != "postgres")
    GTEST_SKIP() << "LISTEN/NOTIFY is PostgreSQL's: SQLite serves one process, "
                    "whose deliveries are in-process calls";
  runtime owner{cfg("owner")};
  std::atomic<bool> published{false};
  std::string id;
  owner.register_workflow("wait", [&](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.awakeable<int>();
    co_await ctx.step("publish", [&] {
      id = a.id();
      published = true;
    });
    auto v = co_await a;
    auto m = co_await ctx.recv<int>("more");
    co_return v + m;
  });
  owner.register_workflow("nap", [](workflow_context& ctx) -> task<int> {
    co_await ctx.sleep(1h);
    co_return 0;
  });
  owner.start();
  auto h = owner.start_workflow<int>("wait", {.id = "x"});
  auto sleeper = owner.start_workflow<int>("nap", {.id = "z"});
  ASSERT_TRUE(eventually([&] { return published.load(); }));
  runtime other{cfg("other")}; // another process, for what it is concerned
  other.start();
  auto t0 = std::chrono::steady_clock::now();
  other.resolve_awakeable(id, 40);
  other.send("x", "more", 2);
  EXPECT_EQ(h.get(5s), 42);
  // Well under the 10 s passivation threshold and the 5 s polling fallback.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  t0 = std::chrono::steady_clock::now();
  other.cancel("z");
  EXPECT_THROW(sleeper.get(5s), error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

// A delivery stored without its notice (its sender crashed between the commit
// and the NOTIFY) still reaches a passivated run: the owner looks at the
// store every few seconds, however many other notices keep arriving.
TEST_F(waits_test, a_delivery_whose_notice_was_lost_is_found_by_polling) {
  if (test::store_under_test() != "postgres")
    GTEST_SKIP() << "no notices on SQLite (one process, in-process wake-ups); "
                    "a delivery whose wake-up a crash lost is recovered at "
                    "start, as a_process_killed_while_awaiting_... tests";
  auto c = cfg("owner");
  c.passivate_after = 50ms;
  runtime owner{c};
  owner.register_workflow("wait", [](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.awakeable<int>();
    co_return co_await a + 1;
  });
  owner.start();
  auto h = owner.start_workflow<int>("wait", {.id = "x"});
  ASSERT_TRUE(eventually([&] {
    clock_->advance(1s);
    return passivated("x");
  })) << "the waiting run was not passivated";
  // A busy channel: notices for other runs every 100 ms.
  std::atomic<bool> quiet{false};
  std::thread noise{[&] {
    auto db = persistence::open_store(db_.store_options());
    while (!quiet) {
      db->notify("w:someone-else");
      std::this_thread::sleep_for(100ms);
    }
  }};
  persistence::resolution r;
  r.id = "awk_0_x";
  r.run_id = "x";
  r.seq = 0;
  r.payload = persistence::encode(41, persistence::encoding::json);
  r.at_ms = clock_->now_ms();
  EXPECT_EQ(store_->resolve(r), persistence::resolve_result::resolved);
  int got = 0;
  EXPECT_NO_THROW(got = h.get(12s)) << "the delivery was never noticed";
  quiet = true;
  noise.join();
  EXPECT_EQ(got, 42);
}

// -- deliveries from workflows ---------------------------------------------------

// Each send commits with its checkpoint: replay after a restart sends
// nothing again, so the receiver sees every message exactly once.
TEST_F(waits_test, a_workflow_sends_each_message_exactly_once_across_a_restart) {
  auto define = [](runtime& rt) {
    rt.register_workflow("receiver", [](workflow_context& ctx) -> task<int> {
      int sum = 0;
      for (int i = 0; i < 3; ++i)
        sum += co_await ctx.recv<int>("n");
      co_return sum;
    });
    rt.register_workflow("sender", [](workflow_context& ctx) -> task<int> {
      co_await ctx.send("r", "n", 1);
      co_await ctx.send("r", "n", 2);
      co_await ctx.promise<int>("go");
      co_await ctx.send("r", "n", 4);
      co_return 0;
    });
  };
  {
    runtime rt{cfg()};
    define(rt);
    rt.start();
    rt.start_workflow<int>("receiver", {.id = "r"});
    rt.start_workflow<int>("sender", {.id = "s"});
    ASSERT_TRUE(eventually([&] { return entries("s", persistence::entry_kind::send) == 2; }));
  }
  runtime rt{cfg()};
  define(rt);
  rt.start();
  rt.resolve_promise("s", "go", 1);
  EXPECT_EQ(rt.retrieve_workflow<int>("r").get(10s), 7) << "a message was sent twice";
  EXPECT_EQ(rt.retrieve_workflow<int>("s").get(10s), 0);
  test::sql_client sql{db_};
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("messages")
                         + " WHERE run_id = $1",
                       {std::string{"r"}}),
            "3");
}

TEST_F(waits_test, a_workflow_completes_another_runs_promise_and_awakeable) {
  runtime rt{cfg()};
  std::atomic<bool> published{false};
  std::string awk;
  rt.register_workflow("approver", [&](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.awakeable<int>();
    co_await ctx.step("publish", [&] {
      awk = a.id();
      published = true;
    });
    auto approved = co_await ctx.promise<int>("approved");
    co_return approved + co_await a;
  });
  rt.register_workflow("helper", [&](workflow_context& ctx) -> task<int> {
    co_await ctx.resolve_promise("a", "approved", 40);
    auto id = co_await ctx.step("read", [&] { return awk; });
    co_await ctx.resolve_awakeable(id, 2);
    co_return 0;
  });
  rt.start();
  auto h = rt.start_workflow<int>("approver", {.id = "a"});
  ASSERT_TRUE(eventually([&] { return published.load(); }));
  EXPECT_EQ(rt.start_workflow<int>("helper", {.id = "b"}).get(10s), 0);
  EXPECT_EQ(h.get(10s), 42);
}

TEST_F(waits_test, deliveries_that_cannot_happen_are_recorded_terminal_errors) {
  runtime rt{cfg()};
  rt.register_workflow("waiter", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.promise<int>("p");
  });
  std::atomic<int> attempts{0};
  rt.register_workflow("w", [&](workflow_context& ctx) -> task<std::string> {
    std::string out;
    auto note = [&](const char* what, const terminal_error& ex) {
      out += std::string{what} + ": " + ex.what() + "\n";
    };
    ++attempts;
    try {
      co_await ctx.send("nobody", "t", 1);
    } catch (const terminal_error& ex) {
      note("send", ex);
    }
    try {
      co_await ctx.resolve_awakeable("awk_0_nobody", 1);
    } catch (const terminal_error& ex) {
      note("awakeable", ex);
    }
    try {
      co_await ctx.reject_awakeable("not an id", "no");
    } catch (const terminal_error& ex) {
      note("malformed", ex);
    }
    co_await ctx.resolve_promise("waiter", "p", 1);
    try {
      co_await ctx.reject_promise("waiter", "p", "too late");
    } catch (const terminal_error& ex) {
      note("again", ex);
    }
    co_return out;
  });
  rt.start();
  auto waiter = rt.start_workflow<int>("waiter", {.id = "waiter"});
  auto out = rt.start_workflow<std::string>("w", {.id = "w"}).get(10s);
  EXPECT_EQ(out,
            "send: no workflow run 'nobody'\n"
            "awakeable: no awakeable with id 'awk_0_nobody'\n"
            "malformed: no awakeable with id 'not an id'\n"
            "again: workflow run 'waiter' (promise 'p') was already resolved "
            "or rejected\n");
  EXPECT_EQ(waiter.get(10s), 1) << "the first completion stays";
  // Recorded: the failed deliveries are journal entries with their errors.
  int failed = 0;
  for (auto& e : store_->load_journals({"w"}))
    if (e.outcome == persistence::outcome::terminal)
      ++failed;
  EXPECT_EQ(failed, 3);
}

// Two runs sending to each other at once lock both run rows: in a fixed
// order, or the database finds deadlocks (and a second passes each time).
TEST_F(waits_test, two_runs_sending_to_each_other_at_once_do_not_deadlock) {
  runtime rt{cfg()};
  constexpr int n = 40;
  rt.register_workflow("talker", [](workflow_context& ctx,
                                     std::string peer) -> task<int> {
    co_await ctx.promise<int>("go"); // both exist before either sends
    for (int i = 0; i < n; ++i)
      co_await ctx.send(peer, "m", i);
    int sum = 0;
    for (int i = 0; i < n; ++i)
      sum += co_await ctx.recv<int>("m");
    co_return sum;
  });
  rt.start();
  test::sql_client sql{db_};
  auto deadlocks = [&] {
    if (test::store_under_test() != "postgres")
      return std::string{"0"};
    return sql.scalar("SELECT deadlocks FROM pg_stat_database WHERE datname "
                      "= current_database()");
  };
  auto before = deadlocks();
  auto a = rt.start_workflow<int>("talker", std::string{"b"}, {.id = "a"});
  auto b = rt.start_workflow<int>("talker", std::string{"a"}, {.id = "b"});
  rt.resolve_promise("a", "go", 1);
  rt.resolve_promise("b", "go", 1);
  EXPECT_EQ(a.get(30s), n * (n - 1) / 2);
  EXPECT_EQ(b.get(30s), n * (n - 1) / 2);
  if (test::store_under_test() == "postgres")
    std::this_thread::sleep_for(1500ms); // statistics are flushed within 1 s
  EXPECT_EQ(deadlocks(), before);
}
