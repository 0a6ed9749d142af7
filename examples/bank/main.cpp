// Accounts as virtual objects and transfers as workflows. An account's
// handlers run one at a time and its balance commits exactly once with each
// handler's end, so concurrent transfers never overdraw an account and money
// is neither created nor lost -- also when the process is killed mid-run:
// run it with --crash, then again, and the totals still add up.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/bank.db ./perdure-bank [--crash]

#include <perdure/perdure.hpp>

#include "bank.hpp"

#include <csignal>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int accounts = 10;
constexpr int transfers = 400;
constexpr std::int64_t opening = 100;

std::string name(int n) {
  return "acct-" + std::to_string(n);
}

} // namespace

int main(int argc, char** argv) {
  bool crash = argc > 1 && std::string{argv[1]} == "--crash";
  perdure::runtime rt{perdure::config::from_env()};
  bank::register_bank(rt);
  rt.start(); // finishes the transfers a killed run left

  for (int a = 0; a < accounts; ++a)
    rt.call<std::int64_t>("account", name(a), "open", opening);
  // The same transfers every run (fixed ids): a second run returns the
  // ones that exist and finishes those a crash interrupted.
  std::mt19937 rng{42};
  std::uniform_int_distribution<int> pick{0, accounts - 1};
  std::uniform_int_distribution<std::int64_t> amount{1, 60};
  std::vector<perdure::workflow_handle<bool>> started;
  for (int n = 0; n < transfers; ++n) {
    bank::transfer_order t{name(pick(rng)), name(pick(rng)), amount(rng)};
    if (t.from == t.to)
      continue;
    started.push_back(rt.start_workflow<bool>("transfer", t,
                                              {.id = "t-" + std::to_string(n)}));
    if (crash && n == transfers / 2) {
      std::cout << "killing the process in the middle of the transfers"
                << std::endl;
      std::raise(SIGKILL);
    }
  }
  int done = 0, refused = 0;
  for (auto& h : started)
    (h.get() ? done : refused)++;
  std::int64_t total = 0, lowest = opening;
  for (int a = 0; a < accounts; ++a) {
    auto b = rt.call<std::int64_t>("account", name(a), "balance");
    total += b;
    lowest = std::min(lowest, b);
  }
  std::cout << done << " transfers done, " << refused
            << " refused (insufficient funds)\n";
  std::cout << "total money: " << total << " (opened with "
            << accounts * opening << "), lowest balance: " << lowest << "\n";
  return total == accounts * opening && lowest >= 0 ? 0 : 1;
}
