#pragma once

#include "perdure/queue_stats.hpp"

namespace perdure::queues {

/// What `queues::stats` returns (defined with the stores that count it).
using perdure::partition_stats;
using perdure::queue_limits;
using perdure::queue_stats;

} // namespace perdure::queues
