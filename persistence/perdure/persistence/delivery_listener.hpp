#pragma once

#include <functional>
#include <memory>
#include <string>

#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

/// Hears what other processes delivered to runs (awakeables resolved,
/// messages sent, cancellations) on a thread of its own: PostgreSQL LISTEN
/// on a connection of its own; on SQLite, which has no NOTIFY, a poll of
/// the notices table every 100 ms. Each `store::notify` payload arrives as one
/// call; `"*"` means "notices may have been missed" (after connecting or
/// reconnecting, and every few seconds in any case: a sender may crash
/// between its commit and its NOTIFY), so the receiver should look at the
/// store itself.
class delivery_listener {
public:
  using callback = std::function<void(const std::string& payload)>;

  virtual ~delivery_listener() = default;
};

/// Starts listening on the database of `opts`, calling `on_notice` on the
/// listener's thread.
std::unique_ptr<delivery_listener>
listen_for_deliveries(const store_options& opts,
                      delivery_listener::callback on_notice);

} // namespace perdure::persistence
