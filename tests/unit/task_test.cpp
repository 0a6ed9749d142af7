#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "perdure/task.hpp"

using perdure::task;

namespace {

task<int> answer() {
  co_return 42;
}

task<int> add_one(int depth) {
  if (depth == 0)
    co_return co_await answer();
  co_return 1 + co_await add_one(depth - 1);
}

task<void> throws() {
  throw std::runtime_error("boom");
  co_return;
}

task<std::string> catches() {
  try {
    co_await throws();
  } catch (const std::exception& ex) {
    co_return std::string{"caught "} + ex.what();
  }
  co_return "nothing";
}

} // namespace

task<int> set_flag(bool* ran) {
  *ran = true;
  co_return 1;
}

TEST(task, is_lazy_until_started) {
  bool ran = false;
  // A coroutine lambda with captures would dangle here (its closure dies at
  // the end of the statement): free functions with value parameters do not.
  auto t = set_flag(&ran);
  EXPECT_FALSE(ran);
  t.start();
  EXPECT_TRUE(ran);
  EXPECT_TRUE(t.done());
  EXPECT_EQ(t.take_result(), 1);
}

TEST(task, deep_chains_of_awaits_complete_in_order) {
  auto t = add_one(2000); // sanitizer builds do not make the transfer a tail call
  t.start();
  ASSERT_TRUE(t.done());
  EXPECT_EQ(t.take_result(), 42 + 2000);
}

TEST(task, exceptions_travel_to_the_awaiter) {
  auto t = catches();
  t.start();
  EXPECT_EQ(t.take_result(), "caught boom");
}

struct never {
  bool await_ready() {
    return false;
  }
  void await_suspend(std::coroutine_handle<>) {
  }
  void await_resume() {
  }
};

task<int> wait_forever() {
  co_await never{};
  co_return 1;
}

TEST(task, an_unfinished_frame_can_be_destroyed) {
  auto t = wait_forever();
  t.start();
  EXPECT_FALSE(t.done());
  t.reset(); // must not leak or crash (ASan checks)
}
