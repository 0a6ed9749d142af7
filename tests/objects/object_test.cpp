// Virtual objects as users write them, on the store under test: keyed state
// with exclusive handlers, a durable inbox, exactly-once state.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

struct counter {
  std::int64_t total = 0;
  std::vector<std::int64_t> seen;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(total), CEREAL_NVP(seen));
  }
};

class object_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// A runtime with type "counter": add (exclusive), add_logged (keeps
  /// the order of its inputs), fail_after_add (changes state, then
  /// fails), read (shared), add_in_step (its effect counted in a step).
  std::unique_ptr<runtime> make(config cfg) {
    auto rt = std::make_unique<runtime>(std::move(cfg));
    rt->register_object<counter>("counter")
      .handler("add",
               [](object_context<counter>& ctx, std::int64_t n)
                 -> task<std::int64_t> {
                 ctx.state().total += n;
                 co_return ctx.state().total;
               })
      .handler("add_logged",
               [](object_context<counter>& ctx, std::int64_t n) -> task<void> {
                 ctx.state().seen.push_back(n);
                 co_return;
               })
      .handler("fail_after_add",
               [](object_context<counter>& ctx, std::int64_t n)
                 -> task<std::int64_t> {
                 ctx.state().total += n;
                 throw terminal_error("refused");
                 co_return 0;
               })
      .handler("read",
               [](shared_object_context<counter>& ctx) -> task<std::int64_t> {
                 co_return ctx.state().total;
               })
      .handler("add_in_step",
               [this](object_context<counter>& ctx, std::int64_t n)
                 -> task<std::int64_t> {
                 auto got = co_await ctx.step("count", [&] {
                   ++steps_run_;
                   return n;
                 });
                 ctx.state().total += got;
                 co_return ctx.state().total;
               })
      .handler("call_add",
               [](object_context<counter>& ctx,
                  std::pair<std::string, std::int64_t> to)
                 -> task<std::int64_t> {
                 auto reply = co_await ctx.call<std::int64_t>(
                   "counter", to.first, "add", to.second);
                 ctx.state().total += 1000;
                 co_return reply;
               })
      .handler("call_back",
               [](object_context<counter>& ctx, std::string other)
                 -> task<std::int64_t> {
                 // other calls add on this key, which waits for this call.
                 co_return co_await ctx.call<std::int64_t>(
                   "counter", other, "call_add",
                   std::pair<std::string, std::int64_t>{ctx.key(), 1});
               })
      .handler("slow_read",
               [this](shared_object_context<counter>& ctx)
                 -> task<std::int64_t> {
                 co_await ctx.step("hold", [&] {
                   auto now = ++reading_;
                   auto seen = most_reading_.load();
                   while (now > seen
                          && !most_reading_.compare_exchange_weak(seen, now)) {
                   }
                   std::this_thread::sleep_for(100ms);
                   --reading_;
                   return 0;
                 });
                 co_return ctx.state().total;
               })
      .handler("slow_add",
               [](object_context<counter>& ctx, std::int64_t n)
                 -> task<std::int64_t> {
                 co_await ctx.step("wait", [] {
                   std::this_thread::sleep_for(300ms);
                   return 0;
                 });
                 ctx.state().total += n;
                 co_return ctx.state().total;
               })
      .handler("send_back",
               [](object_context<counter>& ctx, std::string other)
                 -> task<std::int64_t> {
                 // A send holds nothing: other may call this key back.
                 co_await ctx.send<std::int64_t>(
                   "counter", other, "call_add",
                   std::pair<std::string, std::int64_t>{ctx.key(), 1});
                 co_return 0;
               })
      .handler("via_child",
               [](object_context<counter>& ctx) -> task<std::int64_t> {
                 auto child = co_await ctx.start_child<std::int64_t>(
                   "add_to", ctx.key());
                 co_return co_await child;
               })
      .handler("doubled_by_child",
               [](object_context<counter>& ctx) -> task<std::int64_t> {
                 auto child = co_await ctx.start_child<std::int64_t>(
                   "double", ctx.state().total);
                 ctx.state().total = co_await child;
                 co_return ctx.state().total;
               });
    rt->register_workflow("double",
                          [](workflow_context&, std::int64_t n)
                            -> task<std::int64_t> { co_return 2 * n; });
    rt->register_workflow("add_to",
                          [](workflow_context& ctx, std::string key)
                            -> task<std::int64_t> {
                            co_return co_await ctx.call<std::int64_t>(
                              "counter", key, "add", std::int64_t{1});
                          });
    rt->register_workflow(
      "transfer",
      [](workflow_context& ctx, std::pair<std::string, std::string> between)
        -> task<std::int64_t> {
        co_await ctx.call<std::int64_t>("counter", between.first, "add",
                                        std::int64_t{-30});
        co_return co_await ctx.call<std::int64_t>("counter", between.second,
                                                  "add", std::int64_t{30});
      });
    return rt;
  }

  std::unique_ptr<runtime> make() {
    return make(db_.runtime_config());
  }

  test::database db_;
  std::atomic<int> steps_run_{0};
  std::atomic<int> reading_{0};
  std::atomic<int> most_reading_{0};
};

