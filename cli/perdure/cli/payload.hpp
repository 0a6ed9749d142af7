#pragma once

#include <string>

namespace perdure::cli {

/// `json_text` (a value as JSON) encoded as Perdure stores a JSON payload
/// (`{"value":...}`, what `persistence::encode` writes for it). Throws
/// `cli_error` (usage) naming `what` if it is not JSON.
std::string encode_json_value(const std::string& json_text, const char* what);

} // namespace perdure::cli
