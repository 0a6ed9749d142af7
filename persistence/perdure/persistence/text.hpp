#pragma once

#include <string>
#include <string_view>

namespace perdure::persistence {

/// Returns `x` as valid UTF-8 without NUL bytes (each offending byte becomes
/// '?'). Text columns of both stores accept the result, so a message built
/// from arbitrary bytes (an exception's what(), say) cannot fail a write.
std::string valid_text(std::string_view x);

/// Returns whether `x` is non-empty, at most `max_bytes` long, valid UTF-8
/// and free of NUL bytes: what names and ids must be.
bool is_valid_name(std::string_view x, std::size_t max_bytes = 255);

} // namespace perdure::persistence
