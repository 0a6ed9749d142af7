// Seeded random inputs for the payload decoders (JSON and binary): every
// input gives a value or `errc::decode_failed`, never a crash, a hang or a
// sanitizer report. PERDURE_FUZZ_ITERATIONS runs it longer by hand; the
// seed is printed so a failure can be repeated (PERDURE_FUZZ_SEED).

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "perdure/error.hpp"
#include "perdure/persistence/codec.hpp"

using namespace perdure;

namespace {

struct shape {
  std::string name;
  std::vector<std::int64_t> numbers;
  std::map<std::string, double> weights;
  std::optional<std::string> note;
  bool flag = false;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(name), CEREAL_NVP(numbers), CEREAL_NVP(weights),
       CEREAL_NVP(note), CEREAL_NVP(flag));
  }
};

std::uint64_t seed() {
  if (auto s = std::getenv("PERDURE_FUZZ_SEED"))
    return std::stoull(s);
  return std::random_device{}();
}

int iterations() {
  if (auto s = std::getenv("PERDURE_FUZZ_ITERATIONS"))
    return std::stoi(s);
  return 20'000;
}

/// A valid encoding of a random value, then mutated: bytes flipped,
/// inserted, removed, the input cut, a length prefix made huge.
std::string mutated(std::mt19937_64& rng, persistence::encoding enc) {
  shape s;
  s.name = std::string(rng() % 20, 'x');
  for (auto n = rng() % 6; n > 0; --n)
    s.numbers.push_back(static_cast<std::int64_t>(rng()));
  for (auto n = rng() % 4; n > 0; --n)
    s.weights[std::to_string(rng() % 100)] = static_cast<double>(rng() % 1000) / 7;
  if (rng() % 2)
    s.note = "note";
  auto bytes = persistence::encode(s, enc);
  for (auto edits = 1 + rng() % 4; edits > 0 && !bytes.empty(); --edits) {
    auto at = rng() % bytes.size();
    switch (rng() % 5) {
      case 0:
        bytes[at] = static_cast<char>(rng());
        break;
      case 1:
        bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                     static_cast<char>(rng()));
        break;
      case 2:
        bytes.erase(at, 1);
        break;
      case 3:
        bytes.resize(at);
        break;
      default: // eight bytes of 0xff: a length of 2^64 - 1, say
        bytes.replace(at, std::min<std::size_t>(8, bytes.size() - at),
                      std::string(8, '\xff'));
    }
  }
  return bytes;
}

std::string random_bytes(std::mt19937_64& rng) {
  std::string s(rng() % 64, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  if (rng() % 2 && !s.empty())
    s[0] = '\x01'; // the binary encoding's tag
  return s;
}

template <class T>
void decode_or_clear_error(const std::string& bytes) {
  try {
    (void)persistence::decode<T>(bytes);
  } catch (const error& ex) {
    EXPECT_EQ(ex.code(), errc::decode_failed) << ex.what();
  }
  // Anything else escaping (bad_alloc, length_error) fails the test.
}

} // namespace

TEST(fuzz_decode_test, payloads_decode_or_fail_clearly) {
  auto s = seed();
  std::cout << "seed " << s << " (PERDURE_FUZZ_SEED repeats it)\n";
  std::mt19937_64 rng{s};
  for (int i = 0, n = iterations(); i < n; ++i) {
    auto enc = rng() % 2 ? persistence::encoding::json
                         : persistence::encoding::binary;
    auto bytes = rng() % 3 == 0 ? random_bytes(rng) : mutated(rng, enc);
    decode_or_clear_error<shape>(bytes);
    decode_or_clear_error<std::string>(bytes);
    decode_or_clear_error<std::int64_t>(bytes);
    decode_or_clear_error<std::vector<std::string>>(bytes);
    if (HasFailure()) {
      std::cout << "failed at iteration " << i << "\n";
      return;
    }
  }
}
