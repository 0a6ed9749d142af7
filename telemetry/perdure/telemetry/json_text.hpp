#pragma once

// A JSON string literal of any bytes: escapes what JSON requires and
// replaces what is not UTF-8 with U+FFFD, so one bad byte in a name or a
// log line never makes a whole document unreadable (OTLP batches, log
// lines).

#include <string>
#include <string_view>

namespace perdure::telemetry {

/// Appends `"text"`, escaped and made valid UTF-8.
void append_json_string(std::string& out, std::string_view text);

} // namespace perdure::telemetry
