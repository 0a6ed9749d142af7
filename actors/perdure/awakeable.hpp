#pragma once

#include <string>
#include <utility>

#include "perdure/detail/awaiters.hpp"

namespace perdure {

/// A durable id an outside system completes with
/// `runtime::resolve_awakeable` (or fails with `reject_awakeable`), from any
/// thread of any process sharing the database; `co_await` it for the value
/// (a rejection throws `terminal_error` with its reason). Made by
/// `workflow_context::awakeable`.
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

  /// Waits, durably (across crashes and passivation), for the outcome.
  detail::typed_wait_awaiter<T> operator co_await() const {
    return {*core_,
            detail::wait_operation(
              *core_, id_, {{detail::wait_source::kind::resolution, id_}})};
  }

private:
  detail::run_core* core_;
  std::string id_;
};

} // namespace perdure

namespace perdure::detail {

/// `co_await`ing the creation of an awakeable: its id is durable before the
/// code can hand it out, so no resolution ever finds it unknown.
template <class T>
class [[nodiscard]] awakeable_creation {
public:
  awakeable_creation(run_core& core, operation op)
    : core_(&core), inner_(core, std::move(op)) {
  }

  bool await_ready() {
    return inner_.await_ready();
  }

  void await_suspend(std::coroutine_handle<> h) {
    inner_.await_suspend(h);
  }

  awakeable<T> await_resume() {
    return awakeable<T>{*core_, inner_.await_resume().name};
  }

private:
  run_core* core_;
  record_awaiter inner_;
};

} // namespace perdure::detail
