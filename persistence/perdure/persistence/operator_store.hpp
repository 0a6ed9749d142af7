#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/run_listing.hpp"

namespace perdure::persistence {

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
};

} // namespace perdure::persistence
