#pragma once

#include <chrono>
#include <cstdint>

namespace perdure::detail {

/// Returns wall-clock milliseconds since the epoch, as stored in the tables.
inline std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

} // namespace perdure::detail