TEST_F(object_test, concurrent_callers_over_many_keys_leave_exact_totals) {
  auto rt = make();
  rt->start();
  constexpr int callers = 64;
  constexpr int keys = 1000;
  constexpr int calls_each = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int c = 0; c < callers; ++c)
    threads.emplace_back([&, c] {
      for (int i = 0; i < calls_each; ++i) {
        auto key = "k" + std::to_string((c * calls_each + i) % keys);
        try {
          rt->call<std::int64_t>("counter", key, "add", std::int64_t{1});
        } catch (const std::exception& ex) {
          ++failures;
          ADD_FAILURE() << ex.what();
        }
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(failures, 0);
  std::map<std::string, std::int64_t> expected;
  for (int n = 0; n < callers * calls_each; ++n)
    ++expected["k" + std::to_string(n % keys)];
  std::int64_t sum = 0;
  for (auto& [key, count] : expected) {
    auto state = rt->object_state<counter>("counter", key);
    ASSERT_TRUE(state) << key;
    EXPECT_EQ(state->total, count) << key;
    sum += state->total;
  }
  EXPECT_EQ(sum, callers * calls_each);
}

TEST_F(object_test, one_hot_key_keeps_an_exact_total_and_every_reply_matches) {
  auto rt = make();
  rt->start();
  constexpr int callers = 16;
  constexpr int calls_each = 50;
  std::mutex mtx;
  std::vector<std::int64_t> replies;
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c)
    threads.emplace_back([&] {
      for (int i = 0; i < calls_each; ++i) {
        auto r = rt->call<std::int64_t>("counter", "hot", "add",
                                        std::int64_t{1});
        std::lock_guard guard{mtx};
        replies.push_back(r);
      }
    });
  for (auto& t : threads)
    t.join();
  // Each reply is the total right after its own invocation: one at a time,
  // every total from 1 to N once.
  std::sort(replies.begin(), replies.end());
  for (std::size_t i = 0; i < replies.size(); ++i)
    ASSERT_EQ(replies[i], static_cast<std::int64_t>(i + 1));
  EXPECT_EQ(rt->object_state<counter>("counter", "hot")->total,
            callers * calls_each);
}

TEST_F(object_test, invocations_of_one_key_run_in_the_order_they_were_stored) {
  auto rt = make();
  rt->start();
  std::vector<workflow_handle<void>> sent;
  for (std::int64_t n = 0; n < 200; ++n)
    sent.push_back(rt->send<void>("counter", "fifo", "add_logged", n));
  for (auto& h : sent)
    h.get(20s);
  auto state = rt->object_state<counter>("counter", "fifo");
  ASSERT_TRUE(state);
  ASSERT_EQ(state->seen.size(), 200u);
  for (std::int64_t n = 0; n < 200; ++n)
    EXPECT_EQ(state->seen[n], n);
}

TEST_F(object_test, a_failing_handler_changes_no_state) {
  auto rt = make();
  rt->start();
  EXPECT_EQ(rt->call<std::int64_t>("counter", "a", "add", std::int64_t{5}), 5);
  try {
    rt->call<std::int64_t>("counter", "a", "fail_after_add", std::int64_t{100});
    FAIL() << "the handler failed";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed);
    EXPECT_NE(std::string{ex.what()}.find("refused"), std::string::npos);
  }
  EXPECT_EQ(rt->call<std::int64_t>("counter", "a", "add", std::int64_t{1}), 6);
  EXPECT_EQ(rt->object_state<counter>("counter", "a")->total, 6);
}

