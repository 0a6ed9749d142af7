#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/call_result.hpp"
#include "perdure/config.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/run_listing.hpp"
#include "perdure/telemetry/metrics.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure {

namespace detail {
struct client_access;
} // namespace detail

/// Options for starting a workflow.
struct start_options {
  /// The workflow id, which is also its idempotency key: starting again with
  /// the same id returns the existing run. Empty: a fresh random id.
  std::string id{};
  /// Cancel the run (and its children) if it has not ended this long after
  /// its start; zero: no deadline. Survives restarts.
  std::chrono::milliseconds timeout{0};
  /// The W3C `traceparent` of the span the run is started in (an HTTP
  /// handler's, say): stored with the run, so its spans, its children's and
  /// its calls' join that trace through crashes and takeovers. Empty: the
  /// span of the step this is called in, if any; else a trace of its own.
  std::string traceparent{};
};

/// Options for calling a virtual object's handler.
struct call_options {
  /// Makes the call idempotent: per object, one invocation per key, ever;
  /// calling again with it returns the first one's result (also after a
  /// crash of the caller). Empty: every call is a new invocation.
  std::string idempotency_key{};
  /// As `start_options::traceparent`, for the invocation.
  std::string traceparent{};
};

/// How `client::resume` puts a run back to work.
struct resume_options {
  /// Re-stamps the run with this app version (processes of that version
  /// claim it); unset: it keeps its own.
  std::optional<std::string> app_version;
  /// Why, for the run's history (a `resume` entry says what was done).
  std::string reason;
};

/// What a bulk action by filter did, or would do (`dry_run`).
struct bulk_result {
  /// Runs the filter matched that the action applies to.
  std::int64_t matched = 0;
  /// Runs it was applied to (0 on a dry run).
  std::int64_t done = 0;
  /// The first few matched, for a look before acting.
  std::vector<std::string> sample{};
  /// Runs matched but refused, and why (e.g. queue items).
  std::vector<std::pair<std::string, std::string>> refused{};
  /// `fork_matching`: the runs it started, as (source, fork) ids.
  std::vector<std::pair<std::string, std::string>> created{};
};

/// Called as a bulk action goes: how many runs it has acted on so far
/// (done or refused).
using bulk_progress = std::function<void(std::int64_t)>;

/// The store a client talks to (`client::store_info`).
struct store_description {
  /// `postgresql` or `sqlite`.
  std::string dialect;
  /// The schema version the database is at, and the one this build
  /// migrates to.
  int schema_version = 0, latest_schema_version = 0;
};

/// Where `client::fork` starts the new run. At most one of the three
/// points; none: the whole journal is copied.
struct fork_options {
  /// The first journal index not copied (see `history`): the operation
  /// there and everything after it run anew.
  std::optional<std::int32_t> from_step;
  /// The first step (or transaction) recorded with this name.
  std::optional<std::string> from_step_name;
  /// The last step (or transaction) that failed.
  bool from_last_failure = false;
  /// The new run's id (fresh if empty); forking again with it is refused.
  std::string id;
  /// The new run's app version (processes of that version claim it);
  /// unset: the source's.
  std::optional<std::string> app_version;
  /// Why, for both runs' histories (a `fork` and a `forked` entry).
  std::string reason;
};

/// Starts, signals, watches and lists workflow runs without running any:
/// for processes that only hand work to the runtimes sharing the database
/// (web handlers, approvers, CLIs). A client runs no actors, recovers
/// nothing and holds no executor lease; a run it starts is adopted by a
/// runtime that registered its workflow. It connects when constructed.
/// Thread-safe. `runtime` offers all of this too.
class client {
public:
  /// Connects to `cfg.database_url` (creating Perdure's tables if needed).
  /// Throws `perdure::error` (`store_unavailable`) if it cannot.
  explicit client(config cfg);

  /// Closes the connections (see `stop`).
  virtual ~client();

  client(const client&) = delete;
  client& operator=(const client&) = delete;

  // -- workflows --------------------------------------------------------------

