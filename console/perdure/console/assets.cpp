#include "perdure/console/assets.hpp"

#include "perdure/console/detail/embedded.hpp"

namespace perdure::console {

namespace {

std::string_view content_type_of(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size()
           && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html"))
    return "text/html; charset=utf-8";
  if (ends(".js"))
    return "text/javascript; charset=utf-8";
  if (ends(".css"))
    return "text/css; charset=utf-8";
  return "application/octet-stream";
}

} // namespace

std::optional<asset> find(std::string_view path) {
  if (path == "/" || path.empty())
    path = "/index.html";
  if (path.front() == '/')
    path.remove_prefix(1);
  for (std::size_t i = 0; i < detail::asset_count; ++i) {
    auto& a = detail::assets[i];
    if (a.name == path)
      return asset{{reinterpret_cast<const char*>(a.data), a.size},
                   content_type_of(a.name)};
  }
  return std::nullopt;
}

} // namespace perdure::console