TEST_F(object_test, an_idempotency_key_runs_once_and_returns_the_first_result) {
  auto rt = make();
  rt->start();
  auto first = rt->call<std::int64_t>("counter", "i", "add", std::int64_t{7},
                                      {.idempotency_key = "pay-1"});
  rt->call<std::int64_t>("counter", "i", "add", std::int64_t{1});
  auto again = rt->call<std::int64_t>("counter", "i", "add", std::int64_t{7},
                                      {.idempotency_key = "pay-1"});
  EXPECT_EQ(first, 7);
  EXPECT_EQ(again, 7); // the recorded reply, not a second run
  EXPECT_EQ(rt->object_state<counter>("counter", "i")->total, 8);
  // The same key for another call is refused, changing nothing.
  try {
    rt->call<std::int64_t>("counter", "i", "add", std::int64_t{9},
                           {.idempotency_key = "pay-1"});
    FAIL() << "another input under a used idempotency key";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::conflicting_id);
  }
  // Per object: the same key on another object is another call.
  EXPECT_EQ(rt->call<std::int64_t>("counter", "j", "add", std::int64_t{7},
                                   {.idempotency_key = "pay-1"}),
            7);
}

TEST_F(object_test, shared_handlers_read_the_committed_state) {
  auto rt = make();
  rt->start();
  rt->call<std::int64_t>("counter", "s", "add", std::int64_t{3});
  EXPECT_EQ(rt->call<std::int64_t>("counter", "s", "read"), 3);
  EXPECT_EQ(rt->call<std::int64_t>("counter", "never-called", "read"), 0);
}

TEST_F(object_test, state_and_inbox_survive_leaving_memory_and_restarts) {
  auto cfg = db_.runtime_config();
  cfg.object_idle_timeout = 20ms;
  {
    auto rt = make(cfg);
    rt->start();
    rt->call<std::int64_t>("counter", "p", "add", std::int64_t{2});
    std::this_thread::sleep_for(100ms); // idle: it left memory
    EXPECT_EQ(rt->call<std::int64_t>("counter", "p", "add", std::int64_t{3}),
              5);
  }
  auto rt = make(cfg);
  rt->start();
  EXPECT_EQ(rt->call<std::int64_t>("counter", "p", "add", std::int64_t{4}), 9);
}

TEST_F(object_test, handlers_run_steps_once_each) {
  auto rt = make();
  rt->start();
  EXPECT_EQ(rt->call<std::int64_t>("counter", "st", "add_in_step",
                                   std::int64_t{4}),
            4);
  EXPECT_EQ(rt->call<std::int64_t>("counter", "st", "add_in_step",
                                   std::int64_t{6}),
            10);
  EXPECT_EQ(steps_run_, 2);
}

TEST_F(object_test, unknown_types_handlers_and_bad_names_are_clear_errors) {
  auto rt = make();
  rt->start();
  auto code = [&](auto&& f) {
    try {
      f();
    } catch (const error& ex) {
      return ex.code();
    }
    return errc{};
  };
  EXPECT_EQ(code([&] { rt->call<std::int64_t>("nope", "k", "add", 1L); }),
            errc::unknown_workflow);
  EXPECT_EQ(code([&] { rt->call<std::int64_t>("counter", "k", "nope", 1L); }),
            errc::unknown_workflow);
  EXPECT_EQ(code([&] {
              rt->call<std::int64_t>("counter", "", "add", std::int64_t{1});
            }),
            errc::invalid_argument);
  // Keys are data, never SQL.
  auto evil = "k'); DROP TABLE runs; --";
  EXPECT_EQ(rt->call<std::int64_t>("counter", evil, "add", std::int64_t{1}), 1);
  EXPECT_EQ(rt->object_state<counter>("counter", evil)->total, 1);
  auto keys = rt->list_objects("counter");
  EXPECT_NE(std::find(keys.begin(), keys.end(), evil), keys.end());
}

TEST_F(object_test, a_client_process_call_reaches_the_runtime_holding_the_key) {
  auto rt = make();
  rt->start();
  rt->call<std::int64_t>("counter", "c", "add", std::int64_t{1}); // held here
  client helper{db_.runtime_config("helper")};
  EXPECT_EQ(helper.call<std::int64_t>("counter", "c", "add", std::int64_t{10}),
            11);
  // A key nobody holds yet is claimed by the runtime that can run it.
  EXPECT_EQ(helper.call<std::int64_t>("counter", "fresh", "add",
                                      std::int64_t{2}),
            2);
  EXPECT_EQ(helper.object_state<counter>("counter", "c")->total, 11);
}

