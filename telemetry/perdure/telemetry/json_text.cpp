#include "perdure/telemetry/json_text.hpp"

#include <cstdio>

namespace perdure::telemetry {

namespace {

/// The length of the well-formed UTF-8 sequence at `s[i]` (RFC 3629: no
/// overlong forms, no surrogates, at most U+10FFFF), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  auto b = [&](std::size_t k) {
    return static_cast<unsigned char>(s[i + k]);
  };
  auto cont = [&](std::size_t k) {
    return i + k < s.size() && (b(k) & 0xC0) == 0x80;
  };
  auto c = b(0);
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2))
      return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F))
      return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3))
      return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F))
      return 0;
    return 4;
  }
  return 0;
}

} // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    // The run of characters that go as they are, in one append (ids and
    // names are nothing else).
    auto plain = i;
    while (plain < s.size()) {
      auto p = static_cast<unsigned char>(s[plain]);
      if (p < 0x20 || p >= 0x80 || p == '"' || p == '\\')
        break;
      ++plain;
    }
    if (plain > i) {
      out.append(s.data() + i, plain - i);
      i = plain;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      auto n = utf8_length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD"; // U+FFFD
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

} // namespace perdure::telemetry
