#pragma once

#include <caf/thread_hook.hpp>

namespace perdure::detail {

/// Marks the threads of a runtime's actor system as that runtime's. Code
/// on them (a workflow body, an object handler) must not call
/// `runtime::stop()`, which waits for every actor, its own included.
class actor_threads final : public caf::thread_hook {
public:
  explicit actor_threads(const void* owner) : owner_(owner) {}

  void init(caf::actor_system&) override {}
  void thread_started() override;
  void thread_terminates() override;

  /// Returns whether the calling thread is an actor thread of `owner`.
  static bool runs_on(const void* owner) noexcept;

private:
  const void* owner_;
};

} // namespace perdure::detail
