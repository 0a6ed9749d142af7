#pragma once

// What the store's retry loop and the journal writer record, as series a
// runtime made (perdure/detail/metrics/runtime_metrics.hpp). Null members
// record nothing: tools and tests run without.

namespace perdure::telemetry {
class counter;
class histogram;
} // namespace perdure::telemetry

namespace perdure::persistence {

struct store_metrics {
  /// A failed attempt tried again on the same connection.
  telemetry::counter* retries = nullptr;
  /// ... on a new connection.
  telemetry::counter* reconnects = nullptr;
  /// ... after the database reported it is full.
  telemetry::counter* full = nullptr;
  /// An operation given up once the retry budget was spent.
  telemetry::counter* unavailable = nullptr;
  /// A group commit's transaction time (s) and its writes.
  telemetry::histogram* commit_seconds = nullptr;
  telemetry::histogram* batch_writes = nullptr;
};

} // namespace perdure::persistence
