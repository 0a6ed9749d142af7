#pragma once

// One fuzz check of the cron parser, shared by the seeded test and the
// libFuzzer target: `text` parses or is refused as invalid_argument; what
// parses has a `next` that matches and skips no minute before it.

#include <chrono>
#include <cstdlib>
#include <string>

#include "perdure/error.hpp"
#include "perdure/schedules/cron.hpp"

namespace perdure::schedules::test {

/// Returns an empty string, or what went wrong.
inline std::string cron_text_fault(const std::string& text) {
  using namespace std::chrono;
  std::optional<cron_expression> c;
  try {
    c = cron_expression::parse(text);
  } catch (const perdure::error& e) {
    if (e.code() != errc::invalid_argument)
      return "refused with another code";
    return "";
  } catch (...) {
    return "threw something other than perdure::error";
  }
  auto from = civil_seconds{seconds{1'780'000'000}}; // 2026-05-28
  auto next = c->next(from);
  if (!next)
    return ""; // never fires (29-31 of short months only, say)
  if (*next < from || !c->matches(*next))
    return "next is before the start or does not match";
  // No match skipped: the hour before it (every second if it has
  // seconds, else every minute) holds none.
  auto step = c->has_seconds() ? seconds{1} : seconds{60};
  auto lo = std::max(from, *next - hours{1});
  if (!c->has_seconds())
    lo = ceil<minutes>(lo);
  for (auto t = lo; t < *next; t += step)
    if (c->matches(t))
      return "next skipped a match";
  return "";
}

inline void check_cron_text(const std::string& text) {
  auto fault = cron_text_fault(text);
  if (!fault.empty()) {
    // gtest is only linked into the test; the fuzzer aborts.
#ifdef GTEST_API_
    FAIL() << fault;
#else
    std::abort();
#endif
  }
}

} // namespace perdure::schedules::test
