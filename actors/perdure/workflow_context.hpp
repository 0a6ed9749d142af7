#pragma once

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <optional>
#include <string>
#include <vector>
#include <type_traits>
#include <utility>

#include "perdure/awakeable.hpp"
#include "perdure/child_handle.hpp"
#include "perdure/detail/awaiters.hpp"
#include "perdure/detail/run_core.hpp"
#include "perdure/detail/time_math.hpp"
#include "perdure/error.hpp"
#include "perdure/task.hpp"
#include "perdure/wait_on.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/retry_policy.hpp"
#include "perdure/sql_session.hpp"
#include "perdure/step_failed.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure {

/// What a workflow's code sees of its run. Every durable operation goes
/// through it; code between operations must be deterministic, because on
/// recovery the workflow runs again from the top and each operation takes
/// its recorded outcome instead of running again.
class workflow_context {
public:
  explicit workflow_context(detail::run_core& core) : core_(&core) {
  }

  workflow_context(const workflow_context&) = delete;
  workflow_context& operator=(const workflow_context&) = delete;

  /// Returns the id of this run.
  const std::string& workflow_id() const noexcept {
    return core_->run_id();
  }

  /// Runs `fn` once (at least once across crashes) on the step executor and
  /// checkpoints its result, or its final error, before the workflow goes on.
  /// Failures are retried under `policy`; a `terminal_error` is not. On
  /// replay, the recorded result is returned (or the recorded error thrown:
  /// `terminal_error` or `step_failed`, with the original message).
  /// `fn` runs on another thread while the workflow is suspended: it may
  /// capture the workflow's locals by reference (preferred: the frame
  /// outlives the step), but must not touch the context.
  ///
  /// ~~~
  /// auto total = co_await ctx.step("total", [&] { return price * qty; });
  /// ~~~
  template <class F>
  auto step(std::string name, F&& fn, retry_policy policy = {}) {
    detail::check_step_callable<F>();
    using result_type = std::invoke_result_t<std::decay_t<F>&>;
    auto* core = core_;
    auto op = next_operation(persistence::entry_kind::step, std::move(name),
                             policy);
    op.body = [fn = std::forward<F>(fn), core]() mutable {
      (void)core; // used only for a result to encode
      detail::step_outcome out;
      try {
        if constexpr (std::is_void_v<result_type>)
          fn();
        else
          out.payload = detail::encode_result(fn(), *core);
      } catch (const terminal_error& ex) {
        out.result = persistence::outcome::terminal;
        out.error = ex.what();
      } catch (const std::exception& ex) {
        out.result = persistence::outcome::failed;
        out.error = ex.what();
      } catch (...) {
        out.result = persistence::outcome::failed;
        out.error = "unknown exception";
      }
      return out;
    };
    return detail::operation_awaiter<result_type>{*core, std::move(op)};
  }

  /// Runs `fn(sql_session&)` in one database transaction together with its
  /// own checkpoint: the user's statements and the recorded result commit
  /// together or not at all, so the step is exactly-once. Retried under
  /// `policy` like a step (each attempt is a fresh transaction).
  template <class F>
  auto transaction(std::string name, F&& fn, retry_policy policy = {}) {
    detail::check_step_callable<F>();
    using result_type = std::invoke_result_t<std::decay_t<F>&, sql_session&>;
    auto* core = core_;
    auto op = next_operation(persistence::entry_kind::transaction,
                             std::move(name), policy);
    op.tx_body = [fn = std::forward<F>(fn), core](sql_session& s) mutable {
      (void)core; // used only for a result to encode
      if constexpr (std::is_void_v<result_type>) {
        fn(s);
        return std::string{};
      } else {
        return detail::encode_result(fn(s), *core);
      }
    };
    return detail::operation_awaiter<result_type>{*core, std::move(op)};
  }

  /// Sleeps durably for `d`: the wake-up time is checkpointed before the run
  /// suspends, no thread is held, a long sleep drops the run from memory
  /// (`config::passivate_after`), and after a restart the run sleeps only
  /// what remains.
  ///
  /// A duration too long to represent (`milliseconds::max()`, say) sleeps
  /// for ever: the run stays passivated and only a cancellation ends it.
  template <class Rep, class Period>
  detail::sleep_awaiter sleep(std::chrono::duration<Rep, Period> d) {
    return sleep_until_ms(
      detail::saturating_add(core_->now_ms(), detail::saturating_ms(d)));
  }

