#include "perdure/persistence/detail/pg_array.hpp"

namespace perdure::persistence::detail {

std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string result;
  result.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    result += digits[c >> 4];
    result += digits[c & 0x0f];
  }
  return result;
}

void pg_array::separate() {
  if (!body_.empty())
    body_ += ',';
}

pg_array& pg_array::add(std::string_view x) {
  separate();
  body_ += '"';
  for (char c : x) {
    if (c == '"' || c == '\\')
      body_ += '\\';
    body_ += c;
  }
  body_ += '"';
  return *this;
}

pg_array& pg_array::add_opt(const std::optional<std::string>& x) {
  if (!x) {
    separate();
    body_ += "NULL";
    return *this;
  }
  return add(std::string_view{*x});
}

pg_array& pg_array::add(long long x) {
  separate();
  body_ += std::to_string(x);
  return *this;
}

} // namespace perdure::persistence::detail
