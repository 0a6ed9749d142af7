#pragma once

// SQL spelled the same for both stores.

namespace perdure::persistence::detail {

/// A run's status as reported to users: a saga undoing its steps is stored
/// PENDING (it runs, is owned, fenced and recovered like any run) and
/// reported COMPENSATING.
inline constexpr const char* reported_status
  = "(CASE WHEN status = 'PENDING' AND saga_phase = 'COMPENSATING' THEN "
    "'COMPENSATING' ELSE status END)";

} // namespace perdure::persistence::detail