TEST_F(object_test, workflows_and_objects_call_objects_durably) {
  auto rt = make();
  rt->start();
  rt->call<std::int64_t>("counter", "from", "add", std::int64_t{100});
  auto to = rt->start_workflow<std::int64_t>(
                "transfer", std::pair<std::string, std::string>{"from", "to"})
              .get(20s);
  EXPECT_EQ(to, 30);
  EXPECT_EQ(rt->object_state<counter>("counter", "from")->total, 70);
  // An object calling another: the reply comes back, both states commit.
  EXPECT_EQ(rt->call<std::int64_t>("counter", "x", "call_add",
                                   std::pair<std::string, std::int64_t>{"to",
                                                                        5}),
            35);
  EXPECT_EQ(rt->object_state<counter>("counter", "x")->total, 1000);
  // An object starting a workflow and waiting for it.
  rt->call<std::int64_t>("counter", "d", "add", std::int64_t{21});
  EXPECT_EQ(rt->call<std::int64_t>("counter", "d", "doubled_by_child"), 42);
}

TEST_F(object_test, call_cycles_fail_at_once_naming_the_cycle) {
  auto rt = make();
  rt->start();
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const error& ex) {
      return std::string{ex.what()};
    }
    return std::string{"no error"};
  };
  // A calls A.
  auto self = message([&] {
    rt->call<std::int64_t>("counter", "a", "call_add",
                           std::pair<std::string, std::int64_t>{"a", 1});
  });
  EXPECT_NE(self.find("call cycle: counter/a -> counter/a"), std::string::npos)
    << self;
  // A calls B, which calls A.
  auto loop = message(
    [&] { rt->call<std::int64_t>("counter", "a", "call_back", std::string{"b"}); });
  EXPECT_NE(loop.find("call cycle: counter/a -> counter/b -> counter/a"),
            std::string::npos)
    << loop;
  // Neither changed anything, and both keys still serve calls.
  EXPECT_EQ(rt->call<std::int64_t>("counter", "a", "add", std::int64_t{1}), 1);
  EXPECT_EQ(rt->call<std::int64_t>("counter", "b", "add", std::int64_t{1}), 1);
}

// A shared handler's context cannot change the state: a compile error.
static_assert(std::is_const_v<std::remove_reference_t<
                decltype(std::declval<shared_object_context<counter>&>()
                           .state())>>,
              "a shared handler's state is read-only");
static_assert(!std::is_assignable_v<
                decltype((std::declval<shared_object_context<counter>&>()
                            .state()
                            .total)),
                std::int64_t>,
              "a shared handler cannot assign to its state");
static_assert(std::is_assignable_v<
                decltype((std::declval<object_context<counter>&>()
                            .state()
                            .total)),
                std::int64_t>,
              "an exclusive handler can");

TEST_F(object_test, oversized_input_and_a_state_row_that_cannot_be_read) {
  auto cfg = db_.runtime_config();
  cfg.max_payload_bytes = 1024;
  cfg.object_idle_timeout = 20ms;
  auto rt = make(cfg);
  rt->start();
  try {
    rt->call<std::int64_t>("counter", "big", "call_add",
                           std::pair<std::string, std::int64_t>{
                             std::string(4096, 'x'), 1});
    FAIL() << "an oversized input was accepted";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::payload_too_large);
  }
  EXPECT_TRUE(rt->list_objects("counter").empty()); // nothing stored
  // A state row edited by hand into garbage (or written by code whose state
  // has another shape): its calls wait for code that reads it, never end
  // ERROR, and the row stays as it is (nothing overwrites it); other keys
  // are unaffected.
  rt->call<std::int64_t>("counter", "bad", "add", std::int64_t{1});
  rt->call<std::int64_t>("counter", "good", "add", std::int64_t{1});
  std::this_thread::sleep_for(200ms); // both left memory
  test::sql_client sql{db_};
  sql.exec("UPDATE " + sql.table("objects")
           + " SET state = $1 WHERE key = 'bad'",
           {std::string{"not json"}});
  auto waiting = rt->send<std::int64_t>("counter", "bad", "add",
                                        std::int64_t{1});
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(is_terminal(waiting.status()))
    << "a call on an unreadable state ended";
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("objects")
                       + " WHERE key = 'bad' AND state IS NOT NULL"),
            "1");
  EXPECT_EQ(rt->call<std::int64_t>("counter", "good", "add", std::int64_t{1}),
            2);
  waiting.cancel(); // it would wait for ever
  EXPECT_EQ(waiting.status(), run_status::cancelled);
}

