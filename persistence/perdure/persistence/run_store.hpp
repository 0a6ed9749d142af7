#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/persistence/records.hpp"
#include "perdure/run_listing.hpp"

namespace perdure::persistence {

/// The runs table: creating, reading, claiming, cancelling and listing
/// runs. One role of `store`.
class run_store {
public:
  virtual ~run_store() = default;

  /// Inserts `run` unless a run with its id exists; returns what is stored.
  virtual create_result create_run(const run_record& run) = 0;

  /// Creates `child`, a run started by run `child.parent_id` (owned by
  /// `parent`), in one transaction with the parent's fence check: a process
  /// that lost the parent creates nothing. Returns nothing if fenced, else
  /// what `create_run` returns. With `child.undo_of`, the new run is that
  /// saga's undo (see `run_record::undo_of`), set up in the same
  /// transaction.
  virtual std::optional<create_result> create_child(const fence& parent,
                                                    const run_record& child)
    = 0;

  /// Returns the run with id `id`, if any.
  virtual std::optional<run_record> get_run(std::string_view id) = 0;

  /// Returns those of runs `ids` that exist, in no particular order (one
  /// statement on PostgreSQL).
  virtual std::vector<run_record>
  get_runs(const std::vector<std::string>& ids) = 0;

  /// Takes PENDING run `id` of `executor` into memory: its wake-up time is
  /// cleared, the recovery counter + 1 if `count_attempt`, and with
  /// `new_epoch` the epoch + 1 as `claim_pending_runs` does (any other copy
  /// is fenced: for a run whose actor was lost with writes maybe in
  /// flight). Without it the epoch stays (a passivated run woken: no other
  /// copy exists, and one this process is bringing in at that epoch
  /// meanwhile stays the only one). Returns the run as it now is, or
  /// nothing if it is not a PENDING run of `executor` that `filter` lets it
  /// run.
  virtual std::optional<run_record> claim_run(std::string_view id,
                                              std::string_view executor,
                                              const claim_filter& filter,
                                              bool count_attempt,
                                              bool new_epoch)
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

  /// Sets run `run_id`, owned by `owner`, BLOCKED: its code no longer
  /// replays its journal (`why`: where and how). `code_since_ms`: when the
  /// process that met it started (`claim_blocked` of processes started
  /// later tries it again). Returns false if fenced.
  virtual bool block_run(const fence& owner, std::string_view run_id,
                         std::string_view why, std::int64_t code_since_ms,
                         std::int64_t at_ms)
    = 0;

  /// Gives run `run_id`, owned by `owner`, up to a process that can run it
  /// (it took a patch this one's code does not know): PENDING with no
  /// owner, its epoch moved on, the runtimes told (run_created, on
  /// commit). Returns false if fenced.
  virtual bool release_run(const fence& owner, std::string_view run_id) = 0;

  /// Notes that a process of app `version` is alive at `at_ms` (its
  /// first and last sighting, for `versions`).
  virtual void note_version(std::string_view version, std::int64_t at_ms) = 0;
  /// Returns every app version seen or carried by unended work (see
  /// `version_report`), by version.
  virtual std::vector<version_report> versions() = 0;
  /// Re-stamps the PENDING and BLOCKED runs (and queue items, ENQUEUED or
  /// PENDING) of app version `from` with `to`: PENDING ones no live process
  /// holds lose their owner (a process of `to` adopts them), BLOCKED ones may be tried by any process of
  /// `to`; every process is told. Not object invocations (their key's
  /// owner runs them). Returns how many.
  /// Each run moved gets a `move` event saying so, with `reason`.
  virtual std::int64_t move_runs(std::string_view from, std::string_view to,
                                 std::int64_t at_ms, std::string_view reason)
    = 0;

  /// Something done to a run from outside its code (resumed, forked,
  /// moved), when, and the operator's reason (see `run_events`).
  struct run_event {
    std::int64_t at_ms = 0;
    std::int32_t before_seq = 0; ///< the journal index it came before
    std::string kind;   ///< `resume`, `fork`, `forked`, `move`
    std::string detail; ///< what was done, e.g. what a resume forgot
    std::string reason; ///< why, as the operator said (may be empty)
  };
  /// Returns run `run_id`'s events, oldest first.
  virtual std::vector<run_event> run_events(std::string_view run_id) = 0;

