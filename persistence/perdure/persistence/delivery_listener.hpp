#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

/// Hears what other processes delivered to runs (awakeables resolved,
/// messages sent, cancellations) on a thread of its own: PostgreSQL LISTEN
/// on a connection of its own; on SQLite, which has no NOTIFY, a poll of
/// the notices table every 100 ms. Each `store::notify` payload that parses
/// arrives as one call (text no Perdure wrote is dropped). The listener
/// subscribes before its constructor returns (when the database is there),
/// so nothing committed after that is missed unless its sender crashed
/// between commit and notice. Two notices are its own: `missed` after
/// connecting or reconnecting and `sweep_due` every few seconds (see
/// notice.hpp).
class delivery_listener {
public:
  using callback = std::function<void(const notice&)>;

  virtual ~delivery_listener() = default;
};

/// Starts listening on the database of `opts`, calling `on_notice` on the
/// listener's thread.
std::unique_ptr<delivery_listener>
listen_for_deliveries(const store_options& opts,
                      delivery_listener::callback on_notice);

} // namespace perdure::persistence
