#pragma once

#include <algorithm>
#include <string>

namespace perdure::persistence::detail {

/// Returns the NOTIFY channel of deliveries for Perdure schema `schema`
/// (a channel per schema: two deployments on one database do not mix).
inline std::string delivery_channel(const std::string& schema) {
  auto channel = "perdure_" + schema;
  channel.resize(std::min<std::size_t>(channel.size(), 63)); // NAMEDATALEN
  return channel;
}

} // namespace perdure::persistence::detail