TEST_F(object_test, shared_handlers_run_together_on_committed_state_only) {
  auto rt = make();
  rt->start();
  rt->call<std::int64_t>("counter", "r", "add", std::int64_t{1});
  // Four slow reads, an add, four more reads: the reads before the add see
  // 1 and overlap; the add waits for them; the reads after it see 2.
  std::vector<workflow_handle<std::int64_t>> before, after;
  for (int n = 0; n < 4; ++n)
    before.push_back(rt->send<std::int64_t>("counter", "r", "slow_read"));
  auto add = rt->send<std::int64_t>("counter", "r", "add", std::int64_t{1});
  for (int n = 0; n < 4; ++n)
    after.push_back(rt->send<std::int64_t>("counter", "r", "slow_read"));
  for (auto& h : before)
    EXPECT_EQ(h.get(20s), 1);
  EXPECT_EQ(add.get(20s), 2);
  for (auto& h : after)
    EXPECT_EQ(h.get(20s), 2);
  EXPECT_GE(most_reading_.load(), 2) << "shared handlers never overlapped";
}

TEST_F(object_test, a_delayed_send_arrives_once_after_its_delay) {
  auto rt = make();
  rt->start();
  auto t0 = std::chrono::steady_clock::now();
  auto h = rt->send_later("counter", "later", "add", std::int64_t{5}, 300ms,
                          {.idempotency_key = "l1"});
  // Scheduling again with its idempotency key schedules nothing more.
  rt->send_later("counter", "later", "add", std::int64_t{5}, 300ms,
                 {.idempotency_key = "l1"});
  EXPECT_FALSE(rt->object_state<counter>("counter", "later"));
  h.get(20s); // the call is in the inbox now
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
  EXPECT_TRUE(test::eventually([&] {
    auto s = rt->object_state<counter>("counter", "later");
    return s && s->total == 5;
  }));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(rt->object_state<counter>("counter", "later")->total, 5);
}

TEST_F(object_test, callbacks_wait_for_replies_without_holding_threads) {
  auto rt = make();
  rt->start();
  client helper{db_.runtime_config("helper")};
  std::mutex mtx;
  std::condition_variable all_in;
  std::vector<std::int64_t> replies;
  constexpr int sends = 50;
  auto on_reply = [&](const workflow_handle<std::int64_t>& h) {
    auto r = h.get(); // ended: returns at once
    std::lock_guard guard{mtx};
    replies.push_back(r);
    all_in.notify_all();
  };
  for (int n = 0; n < sends; ++n) {
    // Half from this runtime (told at once), half from a client process
    // (which reads the store for them).
    auto h = n % 2 == 0
               ? rt->send<std::int64_t>("counter", "cb", "add", std::int64_t{1})
               : helper.send<std::int64_t>("counter", "cb", "add",
                                           std::int64_t{1});
    h.when_done(on_reply);
  }
  std::unique_lock guard{mtx};
  ASSERT_TRUE(all_in.wait_for(guard, 20s, [&] {
    return replies.size() == sends;
  })) << replies.size() << " of " << sends << " callbacks ran";
  std::sort(replies.begin(), replies.end());
  for (int n = 0; n < sends; ++n)
    EXPECT_EQ(replies[n], n + 1);
}

/// Registers type "slow" on `rt`: its "add" adds once `release` is set.
void add_slow(runtime& rt, std::atomic<bool>& release) {
  rt.register_object<counter>("slow").handler(
    "add",
    [&](object_context<counter>& ctx, std::int64_t n) -> task<std::int64_t> {
      co_await ctx.step("wait", [&] {
        while (!release)
          std::this_thread::sleep_for(1ms);
        return 0;
      });
      ctx.state().total += n;
      co_return ctx.state().total;
    });
}

/// What `call_async` callbacks receive, collected for a test.
struct async_ends {
  std::mutex mtx;
  std::condition_variable arrived;
  std::map<std::string, std::vector<call_result<std::int64_t>>> by_tag;

  std::function<void(call_result<std::int64_t>)> into(std::string tag) {
    return [this, tag](call_result<std::int64_t> r) {
      std::lock_guard guard{mtx};
      by_tag[tag].push_back(std::move(r));
      arrived.notify_all();
    };
  }

  /// Returns the code of the error `r.get()` throws (`none`: it returned).
  static errc code_of(const call_result<std::int64_t>& r) {
    try {
      r.get();
      return errc::none;
    } catch (const error& ex) {
      return ex.code();
    }
  }

  /// Waits until `tag` has `n` ends; returns them.
  std::vector<call_result<std::int64_t>> wait(const std::string& tag,
                                              std::size_t n) {
    std::unique_lock guard{mtx};
    arrived.wait_for(guard, 30s, [&] { return by_tag[tag].size() >= n; });
    return by_tag[tag];
  }
};

