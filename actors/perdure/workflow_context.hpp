#pragma once

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

private:
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
