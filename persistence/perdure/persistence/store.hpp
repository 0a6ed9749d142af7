#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/persistence/delivery_store.hpp"
#include "perdure/persistence/journal_store.hpp"
#include "perdure/persistence/lease_store.hpp"
#include "perdure/persistence/object_store.hpp"
#include "perdure/persistence/operator_store.hpp"
#include "perdure/persistence/queue_store.hpp"
#include "perdure/persistence/records.hpp"
#include "perdure/persistence/run_store.hpp"
#include "perdure/persistence/retention_store.hpp"
#include "perdure/persistence/schedule_store.hpp"
#include "perdure/persistence/store_metrics.hpp"

namespace spdlog {
class logger;
}

namespace perdure::persistence {

/// Where and how to connect.
struct store_options {
  /// `postgresql://...` (any libpq URI) or `sqlite:///abs/path.db` /
  /// `sqlite://relative.db`.
  std::string url = "sqlite://perdure.db";
  /// PostgreSQL schema holding Perdure's tables.
  std::string schema = "perdure";
  /// How long transient errors (lost connection, server restart,
  /// serialization failure, busy database) are retried before giving up.
  std::chrono::milliseconds retry_budget{30'000};
  /// The lease epoch of the runtime these connections write for (see
  /// `acquire_lease`), read at every fenced write: once a takeover bumped
  /// it, every write fails its fence. Null (or 0): not checked (tools and
  /// tests that write without a lease).
  std::shared_ptr<const std::atomic<std::int64_t>> lease_epoch;
  /// PostgreSQL: the server ends a session of these connections that sits
  /// inside a transaction for longer than this (0: never). A process
  /// stalled mid-transaction (a transactional step, a batch) holds locks
  /// on its runs' rows, which a takeover skips: this bounds how long.
  std::chrono::milliseconds idle_transaction_timeout{0};
  /// Where retries and spent budgets are counted (null: nowhere); must
  /// outlive the store.
  const store_metrics* metrics = nullptr;
  /// Where the persistence layer logs (null: spdlog's default logger).
  std::shared_ptr<spdlog::logger> logger;
};

/// The durable state of Perdure: one interface made of roles (runs,
/// leases, deliveries, journal, objects, queues, operators, schedules), two real
/// implementations (PostgreSQL and SQLite), one conformance suite. An
/// instance owns one connection and is used by one thread at a time.
/// Transient errors are retried inside; what a method reports as written
/// has committed. Failures that retrying cannot fix throw `perdure::error`.
class store : public run_store,
              public lease_store,
              public delivery_store,
              public journal_store,
              public object_store,
              public queue_store,
              public operator_store,
              public schedule_store,
              public retention_store {
public:
  ~store() override = default;

  /// Returns "postgresql" or "sqlite".
  virtual const char* dialect() const noexcept = 0;

  /// Applies the versioned migrations this database has not seen yet.
  virtual void migrate() = 0;

  /// Returns the schema version after `migrate()`.
  virtual int schema_version() = 0;

  /// Counts retries and spent budgets on `m` from now on (null: nowhere);
  /// `m` must outlive this store.
  void count_on(const store_metrics* m) noexcept { metrics_ = m; }

protected:
  const store_metrics* metrics_ = nullptr;
};

/// Opens the store named by `opts.url`. Throws `perdure::error` on a bad URL
/// or when the database cannot be reached.
std::unique_ptr<store> open_store(const store_options& opts);

} // namespace perdure::persistence
