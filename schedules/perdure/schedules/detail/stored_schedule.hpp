#pragma once

// A schedule's definition as the API gives it and as the store keeps it,
// one checked against the other: every spec stored has been validated.

#include "perdure/persistence/schedule_store.hpp"
#include "perdure/schedules/fire_times.hpp"
#include "perdure/schedules/schedule.hpp"

namespace perdure::schedules::detail {

/// `spec` as stored (cursor unset). Throws perdure::error
/// (invalid_argument) saying what to change.
persistence::schedule_record record_of(const schedule_spec& spec);

/// The definition `r` holds.
schedule_spec spec_of(const persistence::schedule_record& r);

/// When `r`'s cron fires in its zone.
fire_times times_of(const persistence::schedule_record& r);

const char* to_string(overlap o);
const char* to_string(catchup c);

} // namespace perdure::schedules::detail
