#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "perdure/clock.hpp"
#include "perdure/persistence/codec.hpp"

namespace spdlog {
class logger;
} // namespace spdlog

namespace perdure::telemetry {
class span_sink;
} // namespace perdure::telemetry

namespace perdure {

/// What a run whose code no longer replays its journal becomes.
enum class non_determinism_policy {
  /// BLOCKED: not ended, out of memory, tried again by processes started
  /// later (their code may be fixed), resumable, cancellable.
  block,
  /// ERROR, for good (as before BLOCKED existed).
  fail,
};

/// Everything a runtime needs to know. An aggregate: set fields with
/// designated initializers or start from `config::from_env()`.
struct config {
  /// `postgresql://...` or `sqlite:///path/to/file.db`.
  std::string database_url = "sqlite://perdure.db";
  /// PostgreSQL schema holding Perdure's tables.
  std::string schema = "perdure";
  /// Identity of this process, held as a lease in the store: two live
  /// processes never share one (the second `start()` fails with
  /// `executor_in_use`). Empty (the default): `<host>-<pid>-<random>`, a
  /// new id per process; when a process dies, the others take its runs
  /// over. Give a fixed id to have a restarted process recover its own
  /// runs at once.
  std::string executor_id;
  /// Recorded with every run; useful when code changes between deploys.
  std::string app_version;
  /// A run whose code no longer replays its journal (a deploy changed it
  /// without a patch): BLOCKED (the default) or ERROR. Object invocations,
  /// runs they wait for and queue items end ERROR either way (a blocked
  /// one would hold its key's later calls, or its queue's dedup id).
  non_determinism_policy on_non_determinism = non_determinism_policy::block;
  /// How payloads are written (reading accepts both).
  persistence::encoding payload_encoding = persistence::encoding::json;
  /// Largest inputs, step result or output accepted, in bytes.
  std::size_t max_payload_bytes = 16u << 20;
  /// A run recovered more often than this ends RETRIES_EXCEEDED.
  std::int32_t max_recovery_attempts = 100;
  /// CAF scheduler threads (actor turns only; never blocked).
  std::size_t scheduler_threads = 2;
  /// Threads running user step code, which may block.
  std::size_t step_threads = 8;
  /// Threads running the runtime's own store I/O (never user code).
  std::size_t control_threads = 4;
  /// Connections of the group-commit journal writer: with more than one,
  /// one batch commits while the next is written, and a key's calls and
  /// ends keep their order (they go through their key's connection). Two
  /// by default: object calls over many keys run 1.5-1.8 times as fast as
  /// with one, steps no slower (docs/performance.md, issue 27). SQLite has
  /// one writer at a time, so it always uses one.
  std::size_t journal_connections = 2;
  /// Most connections opened for starting runs and transactional steps,
  /// which run on many threads at once (callers beyond it wait).
  std::size_t pooled_connections = 16;
  /// How long transient database errors are retried.
  std::chrono::milliseconds db_retry_budget{30'000};
  /// The time source of durable timers; null means the system clock. Tests
  /// give a `perdure::testing::manual_clock`.
  std::shared_ptr<perdure::clock> clock;
  /// A run that will sleep or wait longer than this is dropped from memory
  /// (actor stopped, coroutine frame destroyed) and brought back by its
  /// timer or by a delivery, through replay.
  std::chrono::milliseconds passivate_after{10'000};
  /// A virtual object's actor idle (no invocation running or queued) this
  /// long leaves memory; its next call brings it back from its row. The key
  /// stays this process's until it stops.
  std::chrono::milliseconds object_idle_timeout{10'000};
  /// How long a runtime may miss heartbeats (stalled, cut off from the
  /// database) before others take its runs over; a holder that died is
  /// seen at once on PostgreSQL (its session lock goes with it) and its
  /// runs are taken over within about a second.
  std::chrono::milliseconds lease_timeout{10'000};
  /// Where Perdure logs: the application's spdlog logger, whose level and
  /// sinks apply. Null: spdlog's default logger. Lines name the run (and
  /// step); a flood of one warning (runs fenced after a takeover) is
  /// summarised, one line per 5 s.
  std::shared_ptr<spdlog::logger> logger;
  /// How often a handle waiting on a run owned by another process polls.
  std::chrono::milliseconds poll_interval{100};
  /// How soon a run left without an actor while the process lives (its
  /// checkpoint failed past `db_retry_budget`, its actor threw) is revived;
  /// while the store keeps failing, tries back off up to 8 times this.
  std::chrono::milliseconds orphan_retry{500};
  /// How often the process looks for its own PENDING work with no actor
  /// here (a claim whose commit reply was lost, a load that failed after a
  /// claim): one count over an index; work missing at two looks in a row
  /// is brought back.
  std::chrono::milliseconds stranded_check{10'000};

  /// Whether opening the store brings its schema up to date (migrations
  /// run once, under a lock, by whichever process opens first). false: an
  /// operator's tool, perhaps on a role that may not change the schema;
  /// the schema must be at this version already, or opening fails saying
  /// so (`perdure migrate` brings it up).
  bool migrate_schema = true;

  /// Whether this runtime records its `perdure_*` metrics (an atomic add
  /// or two per step, run end and commit: see `client::metrics()`). Off,
  /// only the gauges sampled at a scrape and rare events (recoveries,
  /// takeovers, lease losses, fenced writes) are kept.
  bool metrics = true;
  /// How often the store-wide gauges (`perdure_store_*`: runs by status and
  /// version, queue depth, the oldest unended run) are computed, by one
  /// process at a time (whichever comes first); every process serves the
  /// latest.
  std::chrono::milliseconds store_gauges_interval{15'000};
  /// Where the runs' spans go (one per attempt, one per live operation: see
  /// README "Traces"), e.g. a `telemetry::otlp_exporter`; null: no spans.
  /// Perdure installs no global tracer: this is the only way in.
  std::shared_ptr<telemetry::span_sink> span_sink;

  /// Where `perdure::admin::endpoint` listens (`host:port`; port 0: any
  /// free one), e.g. `127.0.0.1:9464`; empty: the endpoint stays off.
  std::string admin_listen;
  /// The bearer token every `/api` request of the endpoint (reads and
  /// actions) requires; empty: none, allowed only on a loopback address.
  std::string admin_token;

  /// What `perdure::testing::check_crash_points` observes of a runtime:
  /// called after each checkpoint of a run committed (not on replay), and
  /// right before each step body runs, with the run's id and the
  /// operation's journal index. `wait_checking` is called before a
  /// waiting run reads the store for its delivery; a throw stands for a
  /// store failure (tests/faults uses it). Not for production use.
  struct test_hooks {
    std::function<void(const std::string& run_id, std::int32_t seq)>
      checkpoint_committed;
    std::function<void(const std::string& run_id, std::int32_t seq)>
      step_starting;
    std::function<void(const std::string& run_id, std::int32_t seq)>
      wait_checking;
  };
  std::shared_ptr<const test_hooks> testing;

  /// Returns the defaults overridden by the environment:
  /// `PERDURE_DATABASE_URL`, `PERDURE_SCHEMA`, `PERDURE_EXECUTOR_ID`,
  /// `PERDURE_APP_VERSION`, `PERDURE_ADMIN_LISTEN`, `PERDURE_ADMIN_TOKEN`;
  /// and a `span_sink` exporting OTLP/HTTP JSON if
  /// `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set (see
  /// `telemetry::otlp_exporter::from_env`).
  static config from_env();
};

} // namespace perdure
