#pragma once

// The bank's accounts (virtual objects) and transfers (workflows), shared
// by examples/bank/main.cpp and the crash-point test that checks them
// (tests/workflows/crash_points_test.cpp).

#include <perdure/perdure.hpp>

#include <cstdint>
#include <string>

namespace bank {


struct account {
  std::int64_t balance = 0;
  bool opened = false;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(balance), CEREAL_NVP(opened));
  }
};

inline perdure::task<std::int64_t> open_account(perdure::object_context<account>& ctx,
                                 std::int64_t amount) {
  if (!ctx.state().opened) { // opening twice deposits once
    ctx.state().opened = true;
    ctx.state().balance = amount;
  }
  co_return ctx.state().balance;
}

inline perdure::task<std::int64_t> deposit(perdure::object_context<account>& ctx,
                                    std::int64_t amount) {
  ctx.state().balance += amount;
  co_return ctx.state().balance;
}

inline perdure::task<std::int64_t> withdraw(perdure::object_context<account>& ctx,
                                     std::int64_t amount) {
  if (ctx.state().balance < amount)
    throw perdure::terminal_error("insufficient funds"); // changes nothing
  ctx.state().balance -= amount;
  co_return ctx.state().balance;
}

inline perdure::task<std::int64_t> balance(perdure::shared_object_context<account>& ctx) {
  co_return ctx.state().balance;
}

struct transfer_order {
  std::string from, to;
  std::int64_t amount = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(from), CEREAL_NVP(to), CEREAL_NVP(amount));
  }
};

/// Withdraws, then deposits; a refused withdrawal ends the transfer.
inline perdure::task<bool> transfer(perdure::workflow_context& ctx,
                             transfer_order t) {
  auto withdrawn = co_await ctx.send<std::int64_t>("account", t.from,
                                                   "withdraw", t.amount);
  try {
    co_await withdrawn;
  } catch (const perdure::terminal_error&) {
    co_return false;
  }
  co_await ctx.call<std::int64_t>("account", t.to, "deposit", t.amount);
  co_return true;
}

/// Registers the account object and the transfer workflow on `rt`.
inline void register_bank(perdure::runtime& rt) {
  rt.register_object<account>("account")
    .handler("open", open_account)
    .handler("deposit", deposit)
    .handler("withdraw", withdraw)
    .handler("balance", balance);
  rt.register_workflow("transfer", transfer);
}

} // namespace bank
