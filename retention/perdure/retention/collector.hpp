#pragma once

// Applies retention policies from a process: finds ended runs past their
// policy, hands each to an optional archive, collects them (a tombstone
// keeps the id), later frees their ids. One process collects at a time
// (a turn in the database, taken over when its holder stops renewing it);
// any number may run a collector.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "perdure/client.hpp"
#include "perdure/retention/policy.hpp"

namespace perdure::retention {

/// A run about to be collected, for an archive.
struct archived_run {
  std::string id;
  std::string workflow;
  std::string status; ///< e.g. "SUCCESS"
  std::int64_t created_at_ms = 0;
  std::int64_t ended_at_ms = 0;
  std::string inputs;                ///< as stored (encoded)
  std::optional<std::string> output; ///< as stored (encoded)
  std::string error;
  /// `client::export_run`'s JSON: the workflow, inputs and whole journal.
  std::string export_json;
};

struct collector_options {
  /// How often a pass looks for runs past their policy.
  std::chrono::milliseconds interval{std::chrono::seconds{10}};
  /// Runs (roots) per transaction, at most.
  std::int64_t batch = 1000;
  /// How long one transaction may take: a batch that took longer is
  /// halved, one that took under half of it grows back towards `batch`.
  /// Zero: by store, 10 ms on SQLite (a transaction holds the only
  /// writer's lock: the workload's steps wait that long), 200 ms on
  /// PostgreSQL (where a batch's cost is mostly its commit).
  std::chrono::milliseconds batch_time{0};
  /// The share of time a pass spends in its transactions: it pauses
  /// between batches so the workload keeps the database (0 < duty <= 1).
  double duty = 0.5;
  /// How long the turn lasts unless renewed (each batch renews it):
  /// another process's collector takes over this long after this one
  /// stops.
  std::chrono::milliseconds turn{std::chrono::seconds{30}};
  /// Called with each run at the top of a tree (a run no other run
  /// started) before it is collected (its descendants go with it, not
  /// handed over one by one: its export names its children); a throw
  /// leaves the run
  /// (and the rest of its workflow and status in this pass) for the next
  /// pass. At least once: a run archived and then resumed by an operator
  /// is archived again when it ends again.
  std::function<void(const archived_run&)> archive;
};

/// What a pass did.
struct pass_result {
  bool had_turn = false;      ///< false: another process's collector has it
  std::int64_t collected = 0; ///< roots collected (tombstones now)
  std::int64_t rows = 0;      ///< runs stripped (roots and descendants)
  std::int64_t expired = 0;   ///< tombstones deleted (ids free again)
  std::int64_t archive_failures = 0;
};

/// The collectors' shared state, as the database has it.
struct status {
  std::string holder; ///< whose turn it is (empty: nobody's yet)
  std::optional<std::chrono::system_clock::time_point> held_until;
  std::optional<std::chrono::system_clock::time_point> last_batch_at;
  std::int64_t runs_collected = 0; ///< ever, every collector
  std::int64_t ids_expired = 0;    ///< ever, every collector
  std::int64_t ended_roots = 0;    ///< ended runs at the top of their tree, not collected
  std::int64_t tombstones = 0;     ///< collected runs whose ids are kept
};

/// Reads `status` (the CLI's `perdure retention`).
status read_status(client& c);

/// Collects from this process while it lives: construct it after the
/// runtime (or client) started, destroy it before it stops.
class collector {
public:
  collector(client& c, policies p, collector_options opts = {});
  ~collector();
  collector(const collector&) = delete;
  collector& operator=(const collector&) = delete;

  /// Runs one pass now (tests; the loop runs them every `interval`).
  pass_result collect_now();

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

} // namespace perdure::retention
