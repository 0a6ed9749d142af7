#pragma once

#include <memory>

#include "perdure/client.hpp"

namespace perdure::detail {

/// Lets Perdure's other libraries (queues) reach a client's runtime.
struct client_access {
  static const std::shared_ptr<runtime_impl>& impl(const client& c) {
    return c.impl_;
  }
};

} // namespace perdure::detail