TEST_F(object_test, call_async_ends_reach_callbacks_from_memory_and_store) {
  auto rt = make();
  rt->start();
  // A second runtime on the database (PostgreSQL: SQLite has one per file).
  std::unique_ptr<runtime> other;
  if (db_.postgres) {
    other = make(db_.runtime_config("other"));
    other->start();
  }
  async_ends ends;
  // From the runtime holding the keys: ends told from memory.
  constexpr int calls = 200;
  std::vector<std::string> ids;
  for (int n = 0; n < calls; ++n)
    ids.push_back(rt->call_async<std::int64_t>(
      "counter", "a" + std::to_string(n % 4), "add", std::int64_t{1},
      ends.into("here")));
  auto here = ends.wait("here", calls);
  ASSERT_EQ(here.size(), calls);
  std::map<std::string, std::vector<std::int64_t>> replies;
  for (auto& r : here) {
    ASSERT_TRUE(r.ok()) << r.id();
    auto n = std::find(ids.begin(), ids.end(), r.id()) - ids.begin();
    replies["a" + std::to_string(n % 4)].push_back(r.get());
  }
  for (auto& [key, got] : replies) {
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got.size(), calls / 4);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], static_cast<std::int64_t>(i + 1)) << key;
    EXPECT_EQ(rt->object_state<counter>("counter", key)->total, calls / 4);
  }
  // From a runtime whose keys are held by the first: ends read from the
  // store; and from a client process.
  client helper{db_.runtime_config("helper")};
  for (int n = 0; n < 10; ++n) {
    if (other)
      other->call_async<std::int64_t>("counter", "a0", "add", std::int64_t{1},
                                      ends.into("elsewhere"));
    helper.call_async<std::int64_t>("counter", "a1", "add", std::int64_t{1},
                                    ends.into("client"));
    // A blocking call from the other runtime waits on the store too.
    if (other && n == 0) {
      EXPECT_GT(other->call<std::int64_t>("counter", "a2", "add",
                                          std::int64_t{1}),
                calls / 4);
    }
  }
  for (const auto* tag : {"elsewhere", "client"}) {
    if (!other && std::string{tag} == "elsewhere")
      continue;
    auto got = ends.wait(tag, 10);
    ASSERT_EQ(got.size(), 10u) << tag;
    for (auto& r : got)
      EXPECT_TRUE(r.ok()) << tag;
  }
  EXPECT_EQ(rt->object_state<counter>("counter", "a0")->total,
            calls / 4 + (other ? 10 : 0));
  EXPECT_EQ(rt->object_state<counter>("counter", "a1")->total, calls / 4 + 10);
  if (other)
    other->stop();
}

TEST_F(object_test, call_async_calls_from_one_thread_run_in_the_order_made) {
  // Two writer connections (PostgreSQL; SQLite has one): a key's calls
  // are stored and run in the order one thread made them, though neither
  // waits for the last to be stored.
  auto cfg = db_.runtime_config();
  cfg.journal_connections = 2;
  auto rt = make(std::move(cfg));
  rt->start();
  async_ends ends;
  constexpr int keys = 8;
  constexpr int calls = 1600;
  std::map<std::string, int> place; // id -> its place among its key's calls
  std::vector<int> made(keys, 0);
  for (int n = 0; n < calls; ++n) {
    auto id = rt->call_async<std::int64_t>("counter",
                                           "o" + std::to_string(n % keys),
                                           "add", std::int64_t{1},
                                           ends.into("all"));
    place[id] = ++made[n % keys];
  }
  auto got = ends.wait("all", calls);
  ASSERT_EQ(got.size(), calls);
  int out_of_order = 0;
  for (auto& r : got) {
    ASSERT_TRUE(r.ok()) << r.id();
    if (r.get() != place.at(r.id()))
      ++out_of_order;
  }
  EXPECT_EQ(out_of_order, 0) << "calls that ran before one made earlier";
}

TEST_F(object_test, call_async_reports_failures_conflicts_and_repeats) {
  auto rt = make();
  rt->start();
  async_ends ends;
  rt->call_async<std::int64_t>("counter", "f", "fail_after_add",
                               std::int64_t{5}, ends.into("failed"));
  auto failed = ends.wait("failed", 1);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_FALSE(failed[0].ok());
  EXPECT_EQ(async_ends::code_of(failed[0]), errc::workflow_failed);
  // An idempotency key: the second call returns the first one's result;
  // another input under it conflicts.
  call_options once{"order-1", {}};
  auto first = rt->call_async<std::int64_t>(
    "counter", "i", "add", std::int64_t{3}, ends.into("first"), once);
  ASSERT_EQ(ends.wait("first", 1).at(0).get(), 3);
  auto again = rt->call_async<std::int64_t>(
    "counter", "i", "add", std::int64_t{3}, ends.into("again"), once);
  EXPECT_EQ(again, first);
  EXPECT_EQ(ends.wait("again", 1).at(0).get(), 3);
  rt->call_async<std::int64_t>("counter", "i", "add", std::int64_t{4},
                               ends.into("other input"), once);
  auto conflict = ends.wait("other input", 1);
  ASSERT_EQ(conflict.size(), 1u);
  EXPECT_EQ(async_ends::code_of(conflict[0]), errc::conflicting_id)
    << "another input under a used idempotency key";
  EXPECT_EQ(rt->object_state<counter>("counter", "i")->total, 3);
  // Refused before storing: thrown at once, no callback.
  EXPECT_THROW(rt->call_async<std::int64_t>("counter", "i", "no_such",
                                            std::int64_t{1},
                                            ends.into("never")),
               error);
}

