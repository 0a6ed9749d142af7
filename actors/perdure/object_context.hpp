#pragma once

#include <string>

#include "perdure/workflow_context.hpp"

namespace perdure {

/// What an exclusive handler of a virtual object gets: everything a
/// workflow's context offers (steps, sleeps, awakeables, calls, all
/// journaled and replayed) plus the object's state, to read and change.
/// Exclusive handlers of one key run one at a time; what the handler leaves
/// in `state()` commits together with the end of its invocation, exactly
/// once. A handler that fails changes nothing.
template <class State>
class object_context : public workflow_context {
public:
  object_context(detail::run_core& core, State& state, const std::string& key)
    : workflow_context(core), state_(&state), key_(&key) {
  }

  /// Returns the object's state (a default `State` before its first commit).
  State& state() noexcept {
    return *state_;
  }

  /// Returns the object's key.
  const std::string& key() const noexcept {
    return *key_;
  }

private:
  State* state_;
  const std::string* key_;
};

/// What a shared handler gets: the object's committed state, read-only (a
/// shared handler cannot change it: `state()` is const). Shared handlers of
/// one key run concurrently with each other, never with an exclusive one.
template <class State>
class shared_object_context : public workflow_context {
public:
  shared_object_context(detail::run_core& core, const State& state,
                        const std::string& key)
    : workflow_context(core), state_(&state), key_(&key) {
  }

  /// Returns the object's state as last committed.
  const State& state() const noexcept {
    return *state_;
  }

  /// Returns the object's key.
  const std::string& key() const noexcept {
    return *key_;
  }

private:
  const State* state_;
  const std::string* key_;
};

} // namespace perdure
