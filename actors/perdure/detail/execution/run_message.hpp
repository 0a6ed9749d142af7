#pragma once

// What an execution is told: signals from the runtime, and the answers of
// work it handed to other threads. Free of CAF: a host carries these.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::detail {

/// What `signal_run` tells a run.
enum class run_signal : std::int32_t {
  /// Start (or replay) the code.
  start,
  /// Try the operation `seq` again.
  retry,
  /// A write for `seq` was fenced: the run is owned elsewhere now.
  fenced,
  /// The timer of operation `seq` is due, or (`seq` -1) something was
  /// delivered to the run.
  wake,
  /// The run was cancelled in the store (`seq` 0: ended CANCELLED; 1: a
  /// saga asked to cancel, which it observes).
  cancel,
  /// The saga now compensates: its host changes behaviour.
  compensating,
  /// The final status was written (`seq`: the `write_ack`).
  ended,
  /// The store could not record what the run's memory assumes (e.g. that
  /// it is awake), or went away past its retry budget: stop, and let
  /// housekeeping revive the run from the store.
  restart,
  /// Another copy of the run replaces this one, or the runtime stops:
  /// stop without recording anything.
  drop,
};

/// The `seq` of a run's deadline timer (cancels it).
constexpr std::int32_t deadline_seq = -2;

/// The wake-up time of a run passivated until a delivery (no timer).
constexpr std::int64_t passivated_forever
  = std::numeric_limits<std::int64_t>::max();

/// A step attempt ended (off the host). `checkpointed`: its outcome is
/// recorded already (a transactional step's, in its own transaction).
struct attempt_ended {
  std::int32_t seq;
  persistence::outcome result;
  bool checkpointed;
  std::string payload;
  std::string error;
};

/// A checkpoint's commit came back from the journal writer.
struct checkpoint_committed {
  std::int32_t seq;
  persistence::outcome result;
  persistence::write_ack ack;
  std::string payload;
  std::string error;
};

/// A wait's check came back: `index` of the source that delivered (-1: the
/// wait timed out), none if nothing has.
struct wait_checked {
  std::int32_t seq;
  bool failed; // the store could not be read: nothing is known
  std::optional<std::int32_t> index;
  std::int64_t cursor;
  persistence::outcome result;
  std::string payload;
  std::string error;
};

/// A passivation write came back; `wakes_seen`: the wake count read
/// before it was sent.
struct passivation_written {
  std::int32_t seq;
  bool ok;
  std::int64_t wake_at;
  std::uint64_t wakes_seen;
};

/// The wake-up time was cleared (`stay_awake`).
struct awake_recorded {};

/// A `run_signal` about operation `seq`.
struct signalled {
  run_signal kind;
  std::int32_t seq;
};

/// The execution ended on a step thread (see `execution::drive`): its host
/// quits on its next turn.
struct leave_now {};

/// Everything an execution is told, as one type: one handler in its host,
/// because a behavior is built per actor and each handler costs memory in
/// every sleeping run.
using run_message = std::variant<attempt_ended, checkpoint_committed,
                                 wait_checked, passivation_written,
                                 awake_recorded, signalled, leave_now>;

/// A message for one of the executions a host holds (an object actor's
/// invocations): `exec` names it; a message for one that ended is dropped.
struct tagged_run_message {
  std::uint32_t exec = 0;
  run_message message;
};

} // namespace perdure::detail
