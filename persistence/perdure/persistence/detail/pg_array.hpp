#pragma once

// libpqxx 6 cannot pass a std::vector as an array parameter, so batches are
// sent as array literals ('{"a","b",NULL}') and unnest()ed by the server.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perdure::persistence::detail {

/// Returns `bytes` as lowercase hex, for `decode(x, 'hex')` on the server.
std::string to_hex(std::string_view bytes);

/// Builds array literals element by element.
class pg_array {
public:
  /// Appends a quoted, escaped element.
  pg_array& add(std::string_view x);

  /// Appends `x` or NULL.
  pg_array& add_opt(const std::optional<std::string>& x);

  /// Appends a number.
  pg_array& add(long long x);

  /// Returns the literal.
  std::string str() const {
    return "{" + body_ + "}";
  }

private:
  void separate();

  std::string body_;
};

} // namespace perdure::persistence::detail
