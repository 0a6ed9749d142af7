#pragma once

// What a schedule does when a tick finds its previous run still going
// (overlap), and with ticks that came due while no process fired them
// (catch-up).

namespace perdure::schedules {

/// A tick whose previous run has not ended:
enum class overlap {
  skip,         // is skipped (counted): the default
  buffer_one,   // waits for that run's end; at most one waits, the rest skip
  buffer_all,   // waits, in order (at most 1 000 wait; the rest skip)
  cancel_other, // cancels that run and starts
  allow_all,    // starts anyway
};

/// Ticks that came due while no process fired them (all processes down,
/// the schedule paused then resumed), inside the catch-up window (older
/// ones are missed, and counted):
enum class catchup {
  latest, // only the newest fires; the older are missed: the default
  all,    // each fires, oldest first (the overlap policy still applies)
};

} // namespace perdure::schedules
