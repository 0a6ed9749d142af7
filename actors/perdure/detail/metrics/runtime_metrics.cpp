#include "perdure/detail/metrics/runtime_metrics.hpp"

namespace perdure::detail {

namespace {

using telemetry::latency_buckets;
using telemetry::size_buckets;

/// Run durations reach hours and days (sleeps, approvals).
constexpr double run_bounds[] = {0.01, 0.05, 0.1, 0.5, 1,     5,     30,
                                 60,   300,  900, 3600, 21600, 86400, 604800};

} // namespace

runtime_metrics::runtime_metrics()
  : recoveries(registry
                 .add_counter("perdure_recoveries_total",
                              "Runs this process brought back from the store "
                              "at start-up or after regaining its lease.")
                 .with()),
    takeovers(registry
                .add_counter("perdure_takeovers_total",
                             "Runs this process took over from executors "
                             "whose lease lapsed.")
                .with()),
    fenced_writes(registry
                    .add_counter("perdure_fenced_writes_total",
                                 "Writes refused because another process "
                                 "owns the run now (its epoch moved on).")
                    .with()),
    lease_losses(registry
                   .add_counter("perdure_lease_losses_total",
                                "Times this process lost its lease (stalled or "
                                "cut off past lease_timeout): its runs "
                                "stopped here.")
                   .with()),
    timer_lateness(registry
                     .add_histogram("perdure_timer_lateness_seconds",
                                    "How late durable timers fired.",
                                    latency_buckets())
                     .with()),
    runs_in_memory(registry
                     .add_gauge("perdure_runs_in_memory",
                                "Runs and invocations with an actor in this "
                                "process.")
                     .with()),
    keys_in_memory(registry
                     .add_gauge("perdure_object_keys_in_memory",
                                "Object keys with an actor in this process.")
                     .with()),
    step_threads_busy(registry
                        .add_gauge("perdure_step_threads_busy",
                                   "Step threads running a step now.")
                        .with()),
    step_backlog(registry
                   .add_gauge("perdure_step_backlog",
                              "Steps waiting for a free step thread.")
                   .with()),
    lease_age(registry
                .add_gauge("perdure_lease_age_seconds",
                           "Time since this process last renewed its lease "
                           "(alert well below lease_timeout).")
                .with()),
    runs_stranded(registry
                    .add_gauge("perdure_runs_stranded",
                               "PENDING, ENQUEUED or BLOCKED runs of app "
                               "versions no live executor runs (at the last "
                               "takeover pass).")
                    .with()),
    timers_armed(registry
                   .add_gauge("perdure_timers_armed",
                              "Durable timers armed in this process.")
                   .with()),
    started_(registry.add_counter(
      "perdure_runs_started_total",
      "Runs (and object calls) this process started from their beginning.",
      {"workflow"})),
    ended_(registry.add_counter("perdure_runs_ended_total",
                                "Runs that ended here, by final status.",
                                {"workflow", "status"})),
    run_seconds_(registry.add_histogram(
      "perdure_run_duration_seconds",
      "From a run's creation to its end, by final status.", run_bounds,
      {"workflow", "status"})),
    steps_(registry.add_counter(
      "perdure_steps_total",
      "Steps executed (never replayed ones), by outcome: ok, or failed "
      "(its last attempt failed; earlier ones are step_retries_total).",
      {"workflow", "outcome"})),
    step_retries_(registry.add_counter("perdure_step_retries_total",
                                       "Step attempts that failed and are "
                                       "tried again.",
                                       {"workflow"})),
    step_seconds_(registry.add_histogram("perdure_step_duration_seconds",
                                         "A step body's time (executed "
                                         "attempts only).",
                                         latency_buckets(), {"workflow"})),
    blocked_(registry.add_counter("perdure_runs_blocked_total",
                                  "Runs set BLOCKED here on non-determinism.",
                                  {"workflow"})),
    object_calls_(registry.add_counter(
      "perdure_object_calls_total",
      "Object handler calls that ended here, by final status.",
      {"object", "status"})),
    object_seconds_(registry.add_histogram(
      "perdure_object_call_duration_seconds",
      "From an object call's creation to its end (queueing at the key "
      "included).",
      latency_buckets(), {"object"})),
    queue_starts_(registry.add_counter("perdure_queue_starts_total",
                                       "Queue items started here.",
                                       {"queue"})),
    queue_wait_(registry.add_histogram(
      "perdure_queue_wait_seconds",
      "From an item being due (enqueued, or its delay or backoff over) to "
      "its start.",
      latency_buckets(), {"queue"})),
    dead_letters_(registry.add_counter("perdure_dead_letters_total",
                                       "Queue items dead-lettered here.",
                                       {"queue"})) {
  auto& retries = registry.add_counter(
    "perdure_store_retries_total",
    "Store operations tried again after a transient failure, by kind: "
    "retry (busy, serialization), reconnect (connection lost), full (disk "
    "full).",
    {"kind"});
  store_.retries = &retries.with({"retry"});
  store_.reconnects = &retries.with({"reconnect"});
  store_.full = &retries.with({"full"});
  store_.unavailable
    = &registry
         .add_counter("perdure_store_unavailable_total",
                      "Store operations given up after the retry budget "
                      "(retry_budget): the database was unreachable or full.")
         .with();
  store_.commit_seconds
    = &registry
         .add_histogram("perdure_checkpoint_commit_seconds",
                        "The journal writer's group commits: one "
                        "transaction's time.",
                        latency_buckets())
         .with();
  store_.batch_writes
    = &registry
         .add_histogram("perdure_group_commit_batch_size",
                        "Writes (steps, ends, creations) per group commit.",
                        size_buckets())
         .with();
}

workflow_series& runtime_metrics::of(const std::string& workflow,
                                     const std::string& object_type) {
  auto label = object_type.empty() ? workflow : object_type + "/" + workflow;
  std::lock_guard guard{mtx_};
  auto& s = series_[label];
  if (!s)
    s = std::make_unique<workflow_series>(workflow_series{
      label, object_type, started_.with({label}), steps_.with({label, "ok"}),
      steps_.with({label, "failed"}), step_retries_.with({label}),
      blocked_.with({label}), step_seconds_.with({label})});
  return *s;
}

void runtime_metrics::run_ended(const std::string& workflow,
                                run_status status, double seconds) {
  std::string name{to_string(status)};
  ended_.with({workflow, name}).add();
  run_seconds_.with({workflow, name}).observe(seconds);
}

void runtime_metrics::object_call_ended(const std::string& type,
                                        run_status status, double seconds) {
  object_calls_.with({type, std::string{to_string(status)}}).add();
  object_seconds_.with({type}).observe(seconds);
}

void runtime_metrics::queue_started(const std::string& queue,
                                    double seconds) {
  queue_starts_.with({queue}).add();
  queue_wait_.with({queue}).observe(seconds < 0 ? 0 : seconds);
}

void runtime_metrics::dead_lettered(const std::string& queue) {
  dead_letters_.with({queue}).add();
}

} // namespace perdure::detail
