#pragma once

// How the CLI prints: aligned tables for people (colour only on a
// terminal), JSON for scripts, and times and durations in one spelling.

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "perdure/run_status.hpp"

namespace perdure::cli {

/// Whether `out` goes to a terminal that takes colour (not with NO_COLOR
/// set, https://no-color.org).
bool use_colour(std::ostream& out);

/// `text` in the colour a person reads status `s` by (a terminal only).
std::string coloured_status(std::string_view s, bool colour);

/// A table printed with its columns aligned, the header underlined.
class table {
public:
  explicit table(std::vector<std::string> headers);

  void add(std::vector<std::string> row);

  std::size_t size() const noexcept {
    return rows_.size();
  }

  /// Prints it; column `status_column` (if any) is coloured by status.
  void print(std::ostream& out, bool colour,
             std::optional<std::size_t> status_column = std::nullopt) const;

private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

/// `t` as ISO 8601 in UTC with milliseconds: `2026-11-27T18:01:02.345Z`.
std::string iso_time(std::chrono::system_clock::time_point t);

/// `t` for people: `2026-11-27 18:01:02` (UTC).
std::string human_time(std::chrono::system_clock::time_point t);

/// `d` for people: `850ms`, `12.3s`, `4m05s`, `3h12m`, `2d04h`.
std::string human_duration(std::chrono::milliseconds d);

/// `text` cut to `width` characters (an ellipsis marks the cut), newlines
/// shown as spaces.
std::string clip(std::string_view text, std::size_t width);

/// A stored payload as JSON for `--json`: the value of a JSON payload
/// (`{"value":...}` unwrapped), a binary one as `{"base64": ...}`.
nlohmann::json payload_json(std::string_view bytes);

/// A stored payload as one line for people (its JSON value, or
/// `<binary, N bytes>`).
std::string payload_text(std::string_view bytes);

/// Prints `j` (indented) and a newline.
void print_json(std::ostream& out, const nlohmann::json& j);

} // namespace perdure::cli
