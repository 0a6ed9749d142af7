// A shopping cart as a virtual object: one "cart" per user, its items kept
// as durable state. Handlers of one cart run one at a time (no lost update
// however many requests arrive at once); what a handler leaves in the
// state commits with its end, exactly once. Checkout calls a workflow and
// waits for it; a repeated checkout request (same idempotency key) gets the
// first one's answer instead of paying twice.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/cart.db ./perdure-cart

#include <perdure/perdure.hpp>

#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

struct cart {
  std::map<std::string, int> items;
  int orders = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(items), CEREAL_NVP(orders));
  }
};

perdure::task<int> add(perdure::object_context<cart>& ctx, std::string item) {
  co_return ++ctx.state().items[item];
}

perdure::task<int> remove_item(perdure::object_context<cart>& ctx,
                          std::string item) {
  auto& items = ctx.state().items;
  auto i = items.find(item);
  if (i == items.end())
    throw perdure::terminal_error("no " + item + " in the cart");
  if (--i->second == 0)
    items.erase(i);
  co_return static_cast<int>(items.size());
}

perdure::task<std::map<std::string, int>>
view(perdure::shared_object_context<cart>& ctx) {
  co_return ctx.state().items; // shared: read-only, a const state
}

perdure::task<std::string> checkout(perdure::object_context<cart>& ctx) {
  if (ctx.state().items.empty())
    throw perdure::terminal_error("the cart is empty");
  auto order = co_await ctx.start_child<std::string>(
    "place_order", std::make_pair(ctx.key(), ctx.state().items));
  auto receipt = co_await order;
  ctx.state().items.clear();
  ++ctx.state().orders;
  co_return receipt;
}

/// The order workflow: charges once, ships once, whatever crashes between.
perdure::task<std::string>
place_order(perdure::workflow_context& ctx,
            std::pair<std::string, std::map<std::string, int>> order) {
  int count = 0;
  for (auto& [item, n] : order.second)
    count += n;
  co_await ctx.step("charge", [&] {
    std::cout << "  charged " << order.first << " for " << count
              << " items\n";
  });
  co_await ctx.step("ship", [&] {
    std::cout << "  shipped " << count << " items to " << order.first << "\n";
  });
  co_return "order of " + std::to_string(count) + " items for " + order.first;
}

} // namespace

int main() {
  perdure::runtime rt{perdure::config::from_env()};
  rt.register_object<cart>("cart")
    .handler("add", add)
    .handler("remove", remove_item)
    .handler("view", view)
    .handler("checkout", checkout);
  rt.register_workflow("place_order", place_order);
  rt.start();

  // Eight requests at once add to alice's cart: none is lost.
  std::vector<std::thread> requests;
  for (int n = 0; n < 8; ++n)
    requests.emplace_back([&, n] {
      rt.call<int>("cart", "alice", "add",
                   std::string{n % 2 == 0 ? "book" : "pen"});
    });
  for (auto& r : requests)
    r.join();
  rt.call<int>("cart", "alice", "remove", std::string{"pen"});
  for (auto& [item, n] :
       rt.call<std::map<std::string, int>>("cart", "alice", "view"))
    std::cout << "alice's cart: " << n << " x " << item << "\n";
  try {
    rt.call<int>("cart", "alice", "remove", std::string{"lamp"});
  } catch (const perdure::error& ex) {
    std::cout << "remove lamp refused: " << ex.what() << "\n";
  }

  // Checkout, and the same request again (a retried HTTP call).
  perdure::call_options once{.idempotency_key = "checkout-1"};
  auto receipt = rt.call<std::string>("cart", "alice", "checkout", once);
  auto again = rt.call<std::string>("cart", "alice", "checkout", once);
  std::cout << "checkout: " << receipt << "\n";
  std::cout << "checkout again (same key): " << again << "\n";
  auto state = rt.object_state<cart>("cart", "alice");
  std::cout << "alice: " << state->items.size() << " items left, "
            << state->orders << " order placed\n";
  return state->orders == 1 ? 0 : 1;
}
