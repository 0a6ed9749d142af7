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

#include "perdure/persistence/records.hpp"
#include "perdure/run_listing.hpp"
#include "perdure/sql_session.hpp"

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
};

/// The durable state of Perdure: one interface, two real implementations
/// (PostgreSQL and SQLite), one conformance suite. An instance owns one
/// connection and is used by one thread at a time. Transient errors are
/// retried inside; what a method reports as written has committed.
/// Failures that retrying cannot fix throw `perdure::error`.
class store {
public:
  virtual ~store() = default;

  /// Returns "postgresql" or "sqlite".
  virtual const char* dialect() const noexcept = 0;

  /// Applies the versioned migrations this database has not seen yet.
  virtual void migrate() = 0;

  /// Returns the schema version after `migrate()`.
  virtual int schema_version() = 0;

  // -- runs -------------------------------------------------------------------

  /// Inserts `run` unless a run with its id exists; returns what is stored.
  virtual create_result create_run(const run_record& run) = 0;

  /// Creates `child`, a run started by run `child.parent_id` (owned by
  /// `parent`), in one transaction with the parent's fence check: a process
  /// that lost the parent creates nothing. Returns nothing if fenced, else
  /// what `create_run` returns.
  virtual std::optional<create_result> create_child(const fence& parent,
                                                    const run_record& child)
    = 0;

  /// Returns the run with id `id`, if any.
  virtual std::optional<run_record> get_run(std::string_view id) = 0;

  /// Takes over PENDING run `id` of `executor` as `claim_pending_runs` does
  /// for all of them (epoch + 1, so any other copy is fenced; the recovery
  /// counter + 1 if `count_attempt`), to bring it into memory: its wake-up
  /// time is cleared. Returns the run as it now is, or nothing if it is not
  /// a PENDING run of `executor` that `filter` lets it run.
  virtual std::optional<run_record> claim_run(std::string_view id,
                                              std::string_view executor,
                                              const claim_filter& filter,
                                              bool count_attempt)
    = 0;

  /// Takes over every PENDING run owned by `executor` that `filter` lets it
  /// run: bumps each run's epoch (fencing out any zombie) and returns the
  /// runs as they now are. The recovery counter goes up only for the runs
  /// that will run now (no wake-up time, or one not after `now_ms`): a run
  /// passivated across restarts is not being recovered again and again.
  virtual std::vector<run_record>
  claim_pending_runs(std::string_view executor, const claim_filter& filter,
                     std::int64_t now_ms)
    = 0;

  /// Records that run `run_id`, owned by `owner`, is out of memory until
  /// `wake_at_ms` (or clears it with nullopt). Returns false if fenced.
  virtual bool set_wake_at(const fence& owner, std::string_view run_id,
                           std::optional<std::int64_t> wake_at_ms)
    = 0;

  /// Ends a PENDING run as CANCELLED (no fence: cancellation comes from
  /// anywhere), and its PENDING descendants; marks the run's parent
  /// `delivered_while_passivated` if it is passivated. Returns the ids
  /// cancelled, empty if `run_id` was not PENDING.
  virtual std::vector<std::string> cancel_run(std::string_view run_id,
                                              std::int64_t at_ms)
    = 0;

  /// Returns one page of runs matching `filter`, newest first.
  virtual run_page list_runs(const run_filter& filter) = 0;

  // -- executors ----------------------------------------------------------------

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

  // -- awakeables ---------------------------------------------------------------

  /// Stores the outcome of awakeable `r.id` (created by journal entry
  /// `r.run_id`/`r.seq`, kind `awakeable`; `r.seq` -1: a promise of run
  /// `r.run_id`, which need only exist) and, if the run is passivated,
  /// marks it `delivered_while_passivated` so that recovery and the sweep
  /// bring it back. The first outcome stays.
  virtual resolve_result resolve(const resolution& r) = 0;

