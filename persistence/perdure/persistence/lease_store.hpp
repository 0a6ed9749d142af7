#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::persistence {

/// Executor leases and the takeover of dead executors' runs. One role of
/// `store`.
class lease_store {
public:
  virtual ~lease_store() = default;

  /// Takes executor id `r.executor` for this process: on PostgreSQL a
  /// session advisory lock on this store's connection (held until
  /// `release_lease` or the connection dies, so a killed holder's death is
  /// seen at once) and a row with a heartbeat; on SQLite a lock on the
  /// file (one runtime per file). Bumps and returns the lease epoch, which
  /// fences every write of a previous holder. Throws
  /// `errc::executor_in_use` if a live process holds it, changing nothing.
  virtual std::int64_t acquire_lease(const lease_request& r) = 0;

  /// The heartbeat of lease `executor`/`epoch`: returns nothing if it was
  /// lost (another process took the id or declared it lapsed), else the
  /// ids of other executors whose leases lapsed (their holder's
  /// connection is gone, or it missed heartbeats for its timeout) and
  /// whether this connection holds the id's lock.
  virtual std::optional<lease_renewal> renew_lease(std::string_view executor,
                                                   std::int64_t epoch)
    = 0;

  /// Declares executor `id` lapsed if it still is (epoch + 1: its holder's
  /// writes are fenced from now on); returns whether this call did.
  virtual bool lapse_executor(std::string_view id) = 0;

  /// Gives lease `executor`/`epoch` up (a clean stop): its PENDING runs
  /// may be taken over by other processes at once.
  virtual void release_lease(std::string_view executor, std::int64_t epoch)
    = 0;

  /// Moves PENDING runs that no live executor holds (their executor
  /// lapsed or stopped, or a client started them) and that `filter` lets
  /// `executor` run, to `executor` (epoch + 1): run `only` if given, else
  /// this process's share (the runs to take divided by the live
  /// executors). Returns them as they now are; the recovery counter goes
  /// up as in `claim_pending_runs` for runs that had run before.
  virtual std::vector<run_record>
  take_over(std::string_view executor, const claim_filter& filter,
            std::optional<std::string_view> only, std::int64_t now_ms)
    = 0;

  /// Gives up the PENDING runs of `executor` that `filter` does not let it
  /// run (an executor id restarted without their workflow, or at another
  /// app version): they become unowned, for a process that can run them
  /// (epoch + 1). Returns how many.
  virtual std::int64_t release_unclaimable(std::string_view executor,
                                           const claim_filter& filter)
    = 0;

  /// Returns how many PENDING runs of `executor`, of lapsed or stopped
  /// executors, or started by clients, `filter` does not let it run.
  virtual std::int64_t count_unclaimable(std::string_view executor,
                                         const claim_filter& filter)
    = 0;
};

} // namespace perdure::persistence
