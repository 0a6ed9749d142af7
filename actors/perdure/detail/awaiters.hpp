#pragma once

// The awaiters behind workflow_context's durable operations. Each asks the
// run (run_core) whether replay has the outcome already; if not, it suspends
// and the run actor resumes it once the outcome is durable.

#include <coroutine>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "perdure/detail/run_core.hpp"
#include "perdure/cancelled_error.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/persistence/text.hpp"
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
    case persistence::outcome::unreadable:
      throw perdure::error(errc::store_error, e.error);
    case persistence::outcome::cancelled:
      throw cancelled_error(e.error);
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

/// `workflow_context::patched`: the answer at once, unless the run takes
/// the patch here for the first time: then once its marker is durable.
class [[nodiscard]] patch_awaiter {
public:
  patch_awaiter(run_core& core, run_core::patch_decision d)
    : core_(&core), d_(std::move(d)) {
  }

  bool await_ready() const noexcept {
    return !d_.marker;
  }

  void await_suspend(std::coroutine_handle<> h) {
    core_->perform(std::move(*d_.marker), h);
  }

  bool await_resume() const noexcept {
    return d_.taken;
  }

private:
  run_core* core_;
  run_core::patch_decision d_;
};

/// `co_await`ing a durable operation: ready at once when replaying,
/// otherwise suspended until the actor has made the outcome durable.
template <class T>
class [[nodiscard]] operation_awaiter {
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
/// Small on purpose: it lives in the frame of every sleeping run.
class [[nodiscard]] sleep_awaiter {
public:
  sleep_awaiter(run_core& core, std::int32_t seq, std::int64_t due_ms)
    : core_(&core), seq_(seq), due_ms_(due_ms) {
  }

  bool await_ready() {
    if (!core_->replaying(seq_, persistence::entry_kind::sleep, name()))
      return false;
    return std::stoll(core_->recorded(seq_).payload) <= core_->now_ms();
  }

  void await_suspend(std::coroutine_handle<> h) {
    operation op;
    op.seq = seq_;
    op.kind = persistence::entry_kind::sleep;
    op.name = name();
    op.due_ms = due_ms_;
    core_->perform(std::move(op), h);
  }

  void await_resume() {
    core_->forget(seq_);
  }

  static const std::string& name() {
    static const std::string n = "sleep";
    return n;
  }

private:
  run_core* core_;
  std::int32_t seq_;
  std::int64_t due_ms_;
};

/// Returns the id of the awakeable created at journal index `seq`: a pure
/// function of the run and the index, so replay hands out the same id.
inline std::string awakeable_id(const std::string& run_id, std::int32_t seq) {
  return "awk_" + std::to_string(seq) + "_" + run_id;
}

/// Returns the resolution `awakeable_id` names (id, run, journal index),
/// or nothing if `id` is not of its form.
inline std::optional<persistence::resolution>
parse_awakeable_id(const std::string& id) {
  if (id.rfind("awk_", 0) != 0)
    return std::nullopt;
  auto sep = id.find('_', 4);
  if (sep == std::string::npos || sep == 4 || sep - 4 > 9
      || id.find_first_not_of("0123456789", 4) != sep || sep + 1 >= id.size())
    return std::nullopt;
  persistence::resolution r;
  r.id = id;
  r.seq = std::stoi(id.substr(4, sep - 4));
  r.run_id = id.substr(sep + 1);
  if (!persistence::is_valid_name(r.run_id))
    return std::nullopt;
  return r;
}

} // namespace detail

