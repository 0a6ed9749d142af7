#pragma once

// perdure::task<T>: the coroutine type of workflows. Lazy (nothing runs until
// it is awaited or started), move-only, and resumed only on the turn of the
// actor that owns the run, so workflow code needs no locks. Awaiting a task
// transfers control symmetrically (no stack growth on long chains).
//
// Lifetimes: arguments are copied into the frame, so pass values, not
// references to temporaries.
//   BAD:  task<int> f(workflow_context& ctx, const std::string& s);
//         co_await f(ctx, std::string{"tmp"});  // s dangles after a suspend
//   GOOD: task<int> f(workflow_context& ctx, std::string s);

#include <coroutine>
#include <exception>
#include <utility>
#include <variant>

namespace perdure {

template <class T>
class task;

namespace detail {

template <class T>
struct task_result {
  std::variant<std::monostate, T, std::exception_ptr> value;

  void return_value(T x) {
    value.template emplace<1>(std::move(x));
  }

  T take() {
    if (auto* ep = std::get_if<2>(&value))
      std::rethrow_exception(*ep);
    return std::move(std::get<1>(value));
  }

  void set_exception(std::exception_ptr ep) {
    value.template emplace<2>(std::move(ep));
  }
};

template <>
struct task_result<void> {
  std::exception_ptr error;

  void return_void() noexcept {
  }

  void take() {
    if (error)
      std::rethrow_exception(error);
  }

  void set_exception(std::exception_ptr ep) {
    error = std::move(ep);
  }
};

template <class T>
struct task_promise : task_result<T> {
  std::coroutine_handle<> continuation;

  task<T> get_return_object() noexcept;

  std::suspend_always initial_suspend() noexcept {
    return {};
  }

  struct final_awaiter {
    bool await_ready() noexcept {
      return false;
    }

    std::coroutine_handle<>
    await_suspend(std::coroutine_handle<task_promise> h) noexcept {
      if (auto next = h.promise().continuation)
        return next;
      return std::noop_coroutine();
    }

    void await_resume() noexcept {
    }
  };

  final_awaiter final_suspend() noexcept {
    return {};
  }

  void unhandled_exception() noexcept {
    this->set_exception(std::current_exception());
  }
};

} // namespace detail

/// A lazily started coroutine producing a `T` (or throwing).
template <class T>
class [[nodiscard]] task {
public:
  using promise_type = detail::task_promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;

  // -- constructors, destructors, and assignment operators --------------------

  task() noexcept = default;

  explicit task(handle_type h) noexcept : h_(h) {
  }

  task(task&& other) noexcept : h_(std::exchange(other.h_, {})) {
  }

  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }

  task(const task&) = delete;
  task& operator=(const task&) = delete;

  ~task() {
    reset();
  }

  // -- observers --------------------------------------------------------------

  /// Returns whether the coroutine ran to its end.
  bool done() const noexcept {
    return !h_ || h_.done();
  }

  bool valid() const noexcept {
    return static_cast<bool>(h_);
  }

  // -- driving (for the owner of a top-level task) ----------------------------

  /// Runs the coroutine until its first suspension.
  void start() {
    h_.resume();
  }

  /// Returns the result of a finished task, or rethrows its exception.
  T take_result() {
    return h_.promise().take();
  }

  /// Destroys the frame, wherever it is suspended.
  void reset() noexcept {
    if (h_)
      std::exchange(h_, {}).destroy();
  }

  // -- awaiting ---------------------------------------------------------------

  auto operator co_await() && noexcept {
    struct awaiter {
      handle_type h;

      bool await_ready() noexcept {
        return false;
      }

      std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) {
        h.promise().continuation = caller;
        return h;
      }

      T await_resume() {
        return h.promise().take();
      }
    };
    return awaiter{h_};
  }

private:
  handle_type h_;
};

namespace detail {

template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}

} // namespace detail

} // namespace perdure
