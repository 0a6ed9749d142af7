#pragma once

// Retention as the store does it (perdure/retention holds the policies):
// ended roots -- runs with no parent; their descendants go with them --
// found by workflow, status and end through the partial index
// `runs_ended`, collected in batches (a root with unended descendants is
// left alone), then their tombstones expired the same way. Collecting
// strips a run to its id and how it ended and deletes its journal,
// messages, events, awakeable outcomes and run events, in one
// transaction. One role of `store`.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::persistence {

/// The collector's turn and totals (the row every collector shares).
struct retention_progress {
  std::string holder;         ///< the collector whose turn it is, or empty
  std::int64_t held_until_ms = 0;
  std::int64_t runs_collected = 0; ///< roots and descendants, ever
  std::int64_t ids_expired = 0;    ///< tombstone rows deleted, ever
  std::int64_t last_batch_at_ms = 0;
  std::int64_t ended_roots = 0; ///< ended roots not collected (now)
  std::int64_t tombstones = 0;  ///< collected roots whose ids are kept
};

class retention_store {
public:
  virtual ~retention_store() = default;

  /// Takes (or keeps) the collector's turn for `holder` until `until_ms`
  /// if nobody else holds it at `now_ms`; false if someone does.
  virtual bool claim_retention(std::string_view holder, std::int64_t now_ms,
                               std::int64_t until_ms)
    = 0;

  /// Gives the turn back, if `holder` has it.
  virtual void release_retention(std::string_view holder) = 0;

  virtual retention_progress retention_state() = 0;

  /// The workflow names of ended roots not collected (`tombstones`
  /// false), or of tombstones (true), in order.
  virtual std::vector<std::string> retained_workflows(bool tombstones) = 0;

  /// Up to `limit` ended roots of workflow `name` in status `status` that
  /// ended before `before_ms`, not collected and with no unended child,
  /// in (end, id) order after (`after_ms`, `after_id`); whole (`whole`:
  /// inputs, output and error too, for an archive) or by id, name, status
  /// and end only.
  virtual std::vector<run_record>
  collectable_runs(std::string_view name, std::string_view status,
                   std::int64_t before_ms, std::int64_t limit, bool whole,
                   std::int64_t after_ms, std::string_view after_id)
    = 0;

  /// Collects the roots of `ids` that are still ended, uncollected roots
  /// with no unended descendant, and their descendants: each stripped to
  /// a tombstone at `at_ms`, its dependents deleted. Returns the roots
  /// collected; `rows` gets the runs stripped (roots and descendants).
  virtual std::vector<std::string>
  collect_runs(const std::vector<std::string>& ids, std::int64_t at_ms,
               std::int64_t* rows)
    = 0;

  /// Deletes up to `limit` tombstoned roots of workflow `name` in status
  /// `status` that ended before `before_ms`, and their descendants'
  /// tombstones: their ids are free again. Returns the rows deleted.
  virtual std::int64_t expire_tombstones(std::string_view name,
                                         std::string_view status,
                                         std::int64_t before_ms,
                                         std::int64_t limit, std::int64_t at_ms)
    = 0;
};

} // namespace perdure::persistence
