#include "perdure/detail/runtime/ids.hpp"

#include <unistd.h>

#include <cstdio>
#include <random>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/text.hpp"

namespace perdure::detail {

namespace {

/// Longest workflow name or id accepted.
constexpr std::size_t max_name_length = 255;

} // namespace

void check_name(std::string_view what, std::string_view name) {
  if (!persistence::is_valid_name(name, max_name_length))
    throw error(errc::invalid_argument,
                std::string{what} + " must be 1 to "
                  + std::to_string(max_name_length)
                  + " bytes of UTF-8 without NUL (got "
                  + std::to_string(name.size()) + " bytes)");
}

void check_key(std::string_view what, std::string_view name) {
  check_name(what, name);
  if (!persistence::is_valid_key(name, max_name_length))
    throw error(errc::invalid_argument,
                std::string{what}
                  + " must not contain the control characters 0x1E or 0x1F "
                    "(Perdure's separators of types, keys and idempotency "
                    "keys)");
}

/// Returns a fresh run id: 12 hex digits of milliseconds since the epoch,
/// then 20 random ones. Time-ordered ids land next to each other in the
/// journal's primary key, which keeps index inserts cheap.
std::string random_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char digits[] = "0123456789abcdef";
  std::string id(32, '0');
  auto time = static_cast<std::uint64_t>(now_ms());
  auto a = rng(), b = rng();
  for (int i = 0; i < 12; ++i)
    id[i] = digits[(time >> ((11 - i) * 4)) & 0xf];
  for (int i = 0; i < 16; ++i)
    id[12 + i] = digits[(a >> (i * 4)) & 0xf];
  for (int i = 0; i < 4; ++i)
    id[28 + i] = digits[(b >> (i * 4)) & 0xf];
  return id;
}

std::string process_executor_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof host, "host");
  return std::string{host} + "-" + std::to_string(::getpid()) + "-"
         + random_id().substr(20);
}

} // namespace perdure::detail
