#pragma once

#include <string>
#include <vector>

namespace perdure::sagas {

/// What a saga undid, written when it ends: the run's recorded error
/// (`error` of its outcome and of `list_runs`) is `to_text()`.
struct compensation_report {
  /// Why the saga compensated: the original error, or "cancelled".
  std::string cause;
  /// Compensations that succeeded, in the order they ran (reverse order of
  /// their steps).
  std::vector<std::string> undone;
  /// Compensations that failed past their limit, with their last error.
  std::vector<std::pair<std::string, std::string>> failed;

  /// One line a person can read: `<cause>; undone: a, b; not undone: c
  /// (<error>)`.
  std::string to_text() const;
};

} // namespace perdure::sagas
