#pragma once

// Names and ids: what a valid one is, and how fresh ones are made.

#include <string>
#include <string_view>

namespace perdure::detail {

/// Returns a fresh run id (time-ordered, then random).
std::string random_id();

/// Returns `<host>-<pid>-<random>`: the default executor id, new for every
/// process (see `config::executor_id`).
std::string process_executor_id();

/// Throws `invalid_argument` unless `name` is a valid name or id (`what`
/// says which, for the message).
void check_name(std::string_view what, std::string_view name);

/// `check_name` for object types, keys and idempotency keys: also without
/// Perdure's separators (see `persistence::is_valid_key`).
void check_key(std::string_view what, std::string_view name);

} // namespace perdure::detail
