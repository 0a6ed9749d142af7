#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace perdure {

/// The error codes of Perdure. Every error that leaves the library, as an
/// exception on an application thread or as a value between actors, carries
/// exactly one of these.
enum class errc : std::uint8_t {
  /// No error.
  none = 0,
  /// A workflow (or handler) name that was never registered.
  unknown_workflow,
  /// An argument that can never be valid: empty or overlong names and ids.
  invalid_argument,
  /// A payload larger than `config::max_payload_bytes`.
  payload_too_large,
  /// A payload in the store that does not decode to the expected type.
  decode_failed,
  /// A workflow id reused with another workflow name or other inputs.
  conflicting_id,
  /// No run (or entry) with the given id.
  not_found,
  /// A write from a process that no longer owns the run was rejected.
  fenced,
  /// Replay met a different operation than the journal recorded.
  non_determinism,
  /// The database could not be reached, even after retrying.
  store_unavailable,
  /// The database answered with an error that retrying cannot fix.
  store_error,
  /// The run ended with status ERROR.
  workflow_failed,
  /// The run ended with status CANCELLED.
  workflow_cancelled,
  /// The run ended with status RETRIES_EXCEEDED.
  retries_exceeded,
  /// A wait ran out of time.
  timeout,
  /// The runtime was used before `start()` or after `stop()`.
  not_running,
  /// An awakeable (or promise) that was already resolved or rejected.
  already_resolved,
  /// The database has no room left (a full disk or quota), even after
  /// retrying. Nothing was written; work resumes once there is room.
  store_full,
  /// Another live process holds this executor id (or, on SQLite, another
  /// runtime uses the file). Nothing was changed.
  executor_in_use,
  /// The run, a saga, ended COMPENSATED: it failed (or was cancelled) and
  /// undid every completed step. The message names the cause.
  compensated,
  /// The run, a saga, ended COMPENSATION_FAILED: the message reports what
  /// could not be undone.
  compensation_failed,
  /// The run, a queue item, ended DEAD_LETTER: its attempts failed. The
  /// message carries the last error; `queues::requeue` runs it again.
  dead_letter,
  /// The run ended and retention collected it: its inputs, output and
  /// journal are gone; its id (a tombstone) says how it ended, and a
  /// start under that id is refused, until its policy lets the id go.
  collected,
};

/// Returns the stable name of `code`, e.g. `"conflicting_id"`.
const char* to_string(errc code) noexcept;

/// The exception Perdure throws on application threads.
class error : public std::runtime_error {
public:
  error(errc code, const std::string& what)
    : std::runtime_error(what), code_(code) {
    // nop
  }

  /// Returns the error code.
  errc code() const noexcept {
    return code_;
  }

private:
  errc code_;
};

} // namespace perdure
