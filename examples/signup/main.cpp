// Double opt-in: a signup sends a confirmation link (an awakeable id),
// reminds the user if nothing happened after a while, and expires the signup
// at a deadline. Every wait is durable: kill the process at any point and
// start it again, and each signup resumes where it was (a confirmation that
// arrived meanwhile is not lost, a reminder is not sent twice).
//
// Here alice confirms after the reminder and bob never does. The delays are
// seconds so the demo is quick; a real signup would remind after a day and
// expire after a week, with the run passivated (out of memory) meanwhile.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/signup.db ./perdure-signup

#include <perdure/perdure.hpp>

#include <chrono>
#include <ctime>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

constexpr auto remind_after = 1s;
constexpr auto expire_after = 3s; // counted from the reminder

/// The confirmation links "mailed" so far (the demo's outside world).
std::mutex outbox_mtx;
std::string alice_link;

perdure::task<std::string> signup(perdure::workflow_context& ctx,
                                  std::string email) {
  auto confirmed = co_await ctx.awakeable<bool>();
  co_await ctx.step("send-confirmation", [&] {
    std::cout << "  mail to " << email << ": please confirm at /confirm/"
              << confirmed.id() << "\n";
    if (email.rfind("alice", 0) == 0) {
      std::lock_guard guard{outbox_mtx};
      alice_link = confirmed.id();
    }
  });
  std::vector<perdure::wait_on> first{ctx.on(confirmed)};
  auto answer = co_await ctx.select_within(remind_after, std::move(first));
  if (answer.timed_out()) {
    co_await ctx.step("send-reminder", [&] {
      std::cout << "  mail to " << email << ": a reminder, the link still works\n";
    });
    std::vector<perdure::wait_on> second{ctx.on(confirmed)};
    answer = co_await ctx.select_within(expire_after, std::move(second));
  }
  if (answer.timed_out()) {
    co_await ctx.step("expire", [&] {
      std::cout << "  " << email << ": signup expired, account removed\n";
    });
    co_return "expired";
  }
  co_await ctx.step("activate", [&] {
    std::cout << "  " << email << ": confirmed, account activated\n";
  });
  co_return "active";
}

} // namespace

int main() {
  auto cfg = perdure::config::from_env();
  std::cout << "database: " << cfg.database_url << "\n";
  perdure::runtime rt{cfg};
  rt.register_workflow("signup", signup);
  rt.start();

  auto stamp = std::to_string(std::time(nullptr));
  auto alice = rt.start_workflow<std::string>(
    "signup", std::string{"alice@example.com"}, {.id = "signup-alice-" + stamp});
  auto bob = rt.start_workflow<std::string>(
    "signup", std::string{"bob@example.com"}, {.id = "signup-bob-" + stamp});

  // Alice clicks her link after the reminder (from "the web server").
  std::this_thread::sleep_for(remind_after + 500ms);
  std::string link;
  {
    std::lock_guard guard{outbox_mtx};
    link = alice_link;
  }
  std::cout << "alice clicks /confirm/" << link << "\n";
  rt.resolve_awakeable(link, true);
  try {
    rt.resolve_awakeable(link, true);
  } catch (const perdure::error& ex) {
    std::cout << "a second click is refused: " << ex.what() << "\n";
  }

  auto a = alice.get(30s);
  auto b = bob.get(30s);
  std::cout << "alice: " << a << "\nbob:   " << b << "\n";
  rt.stop();
  return a == "active" && b == "expired" ? 0 : 1;
}
