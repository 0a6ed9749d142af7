#pragma once

#include <chrono>
#include <cstdint>

namespace perdure {

/// How a failing step is retried. The delay before attempt n+1 is
/// `initial_delay * backoff^(n-1)`, capped at `max_delay`, with full jitter.
/// A `perdure::terminal_error` is never retried.
struct retry_policy {
  /// Attempts in all, the first included; 1 means no retry.
  std::int32_t max_attempts = 3;
  std::chrono::milliseconds initial_delay{100};
  double backoff = 2.0;
  std::chrono::milliseconds max_delay{10'000};
};

} // namespace perdure
