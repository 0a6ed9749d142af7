#include "perdure/persistence/text.hpp"

namespace perdure::persistence {

namespace {

/// Returns the length of the valid UTF-8 sequence at `x[i]`, or 0.
std::size_t utf8_length(std::string_view x, std::size_t i) {
  auto c = static_cast<unsigned char>(x[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3
                                : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || c == 0 || i + n > x.size())
    return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(x[i + k]) >> 6) != 0x2)
      return 0;
  return n;
}

} // namespace

std::string valid_text(std::string_view x) {
  std::string result;
  result.reserve(x.size());
  for (std::size_t i = 0; i < x.size();) {
    if (auto n = utf8_length(x, i); n > 0) {
      result.append(x.substr(i, n));
      i += n;
    } else {
      result += '?';
      ++i;
    }
  }
  return result;
}

bool is_valid_name(std::string_view x, std::size_t max_bytes) {
  if (x.empty() || x.size() > max_bytes)
    return false;
  for (std::size_t i = 0; i < x.size();) {
    auto n = utf8_length(x, i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

bool is_valid_key(std::string_view x, std::size_t max_bytes) {
  return is_valid_name(x, max_bytes)
         && x.find_first_of("\x1e\x1f") == std::string_view::npos;
}

} // namespace perdure::persistence