  /// Starts workflow `name` with `input`, or returns the existing run when
  /// `opts.id` exists with the same name and input. Throws `perdure::error`:
  /// `unknown_workflow` (a runtime that did not register it),
  /// `invalid_argument`, `payload_too_large`, `conflicting_id` (same id,
  /// other name or input), `not_running`.
  template <class R, class A>
  workflow_handle<R> start_workflow(std::string_view name, const A& input,
                                    start_options opts = {}) {
    auto bytes = persistence::encode(input, cfg().payload_encoding);
    return {impl_, start_run(name, std::move(bytes), std::move(opts))};
  }

  /// Starts workflow `name`, which takes no input.
  template <class R>
  workflow_handle<R> start_workflow(std::string_view name,
                                    start_options opts = {}) {
    return {impl_, start_run(name, std::string{}, std::move(opts))};
  }

  /// Returns a handle to the run `id`, which may belong to another process.
  template <class R>
  workflow_handle<R> retrieve_workflow(std::string id) const {
    return {impl_, std::move(id)};
  }

  /// Cancels run `id` and its PENDING children, from any thread: it ends
  /// CANCELLED at once, woken if it sleeps or waits (code in a running step
  /// finishes, but its result is not recorded). A run that already ended is
  /// left as it is. Throws `not_found` for an unknown id.
  void cancel(const std::string& id);

  /// Puts run `id`, ended ERROR, CANCELLED or RETRIES_EXCEEDED, or BLOCKED,
  /// back to work under the same id, e.g. once a bug is fixed (a queue
  /// item's DEAD_LETTER goes back to its queue, as `queues::requeue`
  /// does); its history records when and `opts.reason`. Its end is
  /// cleared, and a runtime that can run it adopts it, replaying its
  /// journal on the code it runs now; a handle's `get()` then waits for its
  /// new end. A run that ended ERROR forgets from the last step (or
  /// transaction) that failed on: that step and what followed it run again,
  /// but a transaction that committed is taken as recorded, not committed
  /// twice; a saga that compensated after that failure ends as it did. A
  /// cancelled, RETRIES_EXCEEDED or BLOCKED run keeps its whole journal. A
  /// deadline that passed is dropped. Throws `not_found` for an unknown
  /// id, `invalid_argument` for a run in another status, an object
  /// invocation or a dead letter given an app version, and
  /// `conflicting_id` for a dead letter whose dedup id another item holds
  /// now.
  void resume(const std::string& id, resume_options opts = {});

  /// Starts a new run of run `id`'s workflow and inputs whose journal is
  /// `id`'s before the point `opts` names (transactional outputs and
  /// children as recorded, patches taken before it): what came before is
  /// replayed, not run again, and the rest runs on the code of the runtime
  /// that adopts it. Returns the new run's id. The source is untouched, in
  /// any status. Throws `not_found` for an unknown id, `conflicting_id` if
  /// `opts.id` exists, and `invalid_argument` for a point outside the
  /// journal, inside a saga's compensation, or between an awakeable, child
  /// or call and its outcome (that outcome goes to the source), or for an
  /// object invocation.
  std::string fork(const std::string& id, fork_options opts = {});

  /// `resume` of every run `filter` matches that ended ERROR, CANCELLED,
  /// RETRIES_EXCEEDED or DEAD_LETTER, or is BLOCKED (a filter without a
  /// status takes all five), each in its own transaction, walking the
  /// listing page by page (`filter.limit` a page; its cursor is ignored).
  /// Runs retention collected are not matched: only their ids are left.
  /// `dry_run`: counts and samples them and changes nothing (it counts
  /// too what the store would refuse: a queue item that is not a dead
  /// letter, an object invocation).
  bulk_result resume_matching(run_filter filter, resume_options opts = {},
                              bool dry_run = false,
                              const bulk_progress& progress = {});

  /// `fork` of every run `filter` matches (any status but object
  /// invocations), each from the point `opts` names and under a fresh id
  /// (`opts.id` must be empty), walking the listing page by page.
  /// `created` pairs each source with its fork; a run the point does not
  /// fit is in `refused`, with why; runs retention collected are not
  /// matched. `dry_run`: counts and samples the runs and changes nothing.
  bulk_result fork_matching(run_filter filter, fork_options opts = {},
                            bool dry_run = false,
                            const bulk_progress& progress = {});

  /// Returns every app version that processes ran or unended work carries:
  /// its live processes, its PENDING, ENQUEUED and BLOCKED work and the
  /// oldest of it, and whether that work is stranded (no live process of
  /// the version). Runtimes note their own version, and warn of stranded
  /// work, at their takeover passes (at most once a lease).
  std::vector<version_report> versions();

