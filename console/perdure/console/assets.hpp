#pragma once

#include <optional>
#include <string_view>

namespace perdure::console {

/// One static file of the web console.
struct asset {
  std::string_view body;
  /// Its `Content-Type`.
  std::string_view content_type;
};

/// Returns the file served at `path` (`/` is `index.html`), if any.
std::optional<asset> find(std::string_view path);

} // namespace perdure::console
