#pragma once

// Times in ms since the epoch, computed without overflow: a sleep of
// `milliseconds::max()` or a timeout of `hours::max()` means "never", and
// must never wrap around into the past (a wake-up at once).

#include <chrono>
#include <cstdint>
#include <limits>

namespace perdure::detail {

/// Returns `a + b` for b >= 0, saturated at the largest int64.
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  constexpr auto most = std::numeric_limits<std::int64_t>::max();
  return b > 0 && a > most - b ? most : a + b;
}

/// Returns `d` in whole ms, at least 0, saturated at the largest int64
/// (a duration_cast of `hours::max()` to ms would overflow).
template <class Rep, class Period>
constexpr std::int64_t
saturating_ms(std::chrono::duration<Rep, Period> d) noexcept {
  if (d <= d.zero())
    return 0;
  using wide = std::chrono::duration<long double, std::milli>;
  constexpr auto most = std::numeric_limits<std::int64_t>::max();
  if (std::chrono::duration_cast<wide>(d).count()
      >= static_cast<long double>(most))
    return most;
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

/// Returns now + `timeout` on the steady clock, saturated (a timeout of
/// `milliseconds::max()` means never).
inline std::chrono::steady_clock::time_point
saturating_deadline(std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  auto now = clock::now();
  auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
    clock::time_point::max() - now);
  return timeout >= room ? clock::time_point::max() : now + timeout;
}

} // namespace perdure::detail