  /// Makes delivery `d` (a message, or a resolution as `resolve` stores
  /// it) and `checkpoint` (of run `checkpoint.run_id`, fenced by `owner`)
  /// durable in one transaction: a workflow's delivery happens once. One
  /// that cannot happen (no such run, an unknown or already completed id)
  /// is recorded as the checkpoint's terminal error. Returns the
  /// checkpoint as recorded (also when it was recorded before: an in-doubt
  /// commit retried), or nothing if the fence rejected it.
  virtual std::optional<journal_entry>
  deliver(const fence& owner, journal_entry checkpoint, const delivery& d) = 0;

  /// Returns the stored outcome of awakeable `id`, if any.
  virtual std::optional<resolution> get_resolution(std::string_view id) = 0;

  /// Tells every process listening on this database (`delivery_listener`)
  /// `payload`, after the current transaction. A no-op on SQLite.
  virtual void notify(std::string_view payload) = 0;

  /// Returns the PENDING runs of `executor` delivered to while passivated
  /// (`delivered_while_passivated`): a sweep revives those not in memory.
  virtual std::vector<std::string> awake_runs(std::string_view executor) = 0;

  // -- messages and events -----------------------------------------------------

  /// Queues `payload` for run `run_id` on `topic` and, if the run is
  /// passivated, marks it as `resolve` does. Returns false if there is no
  /// such run.
  virtual bool send_message(std::string_view run_id, std::string_view topic,
                            std::string_view payload, std::int64_t at_ms)
    = 0;

  /// Returns the first message to `run_id` on `topic` after message id
  /// `after`, if any.
  virtual std::optional<message> next_message(std::string_view run_id,
                                              std::string_view topic,
                                              std::int64_t after)
    = 0;

  /// Publishes event `key` = `value` of run `checkpoint.run_id` together
  /// with `checkpoint` (kind `event`, payload `value`), in one transaction,
  /// fenced. Returns the checkpoint as recorded (an earlier one at its index
  /// stands, and publishes nothing), or nothing if fenced.
  virtual std::optional<journal_entry> record_event(const fence& owner,
                                                    journal_entry checkpoint,
                                                    const std::string& key,
                                                    const std::string& value)
    = 0;

  /// Returns the value of event `key` of run `run_id`, if published.
  virtual std::optional<std::string> get_event(std::string_view run_id,
                                               std::string_view key)
    = 0;

  // -- journal ----------------------------------------------------------------

  /// Returns the journal of every run in `run_ids`, ordered by run and seq.
  /// A row Perdure cannot have written comes back `outcome::unreadable`
  /// (see `read_journal_row`) instead of failing the whole load.
  virtual std::vector<journal_entry>
  load_journals(const std::vector<std::string>& run_ids) = 0;

  /// Commits all of `batch` in one transaction (creations, appends and
  /// completions alike), each append and completion fenced. A completed
  /// run's passivated parent is marked `delivered_while_passivated` in the
  /// same transaction (it may be waiting for this end). A completion to the
  /// status the run already has is accepted (an in-doubt one sent again).
  virtual batch_result write_batch(const write_batch& batch) = 0;

  /// Runs `body` and then appends `checkpoint` (with the payload `body`
  /// returned) in one transaction, fenced by `owner`. If its index holds an
  /// outcome already (an attempt whose commit was in doubt, or another copy
  /// of the run), `body` does not run and that outcome is returned: it
  /// stands. Returns the checkpoint as recorded, or nothing if fenced.
  /// Exceptions thrown by `body` roll back and propagate.
  virtual std::optional<journal_entry>
  run_transaction(const fence& owner, journal_entry checkpoint,
                  const std::function<std::string(sql_session&)>& body)
    = 0;
};

/// Opens the store named by `opts.url`. Throws `perdure::error` on a bad URL
/// or when the database cannot be reached.
std::unique_ptr<store> open_store(const store_options& opts);

} // namespace perdure::persistence
