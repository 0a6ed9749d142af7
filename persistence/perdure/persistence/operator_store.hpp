#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/run_listing.hpp"

namespace perdure::persistence {

/// One store-wide reading: `gauge` ("runs", "queue_depth",
/// "oldest_pending_ms", "passivated"), its two labels (status and version;
/// queue and status; none), its value.
struct store_gauge {
  std::string gauge;
  std::string label_a;
  std::string label_b;
  std::int64_t value = 0;
};

/// The store-wide readings, when and by whom they were last computed.
struct store_gauges {
  std::int64_t computed_at_ms = 0;
  std::string computed_by;
  std::vector<store_gauge> readings;
};

/// What operators read that no runtime needs: executors and queues as
/// the store holds them. One role of `store`.
class operator_store {
public:
  virtual ~operator_store() = default;

  /// Returns every executor row (live, stopped or lapsed), by id, with the
  /// PENDING runs each holds.
  virtual std::vector<executor_info> list_executors() = 0;

  /// Returns every queue a runtime registered, by name, with its limits.
  virtual std::vector<queue_info> list_queues() = 0;

  /// Returns the store-wide gauges (runs by status and version, queue
  /// depth, the oldest unended run, passivated runs), computed again by
  /// this caller first if `interval_ms` passed since anyone last did: one
  /// process at a time computes them (whoever comes first after the
  /// interval), every process reads them.
  virtual store_gauges refresh_store_gauges(std::int64_t now_ms,
                                            std::int64_t interval_ms,
                                            const std::string& by) = 0;
};

} // namespace perdure::persistence
