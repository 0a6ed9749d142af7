#pragma once

#include <memory>

#include "perdure/client.hpp"

namespace perdure::detail {

/// Lets Perdure's other libraries (queues) reach a client's runtime.
struct client_access {
  static const std::shared_ptr<runtime_impl>& impl(const client& c) {
    return c.impl_;
  }

  /// Starts workflow `name` with `input` already encoded.
  static std::string start_encoded(client& c, std::string_view name,
                                   std::string input, start_options opts) {
    return c.start_run(name, std::move(input), std::move(opts));
  }
};

} // namespace perdure::detail
