#pragma once

#include <string>
#include <utility>

#include "perdure/detail/awaiters.hpp"

namespace perdure {

/// A child run started by `workflow_context::start_child`. `co_await` it
/// for the child's output (durably: the parent may crash or passivate
/// meanwhile); a child that did not succeed throws `terminal_error`.
template <class R>
class child_handle {
public:
  child_handle(detail::run_core& core, std::string id)
    : core_(&core), id_(std::move(id)) {
  }

  /// Returns the child's workflow id.
  const std::string& id() const noexcept {
    return id_;
  }

  /// Waits for the child's end.
  detail::typed_wait_awaiter<R> operator co_await() const {
    return {*core_,
            detail::wait_operation(*core_, "child:" + id_,
                                   {{detail::wait_source::kind::run, id_}})};
  }

private:
  detail::run_core* core_;
  std::string id_;
};

} // namespace perdure

namespace perdure::detail {

/// `co_await`ing a child's start: the child exists and its start is
/// checkpointed before the parent goes on.
template <class R>
class [[nodiscard]] child_start {
public:
  child_start(run_core& core, operation op)
    : core_(&core), id_(op.name), inner_(core, std::move(op)) {
  }

  bool await_ready() {
    return inner_.await_ready();
  }

  void await_suspend(std::coroutine_handle<> h) {
    inner_.await_suspend(h);
  }

  child_handle<R> await_resume() {
    inner_.await_resume(); // throws if the child could not be started
    return child_handle<R>{*core_, id_};
  }

private:
  run_core* core_;
  std::string id_;
  operation_awaiter<void> inner_;
};

} // namespace perdure::detail
