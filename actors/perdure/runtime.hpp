#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "perdure/config.hpp"
#include "perdure/detail/workflow_entry.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure {

/// Options for starting a workflow.
struct start_options {
  /// The workflow id, which is also its idempotency key: starting again with
  /// the same id returns the existing run. Empty: a fresh random id.
  std::string id;
  /// Cancel the run (and its children) if it has not ended this long after
  /// its start; zero: no deadline. Survives restarts.
  std::chrono::milliseconds timeout{0};
};

/// Owns everything that runs durable code in this process: the CAF actor
/// system (one actor per run), the step executor, the group-commit journal
/// writer and the store connections.
///
/// Register workflows, then `start()` (which first recovers the runs this
/// executor left unfinished), then start workflows from any thread.
class runtime {
public:
  // -- constructors, destructors, and assignment operators --------------------

  explicit runtime(config cfg);

  /// Stops the runtime (see `stop`).
  ~runtime();

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  // -- registration -----------------------------------------------------------

  /// Registers `fn`, a coroutine `task<R>(workflow_context&, A)` or
  /// `task<R>(workflow_context&)`, under `name`. Names are stable
  /// identifiers: runs in the store refer to them.
  template <class F>
  void register_workflow(std::string name, F fn) {
    add_workflow(std::move(name), detail::make_workflow_entry(std::move(fn)));
  }

  // -- life cycle -------------------------------------------------------------

  /// Migrates the schema, recovers this executor's PENDING runs and starts
  /// accepting work. Throws `perdure::error` if the store is unusable.
  void start();

  /// Stops every run actor (their runs stay PENDING in the store and are
  /// recovered by the next start with the same executor id), then waits for
  /// running step code and commits the queued journal writes.
  void stop();

  // -- workflows --------------------------------------------------------------

  /// Starts workflow `name` with `input`, or returns the existing run when
  /// `opts.id` exists with the same name and input. Throws `perdure::error`:
  /// `unknown_workflow`, `invalid_argument`, `payload_too_large`,
  /// `conflicting_id` (same id, other name or input), `not_running`.
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

  /// Returns event `key` of run `workflow_id` (see
  /// `workflow_context::set_event`), waiting up to `timeout` for it to be
  /// published; nothing if it was not by then.
  template <class T>
  std::optional<T> get_event(const std::string& workflow_id,
                             const std::string& key,
                             std::chrono::milliseconds timeout = {}) {
    auto bytes = event_bytes(workflow_id, key, timeout);
    if (!bytes)
      return std::nullopt;
    return persistence::decode<T>(*bytes);
  }

  /// Returns the configuration.
  const config& cfg() const noexcept;

private:
  void resolve(const std::string& id, bool ok, std::string bytes);
  void complete_promise(const std::string& workflow_id, const std::string& name,
                        bool ok, std::string bytes);
  void send_bytes(const std::string& workflow_id, const std::string& topic,
                  std::string bytes);
  std::optional<std::string> event_bytes(const std::string& workflow_id,
                                         const std::string& key,
                                         std::chrono::milliseconds timeout);
  void add_workflow(std::string name, detail::workflow_entry entry);
  std::string start_run(std::string_view name, std::string inputs,
                        start_options opts);

  std::shared_ptr<detail::runtime_impl> impl_;
};

} // namespace perdure