  /// Re-stamps the PENDING and BLOCKED runs (and queue items waiting in
  /// their queue) of app version `from_version` with `to_version`, for
  /// processes of that version to run: e.g. runs stranded on a version
  /// that is gone, once the new code replays them. Object invocations are
  /// not moved. Each run's history records the move and `reason`.
  /// Returns how many runs moved.
  std::int64_t move_runs(const std::string& from_version,
                         const std::string& to_version,
                         const std::string& reason = {});

  /// Cancels every unended run `filter` matches (PENDING, ENQUEUED or
  /// BLOCKED; a filter without a status takes all three), each as `cancel`
  /// does, walking the listing page by page. `dry_run`: counts and samples
  /// them and changes nothing. `progress` is told as it goes.
  bulk_result cancel_matching(run_filter filter, bool dry_run = false,
                              const bulk_progress& progress = {});

  /// Returns everything the store holds of run `id` but its journal (see
  /// `history`). Throws `not_found` for an unknown id.
  run_detail describe(const std::string& id);

  /// Returns every executor row (runtimes' leases: live, stopped or
  /// lapsed) with the runs each holds.
  std::vector<executor_info> executors();

  /// Returns every queue a runtime registered, with its limits.
  std::vector<queue_info> queues();

  /// Returns why this process is not ready for work, or an empty string
  /// if it is: not started, a runtime whose executor lease is lost (it
  /// stalled or was cut off), or a store that does not answer (after the
  /// retry budget). One statement on the store.
  std::string not_ready();

  /// Returns which store this is and its schema version.
  store_description store_info();

  /// Returns every `perdure_*` metric of this process (its gauges sampled
  /// now), for a team's own registry; `telemetry::prometheus_text` writes
  /// it as Prometheus text (what the admin endpoint's /metrics serves).
  telemetry::snapshot metrics();

  /// Shows `v` the same metrics without copying them first (for a text of
  /// megabytes: `telemetry::prometheus_writer`).
  void read_metrics(telemetry::series_visitor& v);

  /// Returns one page of runs matching `filter`, newest first (id, name,
  /// status, executor, times, error). Throws `invalid_argument` for a bad
  /// limit or cursor.
  run_page list_runs(const run_filter& filter = {});

  /// Returns what run `id` recorded, in journal order (see `step_record`),
  /// with what was done to it from outside (resumed, forked, moved: index
  /// -1, outcome `event`) among the entries, before the index it came
  /// before (a resume: before what ran again). Throws `not_found` for an unknown id.
  std::vector<step_record> history(const std::string& id);

  /// Returns run `id` as JSON: its workflow, inputs and whole journal
  /// (payloads as stored: JSON text, or base64 for binary ones), for
  /// `perdure::testing::replay` to check that new code still replays it
  /// (see perdure/testing/replay.hpp), or for a bug report. Throws
  /// `not_found` for an unknown id.
  std::string export_run(const std::string& id);

  // -- virtual objects --------------------------------------------------------

  /// Stores a call of handler `handler` of object `key` of type `type` with
  /// `input` in the key's inbox and returns once it is durable (before it
  /// runs): the handle's `get()` waits for its result. Invocations of one
  /// key run in the order they were stored; exclusive ones one at a time,
  /// across every process. Throws `perdure::error`: `unknown_workflow` (a
  /// runtime that did not register the type or handler),
  /// `invalid_argument`, `payload_too_large`, `conflicting_id` (the
  /// idempotency key was used for another call), `not_running`.
  template <class R, class A>
  workflow_handle<R> send(std::string_view type, std::string_view key,
                          std::string_view handler, const A& input,
                          call_options opts = {}) {
    return {impl_, invoke(type, key, handler,
                          persistence::encode(input, cfg().payload_encoding),
                          std::move(opts))};
  }

  /// `send` for a handler without input.
  template <class R>
  workflow_handle<R> send(std::string_view type, std::string_view key,
                          std::string_view handler, call_options opts = {}) {
    return {impl_, invoke(type, key, handler, std::string{}, std::move(opts))};
  }

