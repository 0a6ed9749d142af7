// Resume: a run that ended ERROR or CANCELLED goes back to work under its
// id once the bug is fixed; what completed is replayed, not run again.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class resume_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// "pay": step "reserve" (counted), then step "charge", which fails for
  /// good until `fixed_`.
  void register_pay(runtime& rt) {
    rt.register_workflow("pay", [this](workflow_context& ctx) -> task<int> {
      auto r = co_await ctx.step("reserve", [this] { return ++reserved_; });
      auto c = co_await ctx.step("charge", [this] {
        ++charged_;
        if (!fixed_)
          throw terminal_error("card service rejected the call (the bug)");
        return 10;
      });
      co_return r + c;
    });
  }

  test::database db_;
  std::atomic<int> reserved_{0}, charged_{0};
  std::atomic<bool> fixed_{false};
};

TEST_F(resume_test, a_failed_run_resumes_under_its_id_and_replays_what_completed) {
  runtime rt{db_.runtime_config("local")};
  register_pay(rt);
  rt.start();
  auto h = rt.start_workflow<int>("pay");
  EXPECT_THROW(h.get(10s), perdure::error);
  ASSERT_EQ(h.status(), run_status::error);
  fixed_ = true;
  // From a client process, as an operator would.
  client operator_client{db_.runtime_config("ops")};
  operator_client.resume(h.id(), {.reason = "card bug fixed in 1.4.2"});
  EXPECT_EQ(h.get(10s), 11);
  EXPECT_EQ(h.status(), run_status::success);
  EXPECT_EQ(reserved_.load(), 1) << "a completed step is replayed, not run";
  EXPECT_EQ(charged_.load(), 2) << "the failed step runs again";
  auto history = rt.history(h.id());
  for (auto& s : history)
    EXPECT_TRUE(s.error.empty()) << "the failed tail was dropped: " << s.name;
  // The history says when it was resumed, why, and what it forgot, between
  // what it kept and what ran again.
  auto at = [&](auto pred) {
    return std::find_if(history.begin(), history.end(), pred)
           - history.begin();
  };
  auto event = at([](auto& s) { return s.outcome == "event"; });
  ASSERT_LT(event, std::ssize(history));
  EXPECT_EQ(history[event].kind, "resume");
  EXPECT_EQ(history[event].payload, "card bug fixed in 1.4.2");
  EXPECT_NE(history[event].name.find("from ERROR, forgetting 1 journal "
                                     "entries from index 1"),
            std::string::npos)
    << history[event].name;
  EXPECT_LT(at([](auto& s) { return s.name == "reserve"; }), event);
  EXPECT_GT(at([](auto& s) { return s.name == "charge"; }), event);
}

TEST_F(resume_test, a_dead_letter_resumes_into_its_queue) {
  runtime rt{db_.runtime_config("local")};
  register_pay(rt);
  queues::register_queue(rt, "payments", {.retry = {.max_attempts = 1}});
  rt.start();
  auto h = queues::enqueue<int>(rt, "payments", "pay");
  EXPECT_THROW(h.get(10s), perdure::error);
  ASSERT_EQ(h.status(), run_status::dead_letter);
  auto look = rt.resume_matching({.status = run_status::dead_letter}, {},
                                 true);
  EXPECT_EQ(look.matched, 1);
  EXPECT_EQ(look.done, 0);
  fixed_ = true;
  rt.resume(h.id(), {.reason = "card bug fixed"});
  EXPECT_EQ(h.get(10s), 11);
  EXPECT_EQ(reserved_.load(), 1) << "its completed step is replayed";
  auto history = rt.history(h.id());
  auto event = std::find_if(history.begin(), history.end(),
                            [](auto& s) { return s.outcome == "event"; });
  ASSERT_NE(event, history.end());
  EXPECT_EQ(event->payload, "card bug fixed");
  EXPECT_NE(event->name.find("from DEAD_LETTER"), std::string::npos)
    << event->name;
  try {
    rt.resume(h.id());
    FAIL() << "a finished item was resumed";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::invalid_argument);
    EXPECT_NE(std::string{ex.what()}.find("is SUCCESS"), std::string::npos)
      << ex.what();
  }
}

// A review found this: code that publishes a status before rethrowing left
// a success last, so "after the last success" dropped nothing and the
// resumed run failed again on its recorded failure.
TEST_F(resume_test, a_failure_caught_and_rethrown_after_more_work_is_resumed) {
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow("careful", [this](workflow_context& ctx) -> task<int> {
    try {
      co_return co_await ctx.step("charge", [this] {
        ++charged_;
        if (!fixed_)
          throw terminal_error("card service rejected the call (the bug)");
        return 3;
      });
    } catch (const terminal_error&) {
    }
    co_await ctx.set_event("status", std::string{"failed"});
    throw terminal_error("charging failed");
  });
  rt.start();
  auto h = rt.start_workflow<int>("careful");
  EXPECT_THROW(h.get(10s), perdure::error);
  fixed_ = true;
  rt.resume(h.id());
  EXPECT_EQ(h.get(10s), 3);
  EXPECT_EQ(charged_.load(), 2);
}

