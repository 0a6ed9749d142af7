#pragma once

// Type erasure for registered workflows: the runtime stores and starts
// every workflow as "encoded inputs in, encoded output out".

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "perdure/persistence/codec.hpp"
#include "perdure/task.hpp"

namespace perdure {

class workflow_context;

namespace detail {

/// A started workflow, erased: its coroutine and how to encode its output.
/// Not itself a coroutine: a wrapper frame would cost every sleeping run
/// its size.
class run_driver {
public:
  virtual ~run_driver() = default;

  /// Runs the code until its first suspension.
  virtual void start() = 0;

  /// Returns whether the code ran to its end (or could not start).
  virtual bool done() const = 0;

  /// Returns the encoded output of finished code, or rethrows its error.
  virtual std::string take_result() = 0;
};

/// A registered workflow, erased: starts it from encoded inputs.
struct workflow_entry {
  std::function<std::unique_ptr<run_driver>(workflow_context&, std::string,
                                            persistence::encoding)>
    start;
  /// The patches its code asks about (`workflow_options::patches`).
  std::vector<std::string> patches;
};

template <class Signature>
struct workflow_traits;

template <class R, class... Args>
struct workflow_traits<task<R>(workflow_context&, Args...)> {
  static_assert(sizeof...(Args) <= 1,
                "a workflow takes the context and at most one input");
  using result_type = R;
  using input_type = std::tuple<std::decay_t<Args>...>;
};

template <class R, class... Args>
struct workflow_traits<task<R> (*)(workflow_context&, Args...)>
  : workflow_traits<task<R>(workflow_context&, Args...)> {};

template <class C, class R, class... Args>
struct workflow_traits<task<R> (C::*)(workflow_context&, Args...) const>
  : workflow_traits<task<R>(workflow_context&, Args...)> {};

template <class C, class R, class... Args>
struct workflow_traits<task<R> (C::*)(workflow_context&, Args...)>
  : workflow_traits<task<R>(workflow_context&, Args...)> {};

template <class F, class = void>
struct callable_traits : workflow_traits<std::decay_t<F>> {};

template <class F>
struct callable_traits<F, std::void_t<decltype(&F::operator())>>
  : workflow_traits<decltype(&F::operator())> {};

/// The driver of a workflow returning `R`.
template <class R>
class typed_driver : public run_driver {
public:
  explicit typed_driver(persistence::encoding enc) : enc_(enc) {
  }

  void start() override {
    if (code_.valid())
      code_.start();
  }

  bool done() const override {
    return failed_ || code_.done();
  }

  std::string take_result() override {
    if (failed_)
      std::rethrow_exception(failed_);
    if constexpr (std::is_void_v<R>) {
      code_.take_result();
      return {};
    } else {
      return persistence::encode(code_.take_result(), enc_);
    }
  }

  task<R> code_;
  /// Set if the code could not even start (its inputs did not decode).
  std::exception_ptr failed_;

private:
  persistence::encoding enc_;
};

/// Returns `fn` erased into a workflow_entry.
template <class F>
workflow_entry make_workflow_entry(F fn) {
  using traits = callable_traits<F>;
  using result_type = typename traits::result_type;
  using input_type = typename traits::input_type;
  auto shared = std::make_shared<F>(std::move(fn));
  return {[shared](workflow_context& ctx, std::string inputs,
                   persistence::encoding enc) -> std::unique_ptr<run_driver> {
    auto driver = std::make_unique<typed_driver<result_type>>(enc);
    try {
      if constexpr (std::tuple_size_v<input_type> == 0)
        driver->code_ = (*shared)(ctx);
      else
        driver->code_ = (*shared)(
          ctx, persistence::decode<std::tuple_element_t<0, input_type>>(inputs));
    } catch (...) {
      driver->failed_ = std::current_exception();
    }
    return driver;
  }};
}

} // namespace detail

} // namespace perdure