  /// Sends the call `send` would, `delay` from now (durably: a runtime
  /// holds the timer, across restarts). The handle ends when the call is in
  /// the key's inbox; the same idempotency key schedules it once.
  template <class A>
  workflow_handle<void> send_later(std::string_view type, std::string_view key,
                                   std::string_view handler, const A& input,
                                   std::chrono::milliseconds delay,
                                   call_options opts = {}) {
    return {impl_, schedule_call(type, key, handler,
                                 persistence::encode(input,
                                                     cfg().payload_encoding),
                                 delay, std::move(opts))};
  }

  /// Calls handler `handler` of object `key` with `input` and waits for its
  /// result (see `send`). Throws what `send` and `workflow_handle::get`
  /// throw (a handler that failed: `workflow_failed`).
  template <class R, class A>
  R call(std::string_view type, std::string_view key, std::string_view handler,
         const A& input, call_options opts = {}) {
    return call_result<R>{
      invoke_and_wait(type, key, handler,
                      persistence::encode(input, cfg().payload_encoding),
                      std::move(opts))}
      .get();
  }

  /// `call` for a handler without input.
  template <class R>
  R call(std::string_view type, std::string_view key, std::string_view handler,
         call_options opts = {}) {
    return call_result<R>{invoke_and_wait(type, key, handler, std::string{},
                                          std::move(opts))}
      .get();
  }

  /// `call` without waiting: returns the call's id at once (in a runtime,
  /// before it is stored: the writer stores it; in a client process it is
  /// stored on this thread first); `done` runs once with its end (the
  /// result, or what `call` would have thrown: a store error says to call
  /// again with an idempotency key) on the thread shared by `when_done`
  /// callbacks: keep it short.
  /// An end committed by this process reaches `done` from memory (no read);
  /// one elsewhere is read from the store. `done` gets `not_running` for a
  /// call whose end this process did not see before it stopped. Throws at
  /// once what `send` throws before storing (`unknown_workflow`,
  /// `invalid_argument`, `payload_too_large`, `not_running`).
  template <class R, class A>
  std::string call_async(std::string_view type, std::string_view key,
                         std::string_view handler, const A& input,
                         std::function<void(call_result<R>)> done,
                         call_options opts = {}) {
    return invoke_async(type, key, handler,
                        persistence::encode(input, cfg().payload_encoding),
                        std::move(opts), wrap(std::move(done)));
  }

  /// `call_async` for a handler without input.
  template <class R>
  std::string call_async(std::string_view type, std::string_view key,
                         std::string_view handler,
                         std::function<void(call_result<R>)> done,
                         call_options opts = {}) {
    return invoke_async(type, key, handler, std::string{}, std::move(opts),
                        wrap(std::move(done)));
  }

  /// Returns the state of object `key` of type `type` as last committed,
  /// or nothing if it has none yet.
  template <class State>
  std::optional<State> object_state(std::string_view type,
                                    std::string_view key) {
    auto bytes = state_bytes(type, key);
    if (!bytes)
      return std::nullopt;
    return persistence::decode<State>(*bytes);
  }

  /// `object_state` as stored (JSON text unless the binary encoding was
  /// chosen), for tools that do not know the state's type.
  std::optional<std::string> object_state_encoded(std::string_view type,
                                                  std::string_view key) {
    return state_bytes(type, key);
  }

  /// Returns up to `limit` keys of type `type` that have a row (called at
  /// least once), in key order, after `after`.
  std::vector<std::string> list_objects(std::string_view type,
                                        std::string_view after = {},
                                        std::int64_t limit = 100);

  // -- awakeables -------------------------------------------------------------

  /// Completes awakeable `id` (see `workflow_context::awakeable`) with
  /// `value`, from any thread: persisted first, then delivered; a value that
  /// arrives before the run awaits it waits for it. Throws `perdure::error`:
  /// `not_found` for an unknown id, `already_resolved` if it was resolved or
  /// rejected before (the first outcome stays), `payload_too_large`.
  template <class T>
  void resolve_awakeable(const std::string& id, const T& value) {
    resolve(id, true, persistence::encode(value, cfg().payload_encoding));
  }

  /// Fails awakeable `id`: the awaiting code gets a `terminal_error` with
  /// `reason`. Same errors as `resolve_awakeable`.
  void reject_awakeable(const std::string& id, std::string reason) {
    resolve(id, false, std::move(reason));
  }

