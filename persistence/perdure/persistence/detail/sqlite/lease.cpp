// The executor lease on SQLite: one runtime per file, held by a file lock
// (flock), its epoch in the executors table.

#include "perdure/persistence/sqlite_store.hpp"
#include "perdure/persistence/detail/sqlite/sqlite_internal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

using detail::run_columns;
using namespace detail::sqlite;

std::int64_t sqlite_store::acquire_lease(const lease_request& r) {
  if (lease_fd_ < 0) {
    // One runtime per file: a lock on a file beside it (never on the
    // database file itself, whose POSIX locks SQLite owns), released by
    // the kernel when the process dies.
    auto lock_path = path_ + ".runtime-lock";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw perdure::error(errc::store_unavailable,
                           "cannot open '" + lock_path + "'");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      throw perdure::error(
        errc::executor_in_use,
        "another runtime uses SQLite file '" + path_
          + "' (one runtime per file; use perdure::client in processes "
            "that only start and signal work, or PostgreSQL for several "
            "runtimes)");
    }
    lease_fd_ = fd;
  }
  return in_transaction([&] {
    auto now = wall_ms();
    prepare("INSERT INTO executors (id) VALUES (?1) ON CONFLICT (id) DO "
            "NOTHING")
      .bind(1, r.executor)
      .run();
    // Whoever else looked live died: this process holds the file.
    prepare("UPDATE executors SET epoch = epoch + 1, state = 'lapsed' WHERE "
            "state = 'live' AND id <> ?1")
      .bind(1, r.executor)
      .run();
    prepare("UPDATE executors SET epoch = epoch + 1, state = 'live', instance "
            "= ?2, app_version = ?3, lease_ms = ?4, heartbeat_at = ?5, "
            "started_at = ?5 WHERE id = ?1")
      .bind(1, r.executor)
      .bind(2, r.instance)
      .bind(3, r.app_version)
      .bind(4, r.timeout_ms)
      .bind(5, now)
      .run();
    auto& sel = prepare("SELECT epoch FROM executors WHERE id = ?1");
    sel.bind(1, r.executor);
    sel.step();
    auto epoch = sel.int64(0);
    sel.reset();
    return epoch;
  });
}

std::optional<lease_renewal>
sqlite_store::renew_lease(std::string_view executor, std::int64_t epoch) {
  return with_retry([&]() -> std::optional<lease_renewal> {
    prepare("UPDATE executors SET heartbeat_at = ?3 WHERE id = ?1 AND epoch = "
            "?2 AND state = 'live'")
      .bind(1, executor)
      .bind(2, epoch)
      .bind(3, wall_ms())
      .run();
    if (sqlite3_changes(db_) != 1)
      return std::nullopt;
    return lease_renewal{}; // no other live runtime on this file
  });
}

bool sqlite_store::lapse_executor(std::string_view) {
  return false; // nobody else can hold a lease on this file
}

void sqlite_store::release_lease(std::string_view executor,
                                 std::int64_t epoch) {
  with_retry([&] {
    prepare("UPDATE executors SET epoch = epoch + 1, state = 'stopped' WHERE "
            "id = ?1 AND epoch = ?2")
      .bind(1, executor)
      .bind(2, epoch)
      .run();
    return 0;
  });
  if (lease_fd_ >= 0) {
    ::close(lease_fd_);
    lease_fd_ = -1;
  }
}

} // namespace perdure::persistence
