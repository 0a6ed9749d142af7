#pragma once

// The console's files as the build embeds them (embed_assets.cmake).

#include <cstddef>
#include <string_view>

namespace perdure::console::detail {

struct embedded {
  std::string_view name;
  const unsigned char* data;
  std::size_t size;
};

extern const embedded assets[];
extern const std::size_t asset_count;

} // namespace perdure::console::detail
