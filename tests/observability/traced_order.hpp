#pragma once

// The workflow the trace tests follow: steps, a child workflow, an object
// call, and a step that can be made to hang (to kill its process there).

#include <cereal/cereal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"

namespace perdure::test {

struct traced_account {
  std::int64_t total = 0;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(total));
  }
};

/// Registers "order" (reserve, charge, child "ship", a call of
/// account/add, notify) on `rt`; `in_charge` runs in the charge step.
inline void register_traced_order(runtime& rt,
                                  std::function<void()> in_charge) {
  rt.register_object<traced_account>("account").handler(
    "add",
    [](object_context<traced_account>& ctx, std::int64_t n)
      -> task<std::int64_t> {
      ctx.state().total += n;
      co_return ctx.state().total;
    });
  rt.register_workflow("ship", [](workflow_context& ctx, int n) -> task<int> {
    co_return co_await ctx.step("label", [n] { return n; });
  });
  rt.register_workflow(
    "order", [in_charge](workflow_context& ctx) -> task<std::string> {
      co_await ctx.step("reserve", [] { return 1; });
      co_await ctx.step("charge", [&] {
        in_charge();
        return 2;
      });
      auto child = co_await ctx.start_child<int>("ship", 3);
      co_await child;
      co_await ctx.call<std::int64_t>("account", "a", "add", std::int64_t{5});
      co_await ctx.step("notify", [] { return 4; });
      co_return std::string{"done"};
    });
}

} // namespace perdure::test
