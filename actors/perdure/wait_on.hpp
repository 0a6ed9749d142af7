#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "perdure/awakeable.hpp"
#include "perdure/child_handle.hpp"
#include "perdure/detail/awaiters.hpp"
#include "perdure/detail/run_core.hpp"
#include "perdure/persistence/codec.hpp"

namespace perdure {

/// One of the waits `workflow_context::select` chooses among. Made by
/// `on(awakeable)`, `on(child)`, `on_message(topic)` and
/// `on_promise(name)` of the context.
class wait_on {
public:
  wait_on(detail::wait_source source, std::string label)
    : source_(std::move(source)), label_(std::move(label)) {
  }

  const detail::wait_source& source() const noexcept {
    return source_;
  }

  /// Returns how it appears in the journal (checked on replay).
  const std::string& label() const noexcept {
    return label_;
  }

private:
  detail::wait_source source_;
  std::string label_;
};

/// Which wait of a `select` completed first, and with what.
class selected {
public:
  explicit selected(detail::wait_outcome w) : w_(std::move(w)) {
  }

  /// Returns the position of the winner among the waits given to `select`,
  /// or -1 if the timeout came first.
  int index() const noexcept {
    return w_.index;
  }

  /// Returns whether the timeout came first.
  bool timed_out() const noexcept {
    return w_.index < 0;
  }

  /// Returns the winner's value (throws `terminal_error` if it was a
  /// rejection or a failed child).
  template <class T>
  T value() const {
    return detail::unpack_wait<T>(w_);
  }

private:
  detail::wait_outcome w_;
};

} // namespace perdure

namespace perdure::detail {

/// `co_await`ing a select: a wait whose outcome says which source won.
class [[nodiscard]] select_awaiter {
public:
  select_awaiter(run_core& core, operation op) : inner_(core, std::move(op)) {
  }

  bool await_ready() {
    return inner_.await_ready();
  }

  void await_suspend(std::coroutine_handle<> h) {
    inner_.await_suspend(h);
  }

  selected await_resume() {
    return selected{inner_.await_resume()};
  }

private:
  wait_awaiter inner_;
};

} // namespace perdure::detail
