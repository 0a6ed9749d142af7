#pragma once

#include <memory>

#include "perdure/client.hpp"

namespace perdure::detail {

class queue_hooks;
struct runtime_services;

/// What Perdure's other libraries (queues) reach of a client's runtime:
/// its services view (see detail/runtime/services.hpp), never the runtime.
struct client_access {
  static runtime_services& services(const client& c);

  /// Installs the queues of a runtime (before start).
  static void set_queue_hooks(const client& c,
                              std::shared_ptr<queue_hooks> hooks);

  /// Waits up to `timeout` for run `id` to end (`errc::timeout` if it
  /// did not): its stored outcome.
  static run_outcome await(const client& c, const std::string& id,
                           std::chrono::milliseconds timeout);

  /// Starts workflow `name` with `input` already encoded.
  static std::string start_encoded(client& c, std::string_view name,
                                   std::string input, start_options opts) {
    return c.start_run(name, std::move(input), std::move(opts));
  }
};

} // namespace perdure::detail
