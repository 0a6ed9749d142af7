#pragma once

// Type erasure for registered virtual objects: the runtime keeps each type's
// state as a box it can encode and decode, and each handler as "state and
// encoded input in, encoded output out", like workflows (workflow_entry.hpp).

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "perdure/detail/workflow_entry.hpp"
#include "perdure/object_context.hpp"
#include "perdure/persistence/codec.hpp"

namespace perdure::detail {

/// One key's state in memory, its type erased.
class state_box {
public:
  virtual ~state_box() = default;

  /// Returns the `State`.
  virtual void* get() noexcept = 0;

  /// Returns the state encoded.
  virtual std::string encode(persistence::encoding enc) const = 0;

  /// Replaces the state by `bytes` decoded (empty: a default `State`).
  virtual void decode(const std::string& bytes) = 0;
};

template <class State>
class typed_state_box final : public state_box {
public:
  void* get() noexcept override {
    return &state_;
  }

  std::string encode(persistence::encoding enc) const override {
    return persistence::encode(state_, enc);
  }

  void decode(const std::string& bytes) override {
    state_ = bytes.empty() ? State{} : persistence::decode<State>(bytes);
  }

private:
  State state_{};
};

/// A registered handler, erased: starts it on `state` (a `State*`) from
/// encoded inputs.
struct handler_entry {
  /// Shared (read-only, concurrent) rather than exclusive.
  bool shared = false;
  std::function<std::unique_ptr<run_driver>(
    run_core&, void* state, const std::string& key, std::string inputs,
    persistence::encoding)>
    start;
  /// The patches its code asks about (`handler_options::patches`).
  std::vector<std::string> patches;
};

/// A registered virtual object type.
struct object_entry {
  std::function<std::unique_ptr<state_box>()> make_state;
  std::unordered_map<std::string, handler_entry> handlers;
};

template <class Signature>
struct handler_traits;

template <class R, class Ctx, class... Args>
struct handler_traits<task<R>(Ctx&, Args...)> {
  static_assert(sizeof...(Args) <= 1,
                "a handler takes the context and at most one input");
  using result_type = R;
  using context_type = Ctx;
  using input_type = std::tuple<std::decay_t<Args>...>;
};

template <class R, class Ctx, class... Args>
struct handler_traits<task<R> (*)(Ctx&, Args...)>
  : handler_traits<task<R>(Ctx&, Args...)> {};

template <class C, class R, class Ctx, class... Args>
struct handler_traits<task<R> (C::*)(Ctx&, Args...) const>
  : handler_traits<task<R>(Ctx&, Args...)> {};

template <class C, class R, class Ctx, class... Args>
struct handler_traits<task<R> (C::*)(Ctx&, Args...)>
  : handler_traits<task<R>(Ctx&, Args...)> {};

template <class F, class = void>
struct handler_callable_traits : handler_traits<std::decay_t<F>> {};

template <class F>
struct handler_callable_traits<F, std::void_t<decltype(&F::operator())>>
  : handler_traits<decltype(&F::operator())> {};

/// Holds a handler's context: a base of its driver, so that it is built
/// before the coroutine and goes after the coroutine's frame.
template <class Ctx>
struct context_holder {
  template <class... Ts>
  explicit context_holder(Ts&&... xs) : ctx(std::forward<Ts>(xs)...) {
  }
  Ctx ctx;
};

template <class R, class Ctx>
class handler_driver final : public context_holder<Ctx>,
                             public typed_driver<R> {
public:
  template <class State>
  handler_driver(run_core& core, State& state, const std::string& key,
                 persistence::encoding enc)
    : context_holder<Ctx>(core, state, key), typed_driver<R>(enc) {
  }
};

/// Returns `fn`, a handler taking `Ctx&` (an `object_context<State>` or a
/// `shared_object_context<State>`), erased.
template <class State, class F>
handler_entry make_handler_entry(F fn) {
  using traits = handler_callable_traits<F>;
  using result_type = typename traits::result_type;
  using context_type = typename traits::context_type;
  using input_type = typename traits::input_type;
  constexpr bool shared
    = std::is_same_v<context_type, shared_object_context<State>>;
  static_assert(shared || std::is_same_v<context_type, object_context<State>>,
                "a handler of an object with state State takes an "
                "object_context<State>& (exclusive) or a "
                "shared_object_context<State>& (shared)");
  auto code = std::make_shared<F>(std::move(fn));
  return {shared,
          [code](run_core& core, void* state, const std::string& key,
                 std::string inputs,
                 persistence::encoding enc) -> std::unique_ptr<run_driver> {
            auto driver = std::make_unique<handler_driver<result_type,
                                                          context_type>>(
              core, *static_cast<State*>(state), key, enc);
            try {
              if constexpr (std::tuple_size_v<input_type> == 0)
                driver->code_ = (*code)(driver->ctx);
              else
                driver->code_ = (*code)(
                  driver->ctx,
                  persistence::decode<std::tuple_element_t<0, input_type>>(
                    inputs));
            } catch (...) {
              driver->failed_ = std::current_exception();
            }
            return driver;
          }};
}

} // namespace perdure::detail
