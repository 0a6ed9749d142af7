#include "perdure/telemetry/trace.hpp"

#include <algorithm>
#include <chrono>
#include <random>

namespace perdure::telemetry {

namespace {

template <std::size_t N>
bool all_zero(const std::array<std::uint8_t, N>& a) {
  return std::all_of(a.begin(), a.end(), [](auto b) { return b == 0; });
}

template <std::size_t N>
std::string to_hex(const std::array<std::uint8_t, N>& a) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(2 * N, '0');
  for (std::size_t i = 0; i < N; ++i) {
    out[2 * i] = digits[a[i] >> 4];
    out[2 * i + 1] = digits[a[i] & 0xf];
  }
  return out;
}

int nibble(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1; // upper case is not allowed by the spec
}

template <std::size_t N>
bool from_hex(std::string_view text, std::array<std::uint8_t, N>& out) {
  if (text.size() != 2 * N)
    return false;
  for (std::size_t i = 0; i < N; ++i) {
    auto hi = nibble(text[2 * i]);
    auto lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::uint64_t mix(std::uint64_t x) { // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t hash(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ mix(seed); // FNV-1a, seeded
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return mix(h);
}

void put(std::uint8_t* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<std::uint8_t>(v >> (56 - 8 * i));
}

std::mt19937_64& generator() {
  thread_local std::mt19937_64 gen{[] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }()};
  return gen;
}

} // namespace

bool span_context::valid() const noexcept {
  return !all_zero(trace) && !all_zero(span);
}

std::string span_context::traceparent() const {
  static constexpr char digits[] = "0123456789abcdef";
  return "00-" + to_hex(trace) + "-" + to_hex(span) + "-"
         + digits[flags >> 4] + digits[flags & 0xf];
}

std::optional<span_context> span_context::parse(std::string_view text) {
  // version "-" trace-id "-" parent-id "-" trace-flags
  if (text.size() < 55 || text[2] != '-' || text[35] != '-'
      || text[52] != '-')
    return std::nullopt;
  std::array<std::uint8_t, 1> version{}, flags{};
  span_context c;
  if (!from_hex(text.substr(0, 2), version) || version[0] == 0xff
      || !from_hex(text.substr(3, 32), c.trace)
      || !from_hex(text.substr(36, 16), c.span)
      || !from_hex(text.substr(53, 2), flags))
    return std::nullopt;
  // Version 00 is exactly 55 characters; later versions may add fields
  // after a '-'.
  if ((version[0] == 0 && text.size() != 55)
      || (text.size() > 55 && text[55] != '-'))
    return std::nullopt;
  c.flags = flags[0];
  if (!c.valid())
    return std::nullopt;
  return c;
}

std::string hex(const trace_id& id) {
  return to_hex(id);
}

std::string hex(const span_id& id) {
  return to_hex(id);
}

trace_id random_trace_id() {
  trace_id id{};
  while (all_zero(id)) {
    put(id.data(), generator()());
    put(id.data() + 8, generator()());
  }
  return id;
}

span_id random_span_id() {
  span_id id{};
  while (all_zero(id))
    put(id.data(), generator()());
  return id;
}

trace_id derived_trace_id(std::string_view text) {
  trace_id id{};
  put(id.data(), hash(text, 1));
  put(id.data() + 8, hash(text, 2));
  if (all_zero(id))
    id[15] = 1;
  return id;
}

span_id derived_span_id(std::string_view text) {
  span_id id{};
  put(id.data(), hash(text, 3));
  if (all_zero(id))
    id[7] = 1;
  return id;
}

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace perdure::telemetry
