#include "perdure/detail/runtime/actor_threads.hpp"

namespace perdure::detail {

namespace {

thread_local const void* actor_thread_owner = nullptr;

} // namespace

void actor_threads::thread_started() {
  actor_thread_owner = owner_;
}

void actor_threads::thread_terminates() {
  actor_thread_owner = nullptr;
}

bool actor_threads::runs_on(const void* owner) noexcept {
  return owner != nullptr && actor_thread_owner == owner;
}

} // namespace perdure::detail