  /// `resolve_awakeable` with a value already encoded, e.g. JSON text
  /// `{"value":...}` as `persistence::encode` writes it (the CLI's way).
  void resolve_awakeable_encoded(const std::string& id, std::string bytes) {
    resolve(id, true, std::move(bytes));
  }

  // -- promises, messages, events ---------------------------------------------

  /// Completes promise `name` of run `workflow_id` (see
  /// `workflow_context::promise`), before or after the run waits for it.
  /// Throws `not_found` (no such run), `already_resolved`,
  /// `payload_too_large`.
  template <class T>
  void resolve_promise(const std::string& workflow_id, const std::string& name,
                       const T& value) {
    complete_promise(workflow_id, name, true,
                     persistence::encode(value, cfg().payload_encoding));
  }

  /// `resolve_promise` with a value already encoded.
  void resolve_promise_encoded(const std::string& workflow_id,
                               const std::string& name, std::string bytes) {
    complete_promise(workflow_id, name, true, std::move(bytes));
  }

  /// Fails promise `name`: the waiting code gets a `terminal_error`.
  void reject_promise(const std::string& workflow_id, const std::string& name,
                      std::string reason) {
    complete_promise(workflow_id, name, false, std::move(reason));
  }

  /// Sends `value` to run `workflow_id` on `topic`; it waits, in sending
  /// order, for `workflow_context::recv`. Throws `not_found` (no such run),
  /// `payload_too_large`.
  template <class T>
  void send(const std::string& workflow_id, const std::string& topic,
            const T& value) {
    send_bytes(workflow_id, topic,
               persistence::encode(value, cfg().payload_encoding));
  }

  /// `send` of a message already encoded.
  void send_encoded(const std::string& workflow_id, const std::string& topic,
                    std::string bytes) {
    send_bytes(workflow_id, topic, std::move(bytes));
  }

  /// Returns event `key` of run `workflow_id` (see
  /// `workflow_context::set_event`), waiting up to `timeout` for it to be
  /// published; nothing if it was not by then (an unknown run too).
  template <class T>
  std::optional<T> get_event(const std::string& workflow_id,
                             const std::string& key,
                             std::chrono::milliseconds timeout = {}) {
    auto bytes = event_bytes(workflow_id, key, timeout);
    if (!bytes)
      return std::nullopt;
    return persistence::decode<T>(*bytes);
  }

  /// Returns the configuration (with the executor id filled in).
  const config& cfg() const noexcept;

protected:
  friend struct detail::client_access;

  struct runtime_mode {};

  /// A runtime's: not started, not connected.
  client(runtime_mode, config cfg);

  std::shared_ptr<detail::runtime_impl> impl_;

private:
  void resolve(const std::string& id, bool ok, std::string bytes);
  void complete_promise(const std::string& workflow_id, const std::string& name,
                        bool ok, std::string bytes);
  void send_bytes(const std::string& workflow_id, const std::string& topic,
                  std::string bytes);
  std::optional<std::string> event_bytes(const std::string& workflow_id,
                                         const std::string& key,
                                         std::chrono::milliseconds timeout);
  std::string start_run(std::string_view name, std::string inputs,
                        start_options opts);
  std::string invoke(std::string_view type, std::string_view key,
                     std::string_view handler, std::string inputs,
                     call_options opts);
  std::optional<std::string> state_bytes(std::string_view type,
                                         std::string_view key);
  /// `call`'s way: its caller woken once, by its end (or failure).
  detail::call_end invoke_and_wait(std::string_view type, std::string_view key,
                                   std::string_view handler, std::string inputs,
                                   call_options opts);
  std::string invoke_async(std::string_view type, std::string_view key,
                           std::string_view handler, std::string inputs,
                           call_options opts,
                           std::function<void(detail::call_end)> done);
  template <class R>
  static std::function<void(detail::call_end)>
  wrap(std::function<void(call_result<R>)> done) {
    return [done = std::move(done)](detail::call_end end) {
      done(call_result<R>{std::move(end)});
    };
  }
  std::string schedule_call(std::string_view type, std::string_view key,
                            std::string_view handler, std::string inputs,
                            std::chrono::milliseconds delay, call_options opts);
};

} // namespace perdure
