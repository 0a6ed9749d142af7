#pragma once

// The operators scenario of perdure-bench (operators_bench.cpp).

#include "bench_support.hpp"

namespace perdure::bench {

/// `--workflows` ended runs (default 1 000 000, 1 % ERROR) and a tenth as
/// many PENDING ones: the first page of ERROR runs, a bulk cancel of the
/// PENDING ones by filter, and the document of a 10 000-step run, as the
/// `perdure` CLI reads and does them.
void operators(const options& o);

} // namespace perdure::bench
