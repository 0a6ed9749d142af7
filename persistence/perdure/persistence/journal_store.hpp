#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/persistence/records.hpp"
#include "perdure/sql_session.hpp"

namespace perdure::persistence {

/// The journal: loading it, and the fenced writes that make steps
/// durable (the writer's batches, transactional steps). One role of
/// `store`.
class journal_store {
public:
  virtual ~journal_store() = default;

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

} // namespace perdure::persistence