  /// Sleeps durably until `t` (on the runtime's clock).
  detail::sleep_awaiter sleep_until(std::chrono::system_clock::time_point t) {
    return sleep_until_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch())
        .count());
  }

  /// Creates an awakeable: `co_await` it to get a durable id to hand to an
  /// outside system, then `co_await` the awakeable itself for its value.
  ///
  /// ~~~
  /// auto approval = co_await ctx.awakeable<bool>();
  /// co_await ctx.step("ask", [&] { mail(approval.id()); });
  /// bool ok = co_await approval;
  /// ~~~
  template <class T>
  detail::awakeable_creation<T> awakeable() {
    detail::operation op;
    op.seq = core_->next_seq();
    op.kind = persistence::entry_kind::awakeable;
    op.name = detail::awakeable_id(core_->run_id(), op.seq);
    return {*core_, std::move(op)};
  }

  /// Waits for this run's promise `name`, completed (once) from outside by
  /// `runtime::resolve_promise` / `reject_promise`, before or after this
  /// wait begins. A rejection throws `terminal_error`.
  template <class T>
  detail::typed_wait_awaiter<T> promise(const std::string& name) {
    auto w = on_promise(name);
    return {*core_, detail::wait_operation(*core_, w.label(), {w.source()})};
  }

  /// Receives the next message sent to this run on `topic` with
  /// `runtime::send` (messages wait for their receiver, in sending order).
  template <class T>
  detail::typed_wait_awaiter<T> recv(const std::string& topic) {
    auto w = on_message(topic);
    return {*core_, detail::wait_operation(*core_, w.label(), {w.source()})};
  }

  /// Receives the next message on `topic`, or nothing after `timeout`. The
  /// deadline is recorded first: after a restart only the rest is waited.
  template <class T, class Rep, class Period>
  task<std::optional<T>> recv(std::string topic,
                              std::chrono::duration<Rep, Period> timeout) {
    std::vector<wait_on> waits{on_message(topic)};
    auto got = co_await select_within(timeout, std::move(waits));
    if (got.timed_out())
      co_return std::nullopt;
    co_return got.template value<T>();
  }

  /// Waits for the first of `waits` to complete; the winner is recorded, so
  /// replay picks the same one.
  ///
  /// ~~~
  /// auto first = co_await ctx.select(std::vector{ctx.on(approval),
  ///                                              ctx.on_message("cancel")});
  /// if (first.index() == 0) ...
  /// ~~~
  detail::select_awaiter select(std::vector<wait_on> waits) {
    return {*core_, select_operation(waits, 0)};
  }

  /// Waits for the first of `waits`, or the timeout (`index()` -1).
  template <class Rep, class Period>
  task<selected> select_within(std::chrono::duration<Rep, Period> timeout,
                               std::vector<wait_on> waits) {
    auto due = co_await deadline(detail::saturating_ms(timeout));
    detail::wait_awaiter awaiter{*core_, select_operation(waits, due)};
    co_return selected{co_await awaiter};
  }

  /// A wait for awakeable `a` (for `select`).
  template <class T>
  wait_on on(const perdure::awakeable<T>& a) const {
    return {{detail::wait_source::kind::resolution, a.id()}, a.id()};
  }

  /// A wait for child `c`'s end (for `select`).
  template <class R>
  wait_on on(const child_handle<R>& c) const {
    return {{detail::wait_source::kind::run, c.id()}, "child:" + c.id()};
  }

  /// A wait for the next message on `topic` (for `select`).
  wait_on on_message(const std::string& topic) const {
    return {{detail::wait_source::kind::message, topic}, "recv:" + topic};
  }

  /// A wait for this run's promise `name` (for `select`).
  wait_on on_promise(const std::string& name) const {
    return {{detail::wait_source::kind::resolution,
             detail::promise_id(core_->run_id(), name)},
            "promise:" + name};
  }

  /// Publishes event `key` = `value` of this run, durably and once (the
  /// event and its checkpoint commit together); readers use
  /// `runtime::get_event`. A later `set_event` of the same key replaces it.
  template <class T>
  detail::operation_awaiter<void> set_event(std::string key, const T& value) {
    auto op = next_operation(persistence::entry_kind::event, std::move(key), {});
    op.payload = detail::encode_result(value, *core_);
    return {*core_, std::move(op)};
  }

  // -- delivering to other runs, exactly once ----------------------------------

  /// Sends `value` to run `workflow_id` on `topic` (see `recv`), exactly
  /// once: the message and this run's checkpoint commit together, and
  /// replay does not send again. A run that does not exist is a
  /// `terminal_error` (recorded: replay throws it again).
  template <class T>
  detail::operation_awaiter<void>
  send(const std::string& workflow_id, std::string topic, const T& value) {
    auto what = "workflow run '" + workflow_id + "'";
    check_target(workflow_id, what);
    auto op = next_operation(persistence::entry_kind::send, std::move(topic),
                             {});
    persistence::outgoing_message m{workflow_id, op.name,
                                    detail::encode_result(value, *core_),
                                    core_->now_ms()};
    return deliver(std::move(op), {std::move(m), std::move(what)});
  }

  /// Completes awakeable `id` (of any run) with `value`, exactly once, as
  /// `runtime::resolve_awakeable` does from outside. An unknown id, or one
  /// completed before, is a `terminal_error` (recorded).
  template <class T>
  detail::operation_awaiter<void> resolve_awakeable(const std::string& id,
                                                    const T& value) {
    return complete_awakeable(id, persistence::outcome::value,
                              detail::encode_result(value, *core_));
  }

  /// Fails awakeable `id`: its waiter gets a `terminal_error` with `reason`.
  detail::operation_awaiter<void> reject_awakeable(const std::string& id,
                                                   std::string reason) {
    return complete_awakeable(id, persistence::outcome::terminal,
                              std::move(reason));
  }

  /// Completes promise `name` of run `workflow_id` with `value`, exactly
  /// once, as `runtime::resolve_promise` does from outside. No such run, or
  /// a promise completed before, is a `terminal_error` (recorded).
  template <class T>
  detail::operation_awaiter<void> resolve_promise(const std::string& workflow_id,
                                                  const std::string& name,
                                                  const T& value) {
    return complete_promise(workflow_id, name, persistence::outcome::value,
                            detail::encode_result(value, *core_));
  }

  /// Fails promise `name` of run `workflow_id` with `reason`.
  detail::operation_awaiter<void> reject_promise(const std::string& workflow_id,
                                                 const std::string& name,
                                                 std::string reason) {
    return complete_promise(workflow_id, name, persistence::outcome::terminal,
                            std::move(reason));
  }

  /// Starts workflow `name` with `input` as a child of this run: its start
  /// is checkpointed (replay does not start it twice), the parent is
  /// recorded, and cancelling the parent cancels it. `co_await` the returned
  /// handle for its output. `id` empty: `<parent id>.<journal index>`.
  template <class R, class A>
  detail::child_start<R> start_child(const std::string& name, const A& input,
                                     std::string id = {}) {
    auto op = next_operation(persistence::entry_kind::child, "child", {});
    op.child_workflow = name;
    op.payload = persistence::encode(input, core_->payload_encoding());
    op.name = id.empty() ? core_->run_id() + "." + std::to_string(op.seq)
                         : std::move(id);
    return {*core_, std::move(op)};
  }

  /// Sends a call of handler `handler` of object `key` of type `type` with
  /// `input` to the key's inbox, durably and once (replay sends nothing
  /// twice), and goes on: `co_await` the returned handle for the reply. A
  /// send does not hold the caller's key for the callee: to wait for the
  /// reply inside an exclusive handler, use `call`, whose cycles are
  /// detected.
  template <class R, class A>
  detail::child_start<R> send(const std::string& type, const std::string& key,
                              const std::string& handler, const A& input) {
    return send_encoded<R>(type, key, handler,
                           persistence::encode(input, core_->payload_encoding()));
  }

  /// `send` with `input` already encoded.
  template <class R>
  detail::child_start<R> send_encoded(const std::string& type,
                                      const std::string& key,
                                      const std::string& handler,
                                      std::string input, bool awaited = false) {
    auto op = next_operation(persistence::entry_kind::child, "call", {});
    op.awaited = awaited;
    op.child_workflow = handler;
    op.object_type = type;
    op.object_key = key;
    op.payload = std::move(input);
    op.name = core_->run_id() + "." + std::to_string(op.seq);
    return {*core_, std::move(op)};
  }

  /// Calls handler `handler` of object `key` with `input` and returns its
  /// reply (see `send`); a handler that failed throws `terminal_error`. A
  /// call that would wait for a key this call chain holds (A calls A, A
  /// calls B calls A, also through child workflows) fails at once with a
  /// `terminal_error` naming the cycle.
  template <class R, class A>
  task<R> call(std::string type, std::string key, std::string handler,
               A input) {
    auto reply = co_await send_encoded<R>(
      type, key, handler,
      persistence::encode(input, core_->payload_encoding()), true);
    co_return co_await reply;
  }

  /// Returns whether this run takes the code of patch `id`:
  ///
  ///     if (co_await ctx.patched("carrier-booking")) { new } else { old }
  ///
  /// A run that reaches this point for the first time takes it (recorded
  /// first: one commit, shared with other runs' by the group-commit
  /// writer, the first time only); a run that
  /// passed this point under code without the patch keeps the old branch,
  /// on replay and on every process. `id` must be listed in
  /// `workflow_options::patches` where the workflow is registered: a
  /// process claims only runs whose patches its code knows, so old and new
  /// code can run side by side during a deploy.
  detail::patch_awaiter patched(const std::string& id) {
    return {*core_, core_->patched(id)};
  }

  /// Once no run that passed patch `id` under old code is left: the old
  /// branch is gone, and this keeps recording the patch for runs that still
  /// meet it (so a process with the `patched` code can still run them).
  /// Remove it, and `id` from the declaration, once no run in flight took
  /// the patch.
  detail::patch_awaiter deprecated_patch(const std::string& id) {
    return {*core_, core_->patched(id)};
  }

  /// Records that this run, a saga, enters `phase` (one of
  /// `persistence::saga_phase`), together with the run's phase in the store.
  /// For `sagas::saga`; workflow code has no use for it.
  detail::phase_awaiter enter_saga_phase(const char* phase) {
    // A phase is the runtime's own row: retried until it is written.
    auto op = next_operation(persistence::entry_kind::phase, "saga",
                             {.max_attempts = 1'000'000,
                              .initial_delay = std::chrono::milliseconds{100},
                              .backoff = 2.0,
                              .max_delay = std::chrono::seconds{5}});
    op.payload = phase;
    return {*core_, std::move(op)};
  }

  /// The application's logger (`config::logger`) for this run's code:
  /// silent while the run replays what its journal recorded (a recovered
  /// run does not repeat the lines of code its journal replays; code past
  /// its last recorded operation runs again, and logs again), each line
  /// tagged `[run=... workflow=... step=... attempt=... executor=...
  /// version=...]`. In a step's body it names that step and its attempt
  /// (the run's attempt, its owner epoch, outside one).
  ///   ctx.log().info("charging {} cents", amount);
  run_logger log() {
    return core_->logger();
  }

  /// Returns whether the next durable operation replays an entry other
  /// than a step named `name`: a marker added to the code since that
  /// journal was written is left out then, so the journal still replays.
  /// For `sagas::saga`.
  bool recorded_otherwise(const std::string& name) {
    auto* e = core_->find_recorded(core_->peek_seq());
    return e != nullptr
           && !(e->kind == persistence::entry_kind::step && e->name == name);
  }

  /// Starts the undo of saga run `child_id`, a completed child of this run
  /// running workflow `workflow`: a run that replays the child's journal up
  /// to its end and then compensates it (it ends COMPENSATED when all its
  /// compensations succeeded). For `sagas::saga`.
  template <class R>
  detail::child_start<R> start_undo(const std::string& child_id,
                                    const std::string& workflow) {
    auto op = next_operation(persistence::entry_kind::child, "child", {});
    op.child_workflow = workflow;
    op.undo_of = child_id;
    op.name = child_id + ".undo";
    return {*core_, std::move(op)};
  }

  /// While the returned guard lives, this saga does not observe a
  /// cancellation (`sagas::saga` holds one over a task step, so the step
  /// finishes and its compensation is known). For `sagas::saga`.
  detail::cancellation_shield shield_cancellation() {
    return detail::cancellation_shield{*core_};
  }

