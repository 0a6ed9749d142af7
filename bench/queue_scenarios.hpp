#pragma once

// The queue scenarios of perdure-bench (queue_bench.cpp).

#include "bench_support.hpp"

namespace perdure::bench {

/// `--workflows` trivial items (default 5000) through one queue with
/// `--in-flight` workers (default 10), enqueued first: items per second
/// from the first claim to the last end.
void queue_throughput(const options& o);

/// `--workflows` trivial items (default 20000) over `--steps` partitions
/// (default 1000) of a queue with a partition limit of 1 and `--in-flight`
/// workers (default 16), enqueued before the runtime starts; `--mode busy`:
/// the first half in one partition. Items per second of the partitions
/// other than the busy one, from the start to their last start: what a
/// claim costs with many partitions.
void queue_partitions(const options& o);

/// `--workflows` items (default 1000) through a queue limited to
/// `--steps` starts per second (default 100), by two runtimes on
/// PostgreSQL (one on SQLite): achieved starts per second and the most in
/// any one-second window, by when each item's code began.
void queue_rate(const options& o);

/// One runtime with 5 queues registered and nothing to do: the statements
/// per second it sends while idle (PostgreSQL: counted by the server).
void queue_idle(const options& o);

} // namespace perdure::bench
