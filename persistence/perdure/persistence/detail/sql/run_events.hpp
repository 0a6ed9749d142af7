#pragma once

// Run events: what was done to a run from outside its code (resumed,
// forked, moved), written inside the transaction that did it.

#include <cstdint>
#include <optional>
#include <string_view>

#include "perdure/persistence/detail/sql/sql_tx.hpp"

namespace perdure::persistence::detail {

/// Records in `tx` that `kind` was done to run `run_id` at `at_ms`: what
/// (`what`) and why (`reason`, the operator's words, may be empty), before
/// journal index `before` (unset: the journal's end now).
void record_run_event(sql_tx& tx, std::string_view run_id, std::int64_t at_ms,
                      std::string_view kind, std::string_view what,
                      std::string_view reason,
                      std::optional<std::int64_t> before = std::nullopt);

} // namespace perdure::persistence::detail