namespace detail {

/// Returns the resolution id of promise `name` of run `run_id` (the run's
/// length first, so no two (run, name) pairs share an id).
inline std::string promise_id(const std::string& run_id,
                              const std::string& name) {
  return "prm_" + std::to_string(run_id.size()) + "_" + run_id + name;
}

/// Returns a wait at the next journal index of `core`, named `label` (what
/// replay checks), completed by the first of `sources` to deliver or at
/// `due_ms` (ms since the epoch; 0: no deadline).
inline operation wait_operation(run_core& core, std::string label,
                                std::vector<wait_source> sources,
                                std::int64_t due_ms = 0) {
  operation op;
  op.seq = core.next_seq();
  op.kind = persistence::entry_kind::await;
  op.name = std::move(label);
  op.sources = std::move(sources);
  op.due_ms = due_ms;
  return op;
}

/// Returns the outcome of a recorded wait, or throws what it recorded
/// (a rejection or a failed child as `terminal_error`).
template <class T>
T unpack_wait(const wait_outcome& w) {
  if (w.result != persistence::outcome::value)
    throw terminal_error(w.error);
  if constexpr (!std::is_void_v<T>)
    return persistence::decode<T>(w.payload);
}

/// `co_await`ing a wait: ready at once when replaying, otherwise suspended
/// until one of its sources delivers or its deadline passes; the outcome is
/// checkpointed before the code sees it, so replay picks the same source.
class [[nodiscard]] wait_awaiter {
public:
  wait_awaiter(run_core& core, operation op)
    : core_(&core), op_(std::move(op)), seq_(op_.seq) {
    for (auto& s : op_.sources)
      if (s.what == wait_source::kind::message)
        topics_.push_back(s.key);
      else
        topics_.emplace_back();
  }

  bool await_ready() {
    return core_->replaying(op_.seq, op_.kind, op_.name);
  }

  void await_suspend(std::coroutine_handle<> h) {
    core_->perform(std::move(op_), h);
  }

  wait_outcome await_resume() {
    auto w = wait_outcome::decode(core_->take(seq_));
    if (w.index >= 0 && static_cast<std::size_t>(w.index) < topics_.size()
        && !topics_[static_cast<std::size_t>(w.index)].empty())
      core_->consume(topics_[static_cast<std::size_t>(w.index)], w.cursor);
    return w;
  }

private:
  run_core* core_;
  operation op_;
  std::int32_t seq_;
  std::vector<std::string> topics_;
};

/// A wait whose outcome is decoded as `T`.
template <class T>
class [[nodiscard]] typed_wait_awaiter {
public:
  typed_wait_awaiter(run_core& core, operation op) : inner_(core, std::move(op)) {
  }

  bool await_ready() {
    return inner_.await_ready();
  }

  void await_suspend(std::coroutine_handle<> h) {
    inner_.await_suspend(h);
  }

  T await_resume() {
    return unpack_wait<T>(inner_.await_resume());
  }

private:
  wait_awaiter inner_;
};

/// `co_await`ing a saga's phase entry: tells the run the phase it is in, live
/// and on replay alike (how a cancellation is taken depends on it).
class [[nodiscard]] phase_awaiter {
public:
  phase_awaiter(run_core& core, operation op)
    : core_(&core), op_(std::move(op)), seq_(op_.seq) {
  }

  bool await_ready() {
    return core_->replaying(op_.seq, op_.kind, op_.name);
  }

  void await_suspend(std::coroutine_handle<> h) {
    core_->perform(std::move(op_), h);
  }

  void await_resume() {
    auto e = core_->take(seq_);
    unpack<void>(e);
    core_->phase_entered(e.payload);
  }

private:
  run_core* core_;
  operation op_;
  std::int32_t seq_;
};

/// `co_await`ing an operation that only records something known now (an
/// awakeable's creation, a deadline): returns the recorded payload.
class [[nodiscard]] record_awaiter {
public:
  record_awaiter(run_core& core, operation op)
    : core_(&core), op_(std::move(op)), seq_(op_.seq) {
  }

  bool await_ready() {
    return core_->replaying(op_.seq, op_.kind, op_.name);
  }

  void await_suspend(std::coroutine_handle<> h) {
    core_->perform(std::move(op_), h);
  }

  persistence::journal_entry await_resume() {
    return core_->take(seq_);
  }

private:
  run_core* core_;
  operation op_;
  std::int32_t seq_;
};

} // namespace detail

} // namespace perdure
