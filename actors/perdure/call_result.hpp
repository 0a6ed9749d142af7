#pragma once

// How a call made with `client::call_async` ended: what its callback gets.

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "perdure/persistence/codec.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure {

namespace detail {

/// A call's end as the runtime hands it to `call_async`'s callback: the
/// invocation's outcome, or (`failure`) why it has none here.
struct call_end {
  std::string id;
  run_outcome outcome;
  std::exception_ptr failure;
};

} // namespace detail

/// The end of one `call_async` call. Cheap to move.
template <class R>
class call_result {
public:
  explicit call_result(detail::call_end end) : end_(std::move(end)) {
  }

  /// Returns the invocation's id (its idempotent id, with a key).
  const std::string& id() const noexcept {
    return end_.id;
  }

  /// Returns whether the handler returned (`get()` does not throw).
  bool ok() const noexcept {
    return !end_.failure && end_.outcome.status == run_status::success;
  }

  /// Returns the handler's result, or throws what `client::call` would have
  /// thrown: `workflow_failed` for a handler that failed, the store's
  /// errors, `conflicting_id`, or `not_running` for a call whose end the
  /// runtime did not see before it stopped (it may still run: read it with
  /// `retrieve_workflow<R>(id()).get()`).
  R get() const {
    if (end_.failure)
      std::rethrow_exception(end_.failure);
    if (end_.outcome.status != run_status::success)
      detail::throw_run_failure(end_.id, end_.outcome);
    if constexpr (!std::is_void_v<R>)
      return persistence::decode<R>(end_.outcome.output.value_or(std::string{}));
  }

private:
  detail::call_end end_;
};

} // namespace perdure