TEST_F(object_test, call_async_callers_hear_not_running_when_stopped_first) {
  auto rt = make();
  std::atomic<bool> release{false};
  add_slow(*rt, release);
  rt->start();
  async_ends ends;
  auto id = rt->call_async<std::int64_t>("slow", "s", "add", std::int64_t{1},
                                         ends.into("stopped"));
  ASSERT_TRUE(test::eventually([&] {
    try {
      return rt->retrieve_workflow<std::int64_t>(id).status()
             == run_status::pending;
    } catch (const error&) {
      return false; // not stored yet
    }
  }));
  {
    // A client's call waits on the store (no actor there): its caller hears
    // `not_running` when the client stops first, too.
    client helper{db_.runtime_config("helper")};
    auto waiting = helper.call_async<std::int64_t>(
      "slow", "s2", "add", std::int64_t{1}, ends.into("client stopped"));
    ASSERT_TRUE(test::eventually([&] {
      return helper.retrieve_workflow<std::int64_t>(waiting).status()
             == run_status::pending;
    }));
  }
  auto from_client = ends.wait("client stopped", 1);
  ASSERT_EQ(from_client.size(), 1u);
  EXPECT_EQ(async_ends::code_of(from_client[0]), errc::not_running);
  std::thread releaser{[&] {
    std::this_thread::sleep_for(300ms);
    release = true; // stop() waits for the step
  }};
  rt->stop();
  releaser.join();
  auto got = ends.wait("stopped", 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(async_ends::code_of(got[0]), errc::not_running);
  EXPECT_THROW(rt->call_async<std::int64_t>("slow", "s", "add",
                                            std::int64_t{1},
                                            ends.into("after")),
               error);
}

// Repeats under an idempotency key while its first call is still in
// flight: the same input hears the first call's reply, another input
// conflicting_id, whichever of the first call's end and the repeat's
// refusal comes first.
TEST_F(object_test, call_async_repeats_in_flight_hear_the_first_end_or_conflict) {
  auto rt = make();
  std::atomic<bool> release{false};
  add_slow(*rt, release);
  rt->start();
  async_ends ends;
  for (int round = 0; round < 20; ++round) {
    release = false;
    auto key = "k" + std::to_string(round);
    call_options once{"order-" + std::to_string(round), {}};
    rt->call_async<std::int64_t>("slow", key, "add", std::int64_t{3},
                                 ends.into("first" + key), once);
    std::this_thread::sleep_for(10ms); // in its handler
    // The first call ends at a different moment of the repeats' writes
    // and checks each round.
    release = true;
    std::this_thread::sleep_for(std::chrono::microseconds{round * 100});
    rt->call_async<std::int64_t>("slow", key, "add", std::int64_t{4},
                                 ends.into("other" + key), once);
    rt->call_async<std::int64_t>("slow", key, "add", std::int64_t{3},
                                 ends.into("same" + key), once);
    for (const auto* tag : {"first", "same"}) {
      auto got = ends.wait(tag + key, 1);
      ASSERT_EQ(got.size(), 1u) << tag << key;
      EXPECT_EQ(got[0].get(), 3) << tag << key;
    }
    auto other = ends.wait("other" + key, 1);
    ASSERT_EQ(other.size(), 1u) << key;
    EXPECT_EQ(async_ends::code_of(other[0]), errc::conflicting_id)
      << key << ": another input under a used key got a reply";
    EXPECT_EQ(rt->object_state<counter>("slow", key)->total, 3) << key;
  }
}

// A callback that stops the runtime while other ends are known or due:
// every other caller still hears its end, once (a reply, or not_running).
TEST_F(object_test, a_call_async_callback_that_stops_the_runtime_leaves_no_caller_waiting) {
  auto rt = make();
  rt->start();
  constexpr int calls = 300;
  std::mutex mtx;
  std::condition_variable arrived;
  std::map<std::string, int> heard;
  int ended = 0;
  std::vector<std::string> ids;
  for (int n = 0; n < calls; ++n)
    ids.push_back(rt->call_async<std::int64_t>(
      "counter", "s" + std::to_string(n % 8), "add", std::int64_t{1},
      [&](call_result<std::int64_t> r) {
        bool stop = false;
        {
          std::lock_guard guard{mtx};
          ++heard[r.id()];
          stop = ++ended == calls / 3;
        }
        if (stop)
          rt->stop(); // from the callbacks' own thread
        std::lock_guard guard{mtx};
        arrived.notify_all();
      }));
  std::unique_lock guard{mtx};
  ASSERT_TRUE(arrived.wait_for(guard, 30s, [&] { return ended >= calls; }))
    << ended << " of " << calls << " callers heard an end";
  guard.unlock();
  std::this_thread::sleep_for(200ms); // a second end would come by now
  guard.lock();
  EXPECT_EQ(ended, calls);
  for (auto& id : ids)
    EXPECT_EQ(heard[id], 1) << id;
}

TEST_F(object_test, a_second_stop_returns_once_the_runtime_is_stopped) {
  // A callback stops the runtime while a slow call holds the stop; the
  // application stops it too (its destructor does): that stop must not
  // return while the first one still tears the runtime down.
  auto rt = make();
  std::atomic<bool> release{false};
  add_slow(*rt, release);
  rt->start();
  auto slow = rt->send<std::int64_t>("slow", "s", "add", std::int64_t{1});
  std::atomic<bool> callback_stopping{false};
  std::atomic<bool> callback_stopped{false};
  rt->call_async<std::int64_t>("counter", "c", "add", std::int64_t{1},
                               [&](call_result<std::int64_t>) {
                                 callback_stopping = true;
                                 rt->stop();
                                 callback_stopped = true;
                               });
  ASSERT_TRUE(test::eventually([&] { return callback_stopping.load(); }));
  std::atomic<bool> second_stopped{false};
  std::thread second{[&] {
    rt->stop();
    second_stopped = true;
  }};
  std::this_thread::sleep_for(300ms); // the slow step holds the first stop
  EXPECT_FALSE(second_stopped) << "stop() returned while the runtime stopped";
  release = true;
  second.join();
  EXPECT_TRUE(test::eventually([&] { return callback_stopped.load(); }));
}

TEST_F(object_test, cycles_through_child_workflows_fail_and_sends_hold_nothing) {
  auto rt = make();
  rt->start();
  // A handler of a waits for a child workflow that calls a: a cycle.
  try {
    rt->call<std::int64_t>("counter", "a", "via_child");
    FAIL() << "a cycle through a child workflow ran";
  } catch (const error& ex) {
    EXPECT_NE(std::string{ex.what()}.find("call cycle"), std::string::npos)
      << ex.what();
  }
  // A handler of a sends to b, which calls a back: no wait, no cycle.
  rt->call<std::int64_t>("counter", "a", "send_back", std::string{"b"});
  EXPECT_TRUE(test::eventually([&] {
    auto a = rt->object_state<counter>("counter", "a");
    auto b = rt->object_state<counter>("counter", "b");
    return a && a->total == 1 && b && b->total == 1000;
  }));
}

TEST_F(object_test, a_call_cancelled_while_queued_never_runs) {
  auto rt = make();
  rt->start();
  auto slow = rt->send<std::int64_t>("counter", "q", "slow_add", std::int64_t{1});
  auto queued = rt->send<std::int64_t>("counter", "q", "add", std::int64_t{100});
  rt->cancel(queued.id());
  try {
    queued.get(20s);
    FAIL() << "a cancelled call returned";
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_cancelled);
  }
  EXPECT_EQ(slow.get(20s), 1);
  // The key goes on serving, without the cancelled call's effect.
  EXPECT_EQ(rt->call<std::int64_t>("counter", "q", "add", std::int64_t{1}), 2);
}

TEST_F(object_test, a_restart_runs_the_calls_its_last_run_left_unended) {
  std::string id;
  {
    auto rt = make();
    rt->start();
    id = rt->send<std::int64_t>("counter", "left", "slow_add", std::int64_t{7})
           .id();
    std::this_thread::sleep_for(100ms); // its step runs: stop() cuts it off
  }
  auto rt = make(); // same executor id; nobody calls the key again
  rt->start();
  EXPECT_EQ(rt->retrieve_workflow<std::int64_t>(id).get(20s), 7);
  EXPECT_EQ(rt->object_state<counter>("counter", "left")->total, 7);
}

} // namespace
