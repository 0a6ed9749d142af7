#pragma once

// The retention scenario of perdure-bench (retention_bench.cpp).

#include "bench_support.hpp"

namespace perdure::bench {

/// `--workflows` ended runs (default 200 000) collected while a steady
/// workload runs: deleted per second and the workload's step p99 against
/// before and after; with `--rounds N`, N minutes of the workload with
/// retention on and each table's bytes after the first minute and at the
/// end.
void retention(const options& o);

} // namespace perdure::bench
