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

/// `is_valid_name`, and free of the separators Perdure joins object types,
/// keys and idempotency keys with (0x1E, 0x1F): with them, two keys could
/// name one invocation, or a key hide a call cycle.
bool is_valid_key(std::string_view x, std::size_t max_bytes = 255);

} // namespace perdure::persistence
