#pragma once

// A run's place in its trace. A run stores the W3C context it was started
// in (`runs.traceparent`: its starter's span, or the span of the operation
// of the run that started it); without one, its trace id is derived from
// its id, so every process and every attempt agree on it. Span ids are
// derived too, from the run, its epoch and the activation's number at that
// epoch (a run woken from passivation keeps its epoch: it is the next
// activation there): a child's traceparent is known before its span ends,
// and an attempt can link to the one before it, which may have died with
// its process and never reported.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/telemetry/trace.hpp"

namespace perdure::persistence {
struct run_record;
} // namespace perdure::persistence

namespace perdure::detail {

class run_trace {
public:
  /// The trace of `run`, activated at its epoch now. `reporting`: whether
  /// this process reports spans (only then are its activations counted:
  /// without spans an id per activation serves nothing, and the count
  /// takes a process-wide lock).
  run_trace(const persistence::run_record& run, bool reporting);

  const telemetry::trace_id& trace() const noexcept { return attempt_.trace; }
  /// This attempt's span.
  const telemetry::span_context& attempt() const noexcept { return attempt_; }
  /// The trace id in hex, for log lines.
  std::string trace_hex() const { return telemetry::hex(attempt_.trace); }
  /// Whether its spans are recorded (W3C's sampled flag; a starter that
  /// does not sample its trace gets no spans, and neither do its runs').
  bool sampled() const noexcept { return (attempt_.flags & 1) != 0; }

  /// The run ended: the activations counted for it here are forgotten.
  void forget() const;
  /// The same for run `run_id`, known to have ended (by whoever ended it).
  static void forget(const std::string& run_id);

  /// The span of the live operation at journal index `seq` (derived from
  /// the attempt's span: cheap enough for every step, spans or not).
  telemetry::span_context operation(std::int32_t seq) const noexcept;

  /// The attempt's span, ended now (`error`: how the run failed).
  telemetry::span attempt_span(std::string name,
                               std::vector<telemetry::attribute> attributes,
                               std::optional<std::string> error) const;

  /// The span of operation `seq`, started at `start_ns`, ended now.
  telemetry::span operation_span(std::int32_t seq, std::string name,
                                 std::int64_t start_ns,
                                 std::vector<telemetry::attribute> attributes,
                                 std::optional<std::string> error) const;

private:
  std::string run_id_;
  std::int64_t epoch_ = 0;
  /// Activations of the run at this epoch in this process before this one
  /// (only a wake from passivation keeps the epoch, and only the process
  /// that owns the run wakes it).
  std::int64_t activation_ = 0;
  telemetry::span_id parent_{}; // the starter's span (zero: a root)
  telemetry::span_context attempt_;
  std::optional<telemetry::span_context> previous_;
  std::int64_t start_ns_ = 0;
  bool reporting_ = false;
};

/// The span the code on this thread runs in (a step's or transaction's
/// body), if any: what a start, call or enqueue made from it joins.
std::optional<telemetry::span_context> current_span();

/// Sets `current_span` for this thread while it lives.
class current_span_scope {
public:
  explicit current_span_scope(const telemetry::span_context& c);
  ~current_span_scope();
  current_span_scope(const current_span_scope&) = delete;
  current_span_scope& operator=(const current_span_scope&) = delete;

private:
  std::optional<telemetry::span_context> saved_;
};

/// What a new run started from outside stores as its traceparent: `given`
/// (checked: a malformed one is an `invalid_argument` error), or the
/// span the calling thread runs in, or nothing.
std::string traceparent_for_start(std::string_view given);

} // namespace perdure::detail
