// Payload codec cost per step result, JSON (default) against binary.

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "perdure/persistence/codec.hpp"

namespace {

struct receipt {
  std::string order_id = "order-000042";
  long total_cents = 123456;
  std::vector<std::string> lines{"book", "pen", "paper"};

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(order_id), CEREAL_NVP(total_cents), CEREAL_NVP(lines));
  }
};

void round_trip(benchmark::State& state, perdure::persistence::encoding enc) {
  receipt r;
  for (auto _ : state) {
    auto bytes = perdure::persistence::encode(r, enc);
    auto back = perdure::persistence::decode<receipt>(bytes);
    benchmark::DoNotOptimize(back);
  }
}

void json_round_trip(benchmark::State& state) {
  round_trip(state, perdure::persistence::encoding::json);
}

void binary_round_trip(benchmark::State& state) {
  round_trip(state, perdure::persistence::encoding::binary);
}

} // namespace

BENCHMARK(json_round_trip);
BENCHMARK(binary_round_trip);