// A review found these two: the cut fell on any run's last failure, so a
// cancelled run re-ran the steps after a failure it had caught, and a
// transaction that committed after the failure committed again.
TEST_F(resume_test, a_cancelled_run_keeps_a_failure_it_caught) {
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow("patient", [this](workflow_context& ctx) -> task<int> {
    try {
      co_await ctx.step("charge", [this]() -> int {
        ++charged_;
        throw terminal_error("declined");
      });
    } catch (const terminal_error&) {
    }
    co_await ctx.step("reserve", [this] { return ++reserved_; });
    co_return co_await ctx.recv<int>("go");
  });
  rt.start();
  auto h = rt.start_workflow<int>("patient");
  // Cancelled once "reserve" is recorded (a step whose checkpoint had not
  // committed runs again after the resume, rightly: seen once in a full
  // run, when the cancel came between the body and its commit).
  ASSERT_TRUE(test::eventually([&] {
    for (auto& e : rt.history(h.id()))
      if (e.name == "reserve")
        return true;
    return false;
  }));
  h.cancel();
  rt.resume(h.id());
  rt.send(h.id(), "go", 7);
  EXPECT_EQ(h.get(10s), 7);
  EXPECT_EQ(charged_.load(), 1) << "a caught failure stays caught";
  EXPECT_EQ(reserved_.load(), 1) << "a completed step is replayed, not run";
}

TEST_F(resume_test, a_transaction_committed_after_the_failure_is_not_committed_again) {
  runtime rt{db_.runtime_config("local")};
  std::atomic<int> logged{0};
  rt.register_workflow("ledger", [&](workflow_context& ctx) -> task<int> {
    int c = 0;
    try {
      c = co_await ctx.step("charge", [this] {
        ++charged_;
        if (!fixed_)
          throw terminal_error("card service rejected the call (the bug)");
        return 3;
      });
    } catch (const terminal_error&) {
    }
    co_await ctx.transaction("log", [&](sql_session&) { return ++logged; });
    if (c == 0)
      throw terminal_error("charging failed");
    co_return c;
  });
  rt.start();
  auto h = rt.start_workflow<int>("ledger");
  EXPECT_THROW(h.get(10s), perdure::error);
  ASSERT_EQ(logged.load(), 1);
  fixed_ = true;
  rt.resume(h.id());
  EXPECT_EQ(h.get(10s), 3);
  EXPECT_EQ(charged_.load(), 2) << "the failed step runs again";
  EXPECT_EQ(logged.load(), 1) << "the committed transaction is taken as "
                                 "recorded";
}

TEST_F(resume_test, runs_resume_by_filter_after_a_dry_run) {
  runtime rt{db_.runtime_config("local")};
  register_pay(rt);
  rt.register_workflow("fine", [](workflow_context&) -> task<int> {
    co_return 1;
  });
  rt.start();
  std::vector<workflow_handle<int>> failed;
  for (int i = 0; i < 25; ++i)
    failed.push_back(rt.start_workflow<int>("pay"));
  auto ok = rt.start_workflow<int>("fine");
  EXPECT_EQ(ok.get(10s), 1);
  for (auto& h : failed)
    EXPECT_THROW(h.get(10s), perdure::error);
  fixed_ = true;
  run_filter errors{.status = run_status::error, .limit = 10};
  auto look = rt.resume_matching(errors, {}, true);
  EXPECT_EQ(look.matched, 25);
  EXPECT_EQ(look.done, 0);
  EXPECT_EQ(look.sample.size(), 10u);
  EXPECT_EQ(rt.list_runs({.status = run_status::error}).runs.size(), 25u)
    << "a dry run changes nothing";
  EXPECT_THROW(rt.resume_matching({.status = run_status::success}),
               perdure::error);
  auto did = rt.resume_matching(errors);
  EXPECT_EQ(did.matched, 25);
  EXPECT_EQ(did.done, 25);
  EXPECT_TRUE(did.refused.empty());
  for (auto& h : failed)
    EXPECT_GT(h.get(10s), 10) << h.id(); // its reservation + the charge
  EXPECT_EQ(reserved_.load(), 25) << "completed steps are replayed";
  EXPECT_EQ(charged_.load(), 50);
  EXPECT_EQ(ok.status(), run_status::success) << "other runs untouched";
}

TEST_F(resume_test, a_cancelled_run_resumes_and_only_ended_runs_can) {
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow("wait", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.recv<int>("go");
  });
  register_pay(rt);
  rt.start();
  auto h = rt.start_workflow<int>("wait", {.id = "w1"});
  std::this_thread::sleep_for(100ms); // waiting now
  h.cancel();
  ASSERT_EQ(h.status(), run_status::cancelled);
  rt.resume("w1"); // at once: the cancel's notice may land after it
  EXPECT_EQ(h.status(), run_status::pending);
  try {
    rt.resume("w1");
    FAIL() << "a PENDING run was resumed";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::invalid_argument);
    EXPECT_NE(std::string{ex.what()}.find("is PENDING"), std::string::npos)
      << ex.what();
  }
  try {
    rt.resume("nobody");
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::not_found);
  }
  rt.send("w1", "go", 5);
  EXPECT_EQ(h.get(10s), 5);
}

TEST_F(resume_test, a_late_cancel_notice_leaves_the_resumed_run_alone) {
  // Cancelled and resumed at once, again and again: the cancel's notice
  // (and its end told to waiters) lands around the resume; the new life
  // must neither be stopped by it nor reported CANCELLED.
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow("wait", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.recv<int>("go");
  });
  rt.start();
  for (int i = 0; i < 20; ++i) {
    auto id = "late" + std::to_string(i);
    auto h = rt.start_workflow<int>("wait", {.id = id});
    std::this_thread::sleep_for(20ms);
    h.cancel();
    rt.resume(id);
    rt.send(id, "go", i);
    EXPECT_EQ(h.get(10s), i) << id;
  }
}

} // namespace
