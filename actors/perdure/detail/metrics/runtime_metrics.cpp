#include "perdure/detail/metrics/runtime_metrics.hpp"

#include <algorithm>
#include <unordered_set>

#include "perdure/persistence/records.hpp"

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
    store_gauges_age(registry
                       .add_gauge("perdure_store_gauges_age_seconds",
                                  "Since the perdure_store_* gauges were "
                                  "computed (by any process; -1: not yet "
                                  "read here).")
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
                                       {"queue"})),
    store_runs_(registry.add_gauge(
      "perdure_store_runs",
      "Runs in the store by status and app version (store-wide: the same "
      "in every process; aggregate with max).",
      {"status", "version"})),
    store_queue_depth_(registry.add_gauge(
      "perdure_store_queue_depth",
      "Queue items not ended, by queue and state: queued (ready or "
      "delayed) or running (store-wide).",
      {"queue", "state"})),
    store_oldest_pending_(
      registry
        .add_gauge("perdure_store_oldest_pending_age_seconds",
                   "Age of the oldest run or queue item not ended "
                   "(store-wide; 0: none).")
        .with()),
    store_passivated_(registry
                        .add_gauge("perdure_store_runs_passivated",
                                   "Runs waiting out of memory, in the "
                                   "store (store-wide).")
                        .with()) {
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
  // Keyed apart from the label: a workflow named "a/b" is not handler b of
  // object type a (their series share the label, never the struct).
  auto key = object_type + '\0' + workflow;
  std::lock_guard guard{mtx_};
  auto& s = series_[key];
  if (!s) {
    auto label = object_type.empty() ? workflow : object_type + "/" + workflow;
    // Not make_unique: an aggregate with atomics (clang 14 has no
    // parenthesised aggregate initialisation).
    s.reset(new workflow_series{
      label, object_type, started_.with({label}), steps_.with({label, "ok"}),
      steps_.with({label, "failed"}), step_retries_.with({label}),
      blocked_.with({label}), step_seconds_.with({label})});
  }
  return *s;
}

namespace {

/// `slot`'s series, looked up in `f` by `labels` the first time.
template <class Metric, class Labels>
Metric& cached(std::atomic<Metric*>& slot, telemetry::family<Metric>& f,
               Labels&& labels) {
  auto* m = slot.load(std::memory_order_acquire);
  if (!m) {
    m = &f.with(labels());
    slot.store(m, std::memory_order_release);
  }
  return *m;
}

} // namespace

void runtime_metrics::run_ended(workflow_series& s, run_status status,
                                double seconds) {
  auto i = static_cast<std::size_t>(status);
  auto labels = [&] {
    return std::vector<std::string>{s.name, std::string{to_string(status)}};
  };
  if (i >= workflow_series::statuses) {
    ended_.with(labels()).add();
    run_seconds_.with(labels()).observe(seconds);
    return;
  }
  cached(s.ended[i], ended_, labels).add();
  cached(s.seconds[i], run_seconds_, labels).observe(seconds);
}

void runtime_metrics::object_call_ended(workflow_series& s, run_status status,
                                        double seconds) {
  auto i = static_cast<std::size_t>(status);
  auto labels = [&] {
    return std::vector<std::string>{s.object_type,
                                    std::string{to_string(status)}};
  };
  auto by_type = [&] { return std::vector<std::string>{s.object_type}; };
  if (i >= workflow_series::statuses)
    object_calls_.with(labels()).add();
  else
    cached(s.ended[i], object_calls_, labels).add();
  // One histogram per type: every status's slot holds it.
  cached(s.seconds[0], object_seconds_, by_type).observe(seconds);
}

void runtime_metrics::ended_without_execution(
  const persistence::run_record& run, run_status status, std::int64_t now_ms) {
  ended(of(run.name, run.object_type), status, run.created_at_ms, now_ms);
}

void runtime_metrics::ended(workflow_series& s, run_status status,
                            std::int64_t created_at_ms, std::int64_t now_ms) {
  auto seconds =
    static_cast<double>(std::max<std::int64_t>(0, now_ms - created_at_ms))
    / 1000.0;
  if (s.object_type.empty())
    run_ended(s, status, seconds);
  else
    object_call_ended(s, status, seconds);
}

void runtime_metrics::queue_started(const std::string& queue,
                                    double seconds) {
  queue_starts_.with({queue}).add();
  queue_wait_.with({queue}).observe(seconds < 0 ? 0 : seconds);
}

void runtime_metrics::dead_lettered(const std::string& queue) {
  dead_letters_.with({queue}).add();
}

void runtime_metrics::store_gauges(const persistence::store_gauges& g,
                                   std::int64_t now_ms) {
  // The new values first, then 0 for a status or queue no longer in the
  // store: a scrape in between never sees every gauge at 0.
  std::unordered_set<const telemetry::gauge*> present;
  double oldest = 0, passivated = 0;
  for (auto& r : g.readings) {
    auto v = static_cast<double>(r.value);
    telemetry::gauge* x = nullptr;
    if (r.gauge == "runs")
      x = &store_runs_.with({r.label_a, r.label_b});
    else if (r.gauge == "queue_depth")
      x = &store_queue_depth_.with({r.label_a, r.label_b});
    else if (r.gauge == "oldest_pending_ms")
      oldest = static_cast<double>(std::max<std::int64_t>(0, now_ms - r.value))
               / 1000.0;
    else if (r.gauge == "passivated")
      passivated = v;
    if (x) {
      x->set(v);
      present.insert(x);
    }
  }
  auto zero_absent = [&](telemetry::gauge& x) {
    if (present.count(&x) == 0)
      x.set(0);
  };
  store_runs_.each(zero_absent);
  store_queue_depth_.each(zero_absent);
  store_oldest_pending_.set(oldest);
  store_passivated_.set(passivated);
  store_gauges_at_ms = g.computed_at_ms;
}

} // namespace perdure::detail
