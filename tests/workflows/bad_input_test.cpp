// Bad input gets a clear error, creates nothing and touches no other run.

#include <gtest/gtest.h>

#include <string>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class bad_input_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    auto c = db_.runtime_config();
    c.max_payload_bytes = 4096;
    rt_ = std::make_unique<runtime>(c);
    rt_->register_workflow("echo", [](workflow_context& ctx, std::string s)
                                     -> task<std::string> {
      co_return co_await ctx.step("s", [&] { return s; });
    });
    rt_->register_workflow("bloat", [](workflow_context& ctx, int n)
                                      -> task<std::string> {
      co_return co_await ctx.step("s", [=] { return std::string(n, 'x'); });
    });
    rt_->start();
  }

  /// Expects `f` to throw a perdure::error with `code`.
  template <class F>
  void expect_error(errc code, F f) {
    try {
      f();
      FAIL() << "expected " << to_string(code);
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), code) << ex.what();
      EXPECT_FALSE(std::string{ex.what()}.empty());
    }
  }

  std::size_t runs_in_store() {
    test::sql_client sql{db_};
    return std::stoul(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")));
  }

  test::database db_;
  std::unique_ptr<runtime> rt_;
};

} // namespace

TEST_F(bad_input_test, an_unknown_workflow_name_is_refused) {
  expect_error(errc::unknown_workflow, [&] {
    rt_->start_workflow<std::string>("no-such-thing", std::string{"x"});
  });
  EXPECT_EQ(runs_in_store(), 0u);
}

TEST_F(bad_input_test, empty_and_huge_names_and_ids_are_refused) {
  std::string huge(1 << 20, 'n');
  expect_error(errc::invalid_argument,
               [&] { rt_->start_workflow<std::string>("", std::string{"x"}); });
  expect_error(errc::invalid_argument,
               [&] { rt_->start_workflow<std::string>(huge, std::string{"x"}); });
  expect_error(errc::invalid_argument, [&] {
    rt_->start_workflow<std::string>("echo", std::string{"x"}, {.id = huge});
  });
  EXPECT_EQ(runs_in_store(), 0u);
  expect_error(errc::invalid_argument, [&] {
    runtime other{db_.runtime_config()};
    other.register_workflow("", [](workflow_context&) -> task<void> { co_return; });
  });
}

TEST_F(bad_input_test, oversized_inputs_are_refused) {
  expect_error(errc::payload_too_large, [&] {
    rt_->start_workflow<std::string>("echo", std::string(8192, 'x'));
  });
  EXPECT_EQ(runs_in_store(), 0u);
}

TEST_F(bad_input_test, an_oversized_step_result_fails_the_run_with_the_reason) {
  auto h = rt_->start_workflow<std::string>("bloat", 10000);
  try {
    h.get(10s);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed);
    EXPECT_NE(std::string{ex.what()}.find("exceeds the limit"), std::string::npos)
      << ex.what();
  }
  EXPECT_EQ(rt_->start_workflow<std::string>("bloat", 10).get(10s),
            std::string(10, 'x'));
}

TEST_F(bad_input_test, injection_like_ids_and_inputs_are_plain_data) {
  std::string evil = "x'; DROP TABLE runs; --";
  EXPECT_EQ(rt_->start_workflow<std::string>("echo", evil, {.id = evil}).get(10s),
            evil);
  EXPECT_EQ(runs_in_store(), 1u);
}

TEST_F(bad_input_test, unknown_ids_are_not_found) {
  expect_error(errc::not_found,
               [&] { rt_->retrieve_workflow<int>("missing").get(1s); });
  expect_error(errc::not_found,
               [&] { rt_->retrieve_workflow<int>("missing").status(); });
}

TEST_F(bad_input_test, waiting_past_the_timeout_is_a_timeout_error) {
  client other{db_.runtime_config("elsewhere")};
  persistence::run_record r;
  r.id = "never-ends";
  r.name = "echo";
  r.owner = {"dead-executor", 1};
  persistence::open_store(db_.store_options())->create_run(r);
  expect_error(errc::timeout,
               [&] { other.retrieve_workflow<int>("never-ends").get(100ms); });
}

TEST_F(bad_input_test, using_a_runtime_before_start_or_registering_late_fails) {
  rt_->stop(); // SQLite runs one runtime per file
  runtime idle{db_.runtime_config("idle")};
  idle.register_workflow("w", [](workflow_context&) -> task<void> { co_return; });
  expect_error(errc::not_running, [&] { idle.start_workflow<void>("w"); });
  expect_error(errc::invalid_argument, [&] {
    idle.register_workflow("w", [](workflow_context&) -> task<void> { co_return; });
  });
  idle.start();
  expect_error(errc::invalid_argument, [&] {
    idle.register_workflow("late", [](workflow_context&) -> task<void> { co_return; });
  });
}

TEST_F(bad_input_test, error_messages_of_any_bytes_are_recorded_as_text) {
  rt_->stop(); // SQLite runs one runtime per file
  runtime rt{db_.runtime_config("bytes")};
  rt.register_workflow("garbled", [](workflow_context& ctx) -> task<std::string> {
    try {
      co_await ctx.step(
        "s", [] { throw terminal_error("bad \xff\xfe bytes"); });
    } catch (const terminal_error& ex) {
      co_return ex.what();
    }
    co_return "";
  });
  rt.register_workflow("bad-step-name", [](workflow_context& ctx) -> task<int> {
    co_return co_await ctx.step(std::string{"a\0b", 3}, [] { return 1; });
  });
  rt.start();
  EXPECT_EQ(rt.start_workflow<std::string>("garbled").get(10s), "bad ?? bytes");
  try {
    rt.start_workflow<int>("bad-step-name").get(10s);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::workflow_failed);
    EXPECT_NE(std::string{ex.what()}.find("step names"), std::string::npos)
      << ex.what();
  }
  std::string bad_id{"id\xff"};
  expect_error(errc::invalid_argument, [&] {
    rt.start_workflow<std::string>("garbled", {.id = bad_id});
  });
}

TEST_F(bad_input_test, a_stopped_runtime_refuses_work_with_a_clear_error) {
  auto h = rt_->start_workflow<std::string>("echo", std::string{"x"});
  EXPECT_EQ(h.get(10s), "x");
  rt_->stop();
  expect_error(errc::not_running, [&] {
    rt_->start_workflow<std::string>("echo", std::string{"y"});
  });
  expect_error(errc::not_running, [&] { h.status(); });
  expect_error(errc::not_running, [&] { h.get(1s); });
}