private:
  /// Throws `terminal_error` ("no <what>") unless `id` can name a run.
  static void check_target(const std::string& id, const std::string& what) {
    if (!persistence::is_valid_name(id))
      throw terminal_error("no " + persistence::valid_text(what));
  }

  /// Returns the awaiter of delivery `d`, made by operation `op`.
  detail::operation_awaiter<void> deliver(detail::operation op,
                                          persistence::delivery d) {
    op.delivery = std::make_shared<const persistence::delivery>(std::move(d));
    return {*core_, std::move(op)};
  }

  /// Returns `r` completed with `result` and `bytes` (its value or, for a
  /// rejection, the reason), now.
  persistence::resolution completed(persistence::resolution r,
                                    persistence::outcome result,
                                    std::string bytes) const {
    r.result = result;
    if (result == persistence::outcome::value)
      r.payload = std::move(bytes);
    else
      r.error = persistence::valid_text(bytes);
    r.at_ms = core_->now_ms();
    return r;
  }

  detail::operation_awaiter<void> complete_awakeable(const std::string& id,
                                                     persistence::outcome result,
                                                     std::string bytes) {
    auto what = "awakeable with id '" + persistence::valid_text(id) + "'";
    auto r = detail::parse_awakeable_id(id);
    if (!r)
      throw terminal_error("no " + what);
    auto op = next_operation(persistence::entry_kind::resolve, "awakeable", {});
    return deliver(std::move(op),
                   {completed(std::move(*r), result, std::move(bytes)), what});
  }

  detail::operation_awaiter<void> complete_promise(const std::string& workflow_id,
                                                   const std::string& name,
                                                   persistence::outcome result,
                                                   std::string bytes) {
    auto what = "workflow run '" + workflow_id + "' (promise '" + name + "')";
    check_target(workflow_id, what);
    if (!persistence::is_valid_name(name))
      throw terminal_error("promise names must be 1 to 255 bytes of UTF-8 "
                           "without NUL");
    persistence::resolution r;
    r.id = detail::promise_id(workflow_id, name);
    r.run_id = workflow_id;
    r.seq = -1;
    auto op = next_operation(persistence::entry_kind::resolve, "promise", {});
    return deliver(std::move(op),
                   {completed(std::move(r), result, std::move(bytes)), what});
  }

  detail::sleep_awaiter sleep_until_ms(std::int64_t due_ms) {
    return detail::sleep_awaiter{*core_, core_->next_seq(), due_ms};
  }

  /// Records (once) a deadline `ms` from now; returns it (ms since epoch).
  task<std::int64_t> deadline(std::int64_t ms) {
    auto op = next_operation(persistence::entry_kind::deadline, "deadline", {});
    op.due_ms = detail::saturating_add(core_->now_ms(),
                                       std::max<std::int64_t>(0, ms));
    detail::record_awaiter awaiter{*core_, std::move(op)};
    auto e = co_await awaiter;
    co_return std::stoll(e.payload);
  }

  /// Returns a wait for the first of `waits` (or `due_ms`), named after all
  /// of them: replay notices a select whose waits changed.
  detail::operation select_operation(const std::vector<wait_on>& waits,
                                     std::int64_t due_ms) {
    std::string label = "select";
    std::vector<detail::wait_source> sources;
    for (auto& w : waits) {
      label += "|" + w.label();
      sources.push_back(w.source());
    }
    return detail::wait_operation(*core_, std::move(label), std::move(sources),
                                  due_ms);
  }

  /// Returns the operation at the next journal index.
  detail::operation next_operation(persistence::entry_kind kind,
                                   std::string name, retry_policy policy) {
    if (!persistence::is_valid_name(name))
      throw perdure::error(errc::invalid_argument,
                           "step names must be 1 to 255 bytes of UTF-8 "
                           "without NUL");
    detail::operation op;
    op.seq = core_->next_seq();
    op.kind = kind;
    op.name = std::move(name);
    op.policy = policy;
    return op;
  }

  detail::run_core* core_;
};

} // namespace perdure
