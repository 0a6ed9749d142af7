#pragma once

// The C++ types Perdure's actors exchange, allowed as CAF messages without
// serialization (they never leave the process). Every translation unit that
// sends or receives them includes this header.

#include <caf/allowed_unsafe_message_type.hpp>

#include "perdure/detail/object/object_message.hpp"
#include "perdure/detail/execution/run_message.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(perdure::detail::run_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(perdure::detail::object_message)
