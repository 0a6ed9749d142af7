// A durable greeting: three steps, one of which fails once and is retried,
// then the same workflow id started again returns the first run's result
// without running anything.
//
//   PERDURE_DATABASE_URL=sqlite:///tmp/hello.db ./perdure-hello

#include <perdure/perdure.hpp>

#include <atomic>
#include <iostream>
#include <stdexcept>
#include <string>

using namespace std::chrono_literals;

namespace {

struct greeting {
  std::string text;
  int attempts_needed = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(text), CEREAL_NVP(attempts_needed));
  }
};

std::atomic<int> executions{0};
std::atomic<int> flaky_calls{0};

perdure::task<greeting> greet(perdure::workflow_context& ctx, std::string who) {
  auto name = co_await ctx.step("normalise", [&] {
    ++executions;
    std::cout << "  step normalise runs\n";
    auto result = who;
    if (!result.empty())
      result[0] = static_cast<char>(std::toupper(result[0]));
    return result;
  });
  auto attempts = co_await ctx.step(
    "call-flaky-service",
    [&] {
      ++executions;
      auto n = ++flaky_calls;
      std::cout << "  step call-flaky-service, attempt " << n << "\n";
      if (n == 1)
        throw std::runtime_error("service unavailable");
      return n;
    },
    perdure::retry_policy{.max_attempts = 3, .initial_delay = 50ms});
  co_await ctx.step("log", [&] {
    ++executions;
    std::cout << "  step log runs\n";
  });
  co_return greeting{"Hello, " + name + "!", attempts};
}

} // namespace

int main() {
  auto cfg = perdure::config::from_env();
  std::cout << "database: " << cfg.database_url << "\n";
  perdure::runtime rt{cfg};
  rt.register_workflow("greet", greet);
  rt.start();

  auto id = "greet-" + std::to_string(std::time(nullptr));
  std::cout << "starting workflow " << id << "\n";
  auto first = rt.start_workflow<greeting>("greet", std::string{"world"},
                                           {.id = id});
  auto result = first.get(30s);
  std::cout << "result: \"" << result.text << "\" (flaky step succeeded on "
            << "attempt " << result.attempts_needed << "), status "
            << perdure::to_string(first.status()) << "\n";

  auto before = executions.load();
  std::cout << "starting the same id again\n";
  auto again = rt.start_workflow<greeting>("greet", std::string{"world"},
                                           {.id = id});
  auto second = again.get(30s);
  std::cout << "result: \"" << second.text << "\", steps executed again: "
            << executions.load() - before << "\n";

  try {
    rt.start_workflow<greeting>("greet", std::string{"someone else"},
                                {.id = id});
  } catch (const perdure::error& ex) {
    std::cout << "same id, other input: " << perdure::to_string(ex.code())
              << ": " << ex.what() << "\n";
  }
  return result.text == second.text ? 0 : 1;
}
