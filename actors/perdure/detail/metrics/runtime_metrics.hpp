#pragma once

// The metrics one runtime records (names `perdure_*`, labels bounded:
// workflow, queue, status, outcome, kind). Parts record on series they
// looked up once (a run looks up its workflow's series at start), so
// recording is an atomic add; the scrape reads the registry.

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "perdure/persistence/store_metrics.hpp"
#include "perdure/run_status.hpp"
#include "perdure/telemetry/metrics.hpp"

namespace perdure::detail {

/// The series of one workflow (or object type: its invocations carry the
/// type's name as their workflow label).
struct workflow_series {
  /// The `workflow` label: the workflow's name, or `type/handler`.
  std::string name;
  /// The object type of an invocation's handler (empty for workflows).
  std::string object_type;
  telemetry::counter& started;
  telemetry::counter& steps_ok;
  telemetry::counter& steps_failed;
  telemetry::counter& step_retries;
  telemetry::counter& blocked;
  telemetry::histogram& step_seconds;
};

class runtime_metrics {
public:
  runtime_metrics();

  runtime_metrics(const runtime_metrics&) = delete;
  runtime_metrics& operator=(const runtime_metrics&) = delete;

  /// The series of `workflow`, or of `object_type`'s handler `workflow`
  /// (made on first use; valid as long as this).
  workflow_series& of(const std::string& workflow,
                      const std::string& object_type = {});

  /// A run of `workflow` ended with `status` after `seconds` since it was
  /// created.
  void run_ended(const std::string& workflow, run_status status,
                 double seconds);

  /// An object call of `type` ended with `status` after `seconds` since it
  /// was made.
  void object_call_ended(const std::string& type, run_status status,
                         double seconds);

  /// A queue item of `queue` started after waiting `seconds` (since it was
  /// enqueued or became due, whichever is later).
  void queue_started(const std::string& queue, double seconds);
  void dead_lettered(const std::string& queue);

  /// The counters the store's retry loop and the journal writer record on.
  const persistence::store_metrics& store() const noexcept { return store_; }

  telemetry::registry registry;

  telemetry::counter& recoveries;
  telemetry::counter& takeovers;
  telemetry::counter& fenced_writes;
  telemetry::counter& lease_losses;
  telemetry::histogram& timer_lateness;

  // Sampled at each scrape (see runtime_impl::sample_gauges).
  telemetry::gauge& runs_in_memory;
  telemetry::gauge& keys_in_memory;
  telemetry::gauge& step_threads_busy;
  telemetry::gauge& step_backlog;
  telemetry::gauge& lease_age;
  telemetry::gauge& runs_stranded;
  telemetry::gauge& timers_armed;

private:
  telemetry::family<telemetry::counter>& started_;
  telemetry::family<telemetry::counter>& ended_;
  telemetry::family<telemetry::histogram>& run_seconds_;
  telemetry::family<telemetry::counter>& steps_;
  telemetry::family<telemetry::counter>& step_retries_;
  telemetry::family<telemetry::histogram>& step_seconds_;
  telemetry::family<telemetry::counter>& blocked_;
  telemetry::family<telemetry::counter>& object_calls_;
  telemetry::family<telemetry::histogram>& object_seconds_;
  telemetry::family<telemetry::counter>& queue_starts_;
  telemetry::family<telemetry::histogram>& queue_wait_;
  telemetry::family<telemetry::counter>& dead_letters_;
  persistence::store_metrics store_;

  std::mutex mtx_;
  std::unordered_map<std::string, std::unique_ptr<workflow_series>> series_;
};

} // namespace perdure::detail
