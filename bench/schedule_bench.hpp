#pragma once

// The schedule_lateness scenario of perdure-bench (schedule_bench.cpp).

#include "bench_support.hpp"

namespace perdure::bench {

/// `--workflows` schedules (default 1 000), each firing once a minute at
/// its own second (schedule i at second i % 60: about 17 ticks a second,
/// as many schedules spread over a minute fire), fired by one ticker for
/// `--steps` seconds (default 65, every schedule at least once): from
/// each tick's time to its run's body starting, p50 and p99.
void schedule_lateness(const options& o);

} // namespace perdure::bench
