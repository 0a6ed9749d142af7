#pragma once

// What the SQLite store's files share: its failure classification, its
// retry loop and write transaction, the row adapter of the shared
// decoders, and a few SQL fragments.

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "perdure/persistence/detail/retry.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/sql_row.hpp"
#include "perdure/persistence/detail/sqlite/statement.hpp"
#include "perdure/persistence/sqlite_store.hpp"

namespace perdure::persistence {

namespace detail::sqlite {

inline detail::failure_kind classify(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const sqlite_failure& ex) {
    auto primary = ex.code() & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
      return detail::failure_kind::retry;
    if (primary == SQLITE_FULL)
      return detail::failure_kind::full;
  } catch (...) {
  }
  return detail::failure_kind::permanent;
}

/// Returns the time of day in ms (SQLite has no server clock to ask).
inline std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// Whether the holder of key row `objects` has no live lease.
inline constexpr const char* holder_gone
  = "(objects.executor = '' OR NOT EXISTS (SELECT 1 FROM executors e WHERE e.id = "
    "objects.executor AND e.state = 'live'))";

} // namespace detail::sqlite

/// The current row of a stepped statement, for the shared decoders.
class sqlite_store::row final : public detail::sql_row {
public:
  explicit row(statement& st) : st_(st) {}

  bool is_null(int col) const override {
    return st_.is_null(col);
  }
  std::int64_t int64(int col) const override {
    return st_.int64(col);
  }
  std::string text(int col) const override {
    return st_.text(col);
  }
  std::string bytes(int col) const override {
    return st_.text(col);
  }

private:
  statement& st_;
};

template <class F>
auto sqlite_store::with_retry(F&& attempt) {
  try {
    // Out of space: before the retry, the log is checkpointed into the
    // database and truncated, which gives its space back when the room
    // left lets the database take its pages (a log that only grows until
    // its next checkpoint would fill any room returned before then); and
    // the first commit after the disk filled truncates it once more (see
    // in_transaction).
    return detail::with_retry(retry_budget_, attempt, detail::sqlite::classify, [this] {
      was_full_ = true;
      // Not waiting long for readers: the retry budget is what may wait.
      sqlite3_busy_timeout(db_, 50);
      truncate_log();
      sqlite3_busy_timeout(db_, 5000);
    }, metrics_);
  } catch (const sqlite_failure& ex) {
    throw perdure::error(errc::store_error, ex.what());
  }
}

template <class F>
auto sqlite_store::in_transaction(F&& body) {
  return with_retry([&] {
    // IMMEDIATE takes the write lock up front: no deadlocking upgrade later.
    exec("BEGIN IMMEDIATE");
    try {
      auto result = body();
      exec("COMMIT");
      if (std::exchange(was_full_, false))
        truncate_log(); // one try: it may wait for readers (busy timeout)
      return result;
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  });
}

} // namespace perdure::persistence
