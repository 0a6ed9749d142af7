#pragma once

// A run exported as JSON (`client::export_run`) and read back
// (`testing::replay`): the one place that writes and reads the format.

#include <cstdint>
#include <string>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

/// What an export holds: enough to replay the run's code with no database.
struct exported_run {
  std::string id, workflow, status, app_version;
  /// The encoded inputs, as stored.
  std::string inputs;
  std::int64_t exported_at_ms = 0;
  /// A cancel was asked for (a saga takes it at its next operation).
  bool cancel_requested = false;
  /// Every journal row, in index order (patch markers first).
  std::vector<persistence::journal_entry> journal;
};

/// Returns `run` as JSON (format `perdure-run/1`). A payload that is UTF-8
/// text is written as `payload`; other bytes as `payload_base64`.
std::string to_json(const exported_run& run);

/// Reads what `to_json` wrote. Throws `perdure::error` (`invalid_argument`)
/// saying what is malformed; an entry Perdure cannot have written comes
/// back unreadable, as the stores read it.
exported_run from_json(const std::string& text);

} // namespace perdure::detail
