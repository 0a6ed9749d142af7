#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace perdure {

/// The life cycle of a workflow run, as stored in the database.
enum class run_status : std::uint8_t {
  enqueued,
  pending,
  success,
  error,
  cancelled,
  retries_exceeded,
  /// A saga undoing its completed steps (still running: stored as PENDING,
  /// reported so while its compensations run).
  compensating,
  /// A saga that failed, was cancelled or passed its deadline, and undid
  /// every completed step; the error is the original one.
  compensated,
  /// A saga some of whose compensations failed past their limit; the error
  /// is the report of what could not be undone.
  compensation_failed,
  /// A queue item whose attempts all failed (or that failed terminally):
  /// out of its queue's way, listed with its error, re-enqueued on demand.
  dead_letter,
  /// A run whose code no longer replays its journal (a deploy changed it
  /// without a patch): not ended, out of every process's memory, its error
  /// saying where and how. A process started later tries it again; or
  /// cancel it.
  blocked,
};

/// Returns the stored spelling, e.g. `"PENDING"`.
std::string_view to_string(run_status x) noexcept;

/// Returns the status spelled `str`, if any.
std::optional<run_status> parse_run_status(std::string_view str) noexcept;

/// Returns whether a run in status `x` has ended for good.
constexpr bool is_terminal(run_status x) noexcept {
  return x != run_status::enqueued && x != run_status::pending
         && x != run_status::compensating && x != run_status::blocked;
}

} // namespace perdure
