#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

/// Hears what other processes delivered to runs (awakeables resolved,
/// messages sent, cancellations) on a thread of its own: PostgreSQL LISTEN
/// on a connection of its own; on SQLite, which has no NOTIFY, a poll of
/// the notices table every 100 ms. Each `store::notify` payload arrives as one
/// call. The listener subscribes before its constructor returns (when the
/// database is there), so nothing committed after that is missed unless its
/// sender crashed between commit and notice. Two payloads are its own:
/// `missed_notices` after connecting or reconnecting (anything sent before
/// may have been missed: look at everything waiting, in memory too) and
/// `sweep_notice` every few seconds (a sender may have crashed before its
/// notice: look at the store for what is passivated).
class delivery_listener {
public:
  static constexpr std::string_view missed_notices = "!";
  static constexpr std::string_view sweep_notice = "*";

  using callback = std::function<void(const std::string& payload)>;

  virtual ~delivery_listener() = default;
};

/// Starts listening on the database of `opts`, calling `on_notice` on the
/// listener's thread.
std::unique_ptr<delivery_listener>
listen_for_deliveries(const store_options& opts,
                      delivery_listener::callback on_notice);

} // namespace perdure::persistence
