// Wakes racing deliveries: a run waiting on two awakeables is woken by
// both resolutions and by a stream of unrelated messages at once. One
// winner is recorded per wait, and the code sees that very winner (live
// and on replay alike).

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "perdure/perdure.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

TEST(race_test, wakes_racing_deliveries_record_one_winner_the_code_sees) {
  auto db = test::database::fresh();
  runtime rt{db.runtime_config()};
  rt.register_workflow("racer", [](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.awakeable<int>();
    auto b = co_await ctx.awakeable<int>();
    std::vector<wait_on> waits{ctx.on(a), ctx.on(b)};
    auto first = co_await ctx.select(std::move(waits));
    co_return first.index();
  });
  rt.start();
  constexpr int runs = 40;
  std::vector<workflow_handle<int>> handles;
  for (int i = 0; i < runs; ++i)
    handles.push_back(rt.start_workflow<int>("racer",
                                             {.id = "r" + std::to_string(i)}));
  test::sql_client sql{db};
  auto journal = sql.table("journal");
  std::string payload = test::store_under_test() == "postgres"
                          ? "convert_from(payload, 'UTF8')"
                          : "payload";
  for (int i = 0; i < 1000; ++i) {
    if (sql.scalar("SELECT COUNT(*) FROM " + journal + " WHERE seq = 1")
        == std::to_string(runs))
      break;
    std::this_thread::sleep_for(10ms);
  }
  for (int i = 0; i < runs; ++i) {
    auto id = "r" + std::to_string(i);
    std::thread noise{[&] {
      for (int k = 0; k < 10; ++k)
        rt.send(id, "noise", k);
    }};
    std::thread b{[&] { rt.resolve_awakeable("awk_1_" + id, 2); }};
    rt.resolve_awakeable("awk_0_" + id, 1);
    b.join();
    noise.join();
  }
  for (int i = 0; i < runs; ++i) {
    auto id = "r" + std::to_string(i);
    auto live = handles[static_cast<size_t>(i)].get(10s);
    auto recorded = sql.scalar("SELECT " + payload + " FROM " + journal
                               + " WHERE run_id = $1 AND seq = 2",
                               {id});
    EXPECT_EQ(recorded.substr(0, recorded.find(':')), std::to_string(live))
      << id << ": the code saw another winner than the one recorded";
  }
}

} // namespace
