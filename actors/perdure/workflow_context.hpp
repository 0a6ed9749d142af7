#pragma once

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <string>
#include <type_traits>
#include <utility>

#include "perdure/detail/run_core.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/retry_policy.hpp"
#include "perdure/sql_session.hpp"
#include "perdure/step_failed.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure {

namespace detail {

template <class T>
T unpack(const persistence::journal_entry& e) {
  switch (e.outcome) {
    case persistence::outcome::failed:
      throw step_failed(e.error);
    case persistence::outcome::terminal:
      throw terminal_error(e.error);
    case persistence::outcome::value:
      break;
  }
  if constexpr (!std::is_void_v<T>)
    return persistence::decode<T>(e.payload);
}

/// GCC 12 destroys a lambda temporary that is created inside a `co_await`
/// expression twice (a compiler bug, fixed in GCC 13). For a closure that
/// owns resources (captures a std::string by value, say) that is a double
/// free, so such closures are refused at compile time there. Capture by
/// reference (`[&]`), which is safe because the workflow's frame outlives the
/// step, or build the lambda in a named variable first.
template <class F>
constexpr void check_step_callable() {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
  static_assert(std::is_lvalue_reference_v<F>
                  || std::is_trivially_destructible_v<std::decay_t<F>>,
                "GCC 12 double-destroys lambda temporaries with by-value "
                "captures inside co_await: capture by reference ([&]) or "
                "name the lambda before co_await (see workflow_context.hpp)");
#endif
}

/// Encodes a result, refusing oversized ones.
template <class T>
std::string encode_result(const T& x, const run_core& core) {
  auto bytes = persistence::encode(x, core.payload_encoding());
  if (bytes.size() > core.max_payload_bytes())
    throw terminal_error("result of " + std::to_string(bytes.size())
                         + " bytes exceeds the limit of "
                         + std::to_string(core.max_payload_bytes()));
  return bytes;
}

/// `co_await`ing a durable operation: ready at once when replaying,
/// otherwise suspended until the actor has made the outcome durable.
template <class T>
class operation_awaiter {
public:
  operation_awaiter(run_core& core, operation op)
    : core_(&core), op_(std::move(op)) {
  }

  bool await_ready() {
    return core_->replaying(op_.seq, op_.kind, op_.name);
  }

  void await_suspend(std::coroutine_handle<> h) {
    core_->perform(std::move(op_), h);
  }

  T await_resume() {
    return unpack<T>(core_->take(op_.seq));
  }

private:
  run_core* core_;
  operation op_;
};

/// `co_await`ing a durable sleep: ready at once if replay finds it due,
/// otherwise suspended until the actor's timer says it is.
class sleep_awaiter {
public:
  sleep_awaiter(run_core& core, operation op)
    : core_(&core), op_(std::move(op)) {
  }

  bool await_ready() {
    if (!core_->replaying(op_.seq, op_.kind, op_.name))
      return false;
    return std::stoll(core_->recorded(op_.seq).payload) <= core_->now_ms();
  }

  void await_suspend(std::coroutine_handle<> h) {
    core_->perform(std::move(op_), h);
  }

  void await_resume() {
    core_->take(op_.seq);
  }

private:
  run_core* core_;
  operation op_;
};

/// Returns the id of the awakeable created at journal index `seq`: a pure
/// function of the run and the index, so replay hands out the same id.
inline std::string awakeable_id(const std::string& run_id, std::int32_t seq) {
  return "awk_" + std::to_string(seq) + "_" + run_id;
}

} // namespace detail

/// A durable id an outside system completes with
/// `runtime::resolve_awakeable` (or fails with `reject_awakeable`), from any
/// thread; `co_await` it for the value. See `workflow_context::awakeable`.
template <class T>
class awakeable {
public:
  awakeable(detail::run_core& core, std::string id)
    : core_(&core), id_(std::move(id)) {
  }

  /// Returns the id to hand out.
  const std::string& id() const noexcept {
    return id_;
  }

  /// Waits (durably: across crashes and passivation) for the outcome: the
  /// resolved value, or a `terminal_error` with the rejection's reason.
  detail::operation_awaiter<T> operator co_await() const {
    detail::operation op;
    op.seq = core_->next_seq();
    op.kind = persistence::entry_kind::await;
    op.name = id_;
    return detail::operation_awaiter<T>{*core_, std::move(op)};
  }

private:
  detail::run_core* core_;
  std::string id_;
};

namespace detail {

/// `co_await`ing the creation of an awakeable: its id is durable before the
/// code can hand it out, so no resolution ever finds it unknown.
template <class T>
class awakeable_creation {
public:
  awakeable_creation(run_core& core, operation op)
    : core_(&core), id_(op.name), inner_(core, std::move(op)) {
  }

  bool await_ready() {
    return inner_.await_ready();
  }

  void await_suspend(std::coroutine_handle<> h) {
    inner_.await_suspend(h);
  }

  awakeable<T> await_resume() {
    inner_.await_resume();
    return awakeable<T>{*core_, id_};
  }

private:
  run_core* core_;
  std::string id_;
  operation_awaiter<void> inner_;
};

} // namespace detail

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
  template <class Rep, class Period>
  detail::sleep_awaiter sleep(std::chrono::duration<Rep, Period> d) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d);
    return sleep_until_ms(core_->now_ms() + std::max<std::int64_t>(0, ms.count()));
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
    return detail::awakeable_creation<T>{*core_, std::move(op)};
  }

private:
  detail::sleep_awaiter sleep_until_ms(std::int64_t due_ms) {
    auto op = next_operation(persistence::entry_kind::sleep, "sleep", {});
    op.due_ms = due_ms;
    return detail::sleep_awaiter{*core_, std::move(op)};
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
