#pragma once

// The SQL contract for operators: views over Perdure's tables with real
// times and decoded JSON payloads, the same names and columns on both
// stores (README, "Operating Perdure"). Written once; each backend's
// migration creates them with its own time and JSON expressions.

#include <string>
#include <vector>

namespace perdure::persistence::detail {

/// The statements creating the views (and, on PostgreSQL, the payload
/// decoding function) for tables prefixed `s` (`"schema".` or empty).
std::vector<std::string> operator_views(bool postgres, const std::string& s);

/// The statement creating `v_schedules` (added with the schedules table).
std::string schedule_view(bool postgres, const std::string& s);

/// The statements giving `v_runs` the column `collected_at` (migration 19:
/// replaced in place on PostgreSQL, keeping what depends on it; dropped
/// and created again on SQLite, which cannot add a column to a view).
std::vector<std::string> collected_runs_view(bool postgres,
                                             const std::string& s);

} // namespace perdure::persistence::detail
