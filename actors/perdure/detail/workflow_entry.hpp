#pragma once

// Type erasure for registered workflows: the runtime stores and starts
// every workflow as "encoded inputs in, encoded output out".

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>

#include "perdure/persistence/codec.hpp"
#include "perdure/task.hpp"

namespace perdure {

class workflow_context;

namespace detail {

/// A registered workflow, erased.
struct workflow_entry {
  std::function<task<std::string>(workflow_context&, std::string,
                                  persistence::encoding)>
    start;
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

/// The erased body: decode the input, run the workflow, encode its output.
/// Everything is a parameter (copied into the frame), nothing captured.
template <class F>
task<std::string> invoke_workflow(std::shared_ptr<F> fn, workflow_context& ctx,
                                  std::string inputs,
                                  persistence::encoding enc) {
  using traits = callable_traits<F>;
  using result_type = typename traits::result_type;
  using input_type = typename traits::input_type;
  auto call = [&]() -> task<result_type> {
    if constexpr (std::tuple_size_v<input_type> == 0)
      return (*fn)(ctx);
    else
      return (*fn)(ctx, persistence::decode<std::tuple_element_t<0, input_type>>(
                          inputs));
  };
  if constexpr (std::is_void_v<result_type>) {
    co_await call();
    co_return std::string{};
  } else {
    auto result = co_await call();
    co_return persistence::encode(result, enc);
  }
}

/// Returns `fn` erased into a workflow_entry.
template <class F>
workflow_entry make_workflow_entry(F fn) {
  auto shared = std::make_shared<F>(std::move(fn));
  return {[shared](workflow_context& ctx, std::string inputs,
                   persistence::encoding enc) {
    return invoke_workflow<F>(shared, ctx, std::move(inputs), enc);
  }};
}

} // namespace detail

} // namespace perdure
