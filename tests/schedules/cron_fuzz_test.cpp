// Seeded random texts for the cron parser: every text parses or is refused
// with `errc::invalid_argument`, never a crash, a hang or a sanitizer
// report; what parses keeps `next`'s promise (a match at or after the
// start, none skipped over the minute before it). PERDURE_FUZZ_ITERATIONS
// runs it longer; the seed is printed (PERDURE_FUZZ_SEED repeats it).
// tests/fuzz/cron_fuzz.cpp is the same check for clang's libFuzzer.

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

#include "perdure/error.hpp"
#include "perdure/schedules/cron.hpp"
#include "schedules/cron_check.hpp"

namespace perdure::schedules {
namespace {

std::uint64_t seed() {
  if (auto s = std::getenv("PERDURE_FUZZ_SEED"))
    return std::stoull(s);
  return std::random_device{}();
}

int iterations() {
  if (auto s = std::getenv("PERDURE_FUZZ_ITERATIONS"))
    return std::stoi(s);
  return 20000;
}

TEST(CronFuzz, AnyTextParsesOrIsRefused) {
  auto s = seed();
  std::cout << "PERDURE_FUZZ_SEED=" << s << "\n";
  std::mt19937_64 rng{s};
  const std::string alphabet = "0123456789*/,-? @LW#abcdefghijklmnopqrstuvwxyz"
                               "ADEFGHJMNORSTUVY\t\n\x01\xff";
  const char* seeds[] = {"*/15 0-23/2 1,15 JAN-DEC MON-FRI", "@daily",
                         "0 0 29 2 *", "5/20 9-17 * * 1-5",
                         "*/7 */13 */5 */3 */2 */4", "0 0 13 * FRI"};
  for (int i = 0; i < iterations(); ++i) {
    std::string text;
    if (rng() % 2 == 0) {
      text = seeds[rng() % std::size(seeds)];
      for (int m = 0, n = 1 + static_cast<int>(rng() % 4); m < n; ++m) {
        auto at = text.empty() ? 0 : rng() % (text.size() + 1);
        switch (rng() % 3) {
          case 0: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          case 1: if (at < text.size()) text.erase(at, 1); break;
          default: if (at < text.size()) text[at] = alphabet[rng() % alphabet.size()];
        }
      }
    } else {
      for (int n = static_cast<int>(rng() % 40); n > 0; --n)
        text += alphabet[rng() % alphabet.size()];
    }
    ASSERT_NO_FATAL_FAILURE(test::check_cron_text(text)) << "text: " << text;
  }
}

} // namespace
} // namespace perdure::schedules
