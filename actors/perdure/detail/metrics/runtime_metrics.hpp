#pragma once

// The metrics one runtime records (names `perdure_*`, labels bounded:
// workflow, queue, status, outcome, kind). Parts record on series they
// looked up once (a run looks up its workflow's series at start), so
// recording is an atomic add; the scrape reads the registry.

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "perdure/persistence/operator_store.hpp"
#include "perdure/persistence/store_metrics.hpp"
#include "perdure/run_status.hpp"
#include "perdure/telemetry/metrics.hpp"

namespace perdure::persistence {
struct run_record;
} // namespace perdure::persistence

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
  /// The end's series by final status, looked up at the first end of
  /// each (a race only looks one up twice).
  static constexpr std::size_t statuses = 16;
  std::array<std::atomic<telemetry::counter*>, statuses> ended{};
  std::array<std::atomic<telemetry::histogram*>, statuses> seconds{};
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

  /// A run of `s`'s workflow ended with `status` after `seconds` since it
  /// was created.
  void run_ended(workflow_series& s, run_status status, double seconds);

  /// A call of `s`'s object handler ended with `status` after `seconds`
  /// since it was made.
  void object_call_ended(workflow_series& s, run_status status,
                         double seconds);

  /// A run (or call) of `s`'s series, created at `created_at_ms`, ended
  /// with `status` at `now_ms`: `run_ended` or `object_call_ended`.
  void ended(workflow_series& s, run_status status, std::int64_t created_at_ms,
             std::int64_t now_ms);

  /// A run's end that no execution counted (given up on before it started:
  /// RETRIES_EXCEEDED; cancelled by a client while its write was in
  /// flight), counted as `run_ended` or `object_call_ended` would.
  void ended_without_execution(const persistence::run_record& run,
                               run_status status, std::int64_t now_ms);

  /// A queue item of `queue` started after waiting `seconds` (since it was
  /// enqueued or became due, whichever is later).
  void queue_started(const std::string& queue, double seconds);
  void dead_lettered(const std::string& queue);

  /// The store-wide gauges as last computed (by any process), at `now_ms`.
  void store_gauges(const persistence::store_gauges& g, std::int64_t now_ms);

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
  /// When the store-wide gauges were computed (ms; 0: never here).
  std::atomic<std::int64_t> store_gauges_at_ms{0};
  telemetry::gauge& store_gauges_age;

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
  telemetry::family<telemetry::gauge>& store_runs_;
  telemetry::family<telemetry::gauge>& store_queue_depth_;
  telemetry::gauge& store_oldest_pending_;
  telemetry::gauge& store_passivated_;
  persistence::store_metrics store_;

  std::mutex mtx_;
  std::unordered_map<std::string, std::unique_ptr<workflow_series>> series_;
};

} // namespace perdure::detail
