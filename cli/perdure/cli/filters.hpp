#pragma once

// The run filter every `runs` command takes, as options, and the time
// spellings it reads.

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "perdure/run_listing.hpp"

namespace CLI {
class App;
} // namespace CLI

namespace perdure::cli {

/// The filter options as given, before they are checked.
struct filter_options {
  std::string status, workflow, version, executor, parent, queue, object,
    id_prefix, created, ended;
  bool active = false;
  std::size_t limit = 0;
  std::string cursor;

  /// Adds `--status`, `--workflow`, ... to `cmd`.
  void add_to(CLI::App& cmd, std::size_t default_limit);

  /// Whether any filter is set (a bulk action without one is refused).
  bool any() const;

  /// The filter they spell. Throws `cli_error` (usage) for a bad status,
  /// object or time range.
  run_filter to_filter() const;
};

/// Reads a point in time: ISO 8601 (`2026-11-27`, `2026-11-27T10:00`,
/// `2026-11-27T10:00:05Z`, `...+02:00`; no zone: UTC) or an age before
/// `now` (`90s`, `15m`, `2h`, `7d`). Nothing if `text` is neither.
std::optional<std::chrono::system_clock::time_point>
parse_time(const std::string& text, std::chrono::system_clock::time_point now);

/// Reads `SINCE..UNTIL` (either side may be empty) or a single `SINCE`.
/// Throws `cli_error` (usage) naming `what` if it is malformed.
void parse_range(const std::string& text, const char* what,
                 std::optional<std::chrono::system_clock::time_point>& since,
                 std::optional<std::chrono::system_clock::time_point>& until);

/// Reads a status as the store spells it, any case (`error`, `ERROR`).
/// Throws `cli_error` (usage) listing the statuses.
run_status parse_status(const std::string& text);

/// A run as `runs list --json` shows it.
nlohmann::json run_json(const run_info& run);

} // namespace perdure::cli