  /// Where a fork starts (see `fork_run`).
  struct fork_request {
    std::string source_id;
    std::string new_id;
    /// The first journal index not copied; or the first step (or
    /// transaction) named so; or the last one that failed; none of the
    /// three: the whole journal.
    std::optional<std::int32_t> from_step;
    std::optional<std::string> from_step_name;
    bool from_last_failure = false;
    std::optional<std::string> app_version;
    std::int64_t at_ms = 0;
    /// Recorded with the fork on both runs (`run_events`).
    std::string reason;
  };
  struct fork_outcome {
    enum class result { forked, not_found, id_taken, refused };
    result what = result::not_found;
    std::string why;       ///< refused: why, and what to do
    std::int32_t from = 0; ///< the first index not copied
    std::int64_t copied = 0;
  };
  /// Starts run `new_id` of the source's workflow and inputs (no parent,
  /// not in a queue), PENDING with no owner, its journal the source's
  /// before the cut (transactional outputs and children as recorded, the
  /// patches taken before it), its saga phase the one recorded there; the
  /// runtimes told (run_created, on commit). Refused: an object
  /// invocation, a cut past the journal's end, inside a saga's
  /// compensation, or leaving an awakeable or child created before it
  /// without its outcome (its resolution or end goes to the source).
  virtual fork_outcome fork_run(const fork_request& req) = 0;

  /// Puts run `run_id`, ended ERROR, CANCELLED or RETRIES_EXCEEDED, or
  /// BLOCKED, back to work under the same id: PENDING with no owner (any
  /// runtime that can run it adopts it), its end cleared, its recovery count
  /// reset (a cancelled run's request and deadline too, and a deadline that
  /// passed), an ERROR run's failed tail forgotten (from the last step or
  /// transaction that failed, after any saga phase, on: an attempt marker
  /// as a queue item's retry writes, committed transactions kept), the
  /// runtimes told (run_created, on commit), its app version set to
  /// `app_version` if given. Queue items and object invocations are not
  /// resumed here. Returns the status it had (nullopt: no such run);
  /// `resumed` says whether it went back to work; a `resume` event
  /// records it, with `reason`.
  struct resume_outcome {
    std::optional<run_status> was;
    bool resumed = false;
    std::int64_t dropped = 0; ///< journal entries dropped
  };
  virtual resume_outcome resume_run(std::string_view run_id,
                                    std::optional<std::string_view> app_version,
                                    std::int64_t at_ms, std::string_view reason)
    = 0;

  /// Claims for `executor` the BLOCKED runs `filter` lets it run that were
  /// blocked by a process started before `code_since_ms` (this one's code
  /// may be newer), at most `limit`: PENDING again under a new epoch,
  /// returned as they now are.
  virtual std::vector<run_record>
  claim_blocked(std::string_view executor, const claim_filter& filter,
                std::int64_t code_since_ms, std::int64_t limit)
    = 0;

  /// Records that run `run_id`, owned by `owner`, is out of memory until
  /// `wake_at_ms` (or clears it with nullopt). Returns false if fenced.
  virtual bool set_wake_at(const fence& owner, std::string_view run_id,
                           std::optional<std::int64_t> wake_at_ms)
    = 0;

  /// Cancels a PENDING run (or an ENQUEUED queue item or invocation) and
  /// its PENDING
  /// descendants (no fence:
  /// cancellation comes from anywhere; none below a compensating saga, and
  /// below a saga going forward only its child sagas). A PENDING saga
  /// going forward or done is signalled: `cancel_requested` set (and, if
  /// passivated, due at once), status kept; a compensating saga is left
  /// alone; any other run (a queue item waiting to retry included) ends
  /// CANCELLED. Marks the run's parent `delivered_while_passivated` if it is
  /// passivated and the run ended. Returns the runs cancelled or signalled,
  /// empty if `run_id` was not PENDING. `deadline_ms` (a deadline timer
  /// firing): only if the run is PENDING with exactly that deadline -- a
  /// queue item's later attempt (or the attempt waiting in its queue) has
  /// its own, and a stale timer must not touch it.
  virtual std::vector<cancelled_run>
  cancel_run(std::string_view run_id, std::int64_t at_ms,
             std::optional<std::int64_t> deadline_ms = std::nullopt)
    = 0;

  /// `cancel_run` of each of `run_ids` (no deadline) in one transaction,
  /// which also tells every process of each run it cancelled or signalled
  /// (`notice::cancelled` or `saga_cancel`, sent on commit): an operator's
  /// bulk cancel, at one commit per batch instead of two per run.
  virtual std::vector<cancelled_run>
  cancel_runs(const std::vector<std::string>& run_ids, std::int64_t at_ms)
    = 0;

  /// Returns one page of runs matching `filter`, newest first.
  virtual run_page list_runs(const run_filter& filter) = 0;
};

} // namespace perdure::persistence
