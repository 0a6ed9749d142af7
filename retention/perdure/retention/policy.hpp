#pragma once

// How long ended runs are kept, by workflow and by how they ended. Nothing
// is ever deleted unless a policy says so.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "perdure/run_status.hpp"

namespace perdure::retention {

/// How long runs that ended one way are kept, from their end.
struct keep {
  /// The whole run: inputs, output, journal, messages, events, awakeable
  /// outcomes, operator events. Then it is collected.
  std::chrono::milliseconds run;
  /// Then its id alone, a tombstone: a start under it returns the
  /// collected run (whose `get()` throws `errc::collected`), not a new
  /// run. Zero: the id is free as soon as the run is collected;
  /// `milliseconds::max()`: never.
  std::chrono::milliseconds tombstone = std::chrono::hours{24 * 7};
};

/// A policy: unset means kept for ever.
struct policy {
  /// SUCCESS.
  std::optional<keep> succeeded;
  /// ERROR, RETRIES_EXCEEDED, COMPENSATED, COMPENSATION_FAILED, DEAD_LETTER.
  std::optional<keep> failed;
  /// CANCELLED.
  std::optional<keep> cancelled;
};

/// The policies of a deployment: one per workflow name (object handlers
/// and queue items by their workflow's or handler's name too), and one for
/// every other workflow. A run started by another run (a child, a call)
/// goes with the root that started it, under the root's policy: the
/// root's journal may need it until then.
struct policies {
  std::optional<policy> all;
  std::map<std::string, policy, std::less<>> workflows;

  /// The policy of `workflow`'s runs, if any.
  const policy* of(std::string_view workflow) const;
};

/// What `p` keeps of runs that ended `status` (nullptr: kept for ever, and
/// for a status that has not ended).
const keep* keep_of(const policy& p, run_status status);

/// Throws `invalid_argument` for a negative duration.
void validate(const policies& p);

} // namespace perdure::retention
