#pragma once

// The observability_overhead scenario of perdure-bench
// (observability_bench.cpp).

#include "bench_support.hpp"

namespace perdure::bench {

/// Steps/s (`--workflows` runs of `--steps` steps, all in flight) and a
/// lone run's step latency with metrics on and off, alternating for
/// `--rounds` rounds (default 3) in one process; then a `/metrics` scrape
/// with 1 000 workflow names.
void observability_overhead(const options& o);

} // namespace perdure::bench
