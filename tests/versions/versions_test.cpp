// Versions you can see and move: the report per app version, stranded runs
// (no live process of their version), and moving them on purpose.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class versions_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  config at_version(const std::string& executor, const std::string& version) {
    auto cfg = db_.runtime_config(executor);
    cfg.app_version = version;
    return cfg;
  }

  static void register_wait(runtime& rt) {
    rt.register_workflow("wait", [](workflow_context& ctx) -> task<int> {
      co_return co_await ctx.recv<int>("go");
    });
  }

  static const version_report* find(const std::vector<version_report>& all,
                                    const std::string& version) {
    auto i = std::find_if(all.begin(), all.end(), [&](auto& v) {
      return v.app_version == version;
    });
    return i == all.end() ? nullptr : &*i;
  }

  test::database db_;
};

TEST_F(versions_test, stranded_runs_are_reported_and_can_be_moved) {
  std::vector<std::string> ids;
  {
    runtime v1{at_version("old", "v1")};
    register_wait(v1);
    v1.start();
    for (int i = 0; i < 3; ++i)
      ids.push_back(v1.start_workflow<int>("wait").id());
    auto live = v1.versions();
    auto* v = find(live, "v1");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->live_executors, 1);
    EXPECT_EQ(v->pending, 3);
    EXPECT_FALSE(v->stranded);
    EXPECT_TRUE(v->first_seen.has_value());
    v1.stop(); // v1 is gone; its runs wait for it
  }
  runtime v2{at_version("new", "v2")};
  register_wait(v2);
  v2.start();
  auto all = v2.versions();
  auto* v = find(all, "v1");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->live_executors, 0);
  EXPECT_EQ(v->pending, 3);
  EXPECT_TRUE(v->stranded) << "no live process runs v1";
  ASSERT_TRUE(v->oldest_run.has_value());
  ASSERT_NE(find(all, "v2"), nullptr);
  EXPECT_EQ(find(all, "v2")->live_executors, 1);
  EXPECT_FALSE(find(all, "v2")->stranded);

  EXPECT_THROW(v2.move_runs("v1", "v1"), perdure::error);
  EXPECT_EQ(v2.move_runs("v1", "v2", "v1 retired"), 3);
  auto history = v2.history(ids.at(0));
  ASSERT_FALSE(history.empty());
  EXPECT_EQ(history.back().kind, "move");
  EXPECT_EQ(history.back().outcome, "event");
  EXPECT_EQ(history.back().name, "app version 'v1' to 'v2'");
  EXPECT_EQ(history.back().payload, "v1 retired");
  for (auto& id : ids)
    v2.send(id, "go", 4);
  for (auto& id : ids)
    EXPECT_EQ(v2.retrieve_workflow<int>(id).get(30s), 4) << id;
  auto after = v2.versions();
  if (auto* old = find(after, "v1")) {
    EXPECT_FALSE(old->stranded);
  }
}

} // namespace
