#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perdure/queue_stats.hpp"
#include "perdure/run_status.hpp"

namespace perdure {

/// Which runs `list_runs` returns: every field that is set must match.
struct run_filter {
  std::optional<run_status> status{};
  /// The workflow name.
  std::optional<std::string> name{};
  /// Created at or after this time.
  std::optional<std::chrono::system_clock::time_point> created_after{};
  /// Created before this time.
  std::optional<std::chrono::system_clock::time_point> created_before{};
  /// Most runs in one page (1 to 1000).
  std::size_t limit = 100;
  /// Where the page starts: empty for the newest runs, else the
  /// `next_cursor` of the previous page.
  std::string cursor{};
  /// Only runs that have not ended: ENQUEUED, PENDING (COMPENSATING
  /// included) and BLOCKED.
  bool unended = false;
  /// The app version stamped on the run.
  std::optional<std::string> app_version{};
  /// The executor that owns (or last owned) it.
  std::optional<std::string> executor{};
  /// The run that started it as its child.
  std::optional<std::string> parent_id{};
  /// The queue it was enqueued in.
  std::optional<std::string> queue{};
  /// Invocations of objects of this type (and key, if set).
  std::optional<std::string> object_type{};
  std::optional<std::string> object_key{};
  /// Ids that start with this.
  std::optional<std::string> id_prefix{};
  /// Ended (in a final status) at or after / before this time.
  std::optional<std::chrono::system_clock::time_point> ended_after{};
  std::optional<std::chrono::system_clock::time_point> ended_before{};
};

/// One run as `list_runs` shows it.
struct run_info {
  std::string id{};
  std::string name{};
  run_status status = run_status::pending;
  /// The executor that owns (or last owned) the run; empty for a run
  /// started by a client and not yet claimed by a runtime.
  std::string executor{};
  std::chrono::system_clock::time_point created_at{};
  std::chrono::system_clock::time_point updated_at{};
  /// Why it ended, if it did not succeed.
  std::optional<std::string> error{};
  /// The run that started it as its child, if any.
  std::optional<std::string> parent_id{};
  /// The app version stamped on it (processes of that version run it).
  std::string app_version{};
  /// A queue item's queue.
  std::optional<std::string> queue{};
  /// An object invocation's object type and key (`name` is the handler).
  std::optional<std::string> object_type{}, object_key{};
  /// When retention collected it (perdure/retention): its inputs, output,
  /// error and journal are gone, its id kept as a tombstone.
  std::optional<std::chrono::system_clock::time_point> collected_at{};
};

/// Everything the store knows of one run (`client::describe`), for
/// operators: `run_info` and its ownership, timings, waits and payloads.
struct run_detail {
  run_info info{};
  /// The owner's lease epoch when it claimed the run (fences its writes).
  std::int64_t epoch = 0;
  /// Encoded as stored (JSON text unless the binary encoding was chosen).
  std::string inputs{};
  std::optional<std::string> output{};
  /// When its current attempt started (queue items).
  std::optional<std::chrono::system_clock::time_point> started_at{};
  /// Out of memory until this time (a passivated sleeper or waiter).
  std::optional<std::chrono::system_clock::time_point> wake_at{};
  /// Cancelled if it has not ended by then.
  std::optional<std::chrono::system_clock::time_point> deadline{};
  /// Attempts begun (queue items), and recoveries after crashes.
  std::int32_t attempts = 0, recovery_attempts = 0;
  /// A queue item's priority, partition and dedup id.
  std::int32_t priority = 0;
  std::string partition_key{}, dedup_id{};
  /// A saga's phase (FORWARD, COMPENSATING, DONE); empty for other runs.
  std::string saga_phase{};
  /// A cancellation was asked for (a saga observes it).
  bool cancel_requested = false;
};

/// One executor (a runtime's lease) as the store sees it
/// (`client::executors`).
struct executor_info {
  std::string id{};
  /// `live` while its lease is held; `stopped` or `lapsed` after.
  std::string state{};
  std::string app_version{};
  std::int64_t epoch = 0;
  /// The last heartbeat, and how long a lease lives without one.
  std::chrono::system_clock::time_point heartbeat_at{};
  std::chrono::milliseconds lease{0};
  std::chrono::system_clock::time_point started_at{};
  /// PENDING runs it holds (object invocations included).
  std::int64_t runs_held = 0;
};

/// One queue as defined by the runtimes that registered it
/// (`client::queues`): its limits as last written.
struct queue_info {
  std::string name{};
  queue_limits limits{};
  std::chrono::system_clock::time_point updated_at{};
};

/// One durable operation of a run as its journal recorded it (`history`):
/// for operators, what each step did and, for a saga, what was undone
/// (its compensations are steps named `undo:<step>`). Or an event: what
/// was done to the run from outside (outcome `event`).
struct step_record {
  /// The journal index (a patch taken: below -1; an event: -1).
  std::int32_t seq = 0;
  /// `step`, `transaction`, `sleep`, `await`, `child`, `phase`, `patch`,
  /// ...; an event: `resume`, `fork` (this run is a fork), `forked` (a
  /// fork was made of it) or `move` (its app version changed).
  std::string kind{};
  /// What it is called; an event: what was done.
  std::string name{};
  /// `value`, or how it failed: `failed` (after its retries), `terminal`;
  /// `event` for an event.
  std::string outcome{};
  /// The recorded result (JSON unless the binary encoding was chosen); an
  /// event: the reason given.
  std::string payload{};
  std::string error{};
  std::chrono::system_clock::time_point at{};
};

/// One app version as the store sees it (`client::versions`): the
/// processes of it that live, and the unended work stamped with it.
struct version_report {
  /// Empty: runs started without one (any process may run them).
  std::string app_version{};
  /// When a process of it first and last took over work (its takeover
  /// passes); unset for a version only runs carry.
  std::optional<std::chrono::system_clock::time_point> first_seen{},
    last_seen{};
  std::int64_t live_executors = 0;
  std::int64_t pending = 0, enqueued = 0, blocked = 0;
  /// When the oldest of that work was created.
  std::optional<std::chrono::system_clock::time_point> oldest_run{};
  /// Work waits and no live process of the version can take it (for the
  /// empty version: no live process at all). Deploy the version, or move
  /// the runs (`client::move_runs`).
  bool stranded = false;
};

/// One page of runs, newest first.
struct run_page {
  std::vector<run_info> runs{};
  /// Pass as `run_filter::cursor` for the next page; empty on the last.
  std::string next_cursor{};
};

} // namespace perdure
