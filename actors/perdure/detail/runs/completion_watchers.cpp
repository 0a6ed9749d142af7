#include "perdure/detail/runs/completion_watchers.hpp"

#include "perdure/detail/runs/end_callbacks.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/error.hpp"

namespace perdure::detail {

completion_watchers::completion_watchers(runtime_services& svc) : svc_(svc) {
}

completion_watchers::~completion_watchers() = default;

void completion_watchers::on_end(const std::string& id,
                                 std::function<void()> done) {
  std::lock_guard guard{callbacks_mtx_};
  if (!svc_.runs->running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  if (!callbacks_)
    callbacks_ = std::make_unique<end_callbacks>(svc_);
  callbacks_->add(id, std::move(done));
}

void completion_watchers::stop_callbacks() {
  // Joined outside the lock: a callback may call when_done (which throws
  // not_running now) or wait for a run whose end takes it.
  std::unique_ptr<end_callbacks> callbacks;
  {
    std::lock_guard guard{callbacks_mtx_};
    callbacks = std::move(callbacks_);
  }
  if (callbacks && callbacks->on_own_thread()) // stop() in a callback
    end_callbacks::stop_from_own_thread(std::move(callbacks));
  callbacks.reset(); // before the stores it reads
}

void completion_watchers::tell(const std::string& id,
                               std::optional<run_outcome> outcome) {
  {
    std::lock_guard guard{callbacks_mtx_};
    if (callbacks_)
      callbacks_->ended(id); // it reads the store: any stop may be an end
  }
  std::lock_guard guard{mtx_};
  auto i = watchers_.find(id);
  if (i == watchers_.end())
    return;
  ++i->second.stops;
  if (outcome) {
    i->second.outcome = std::move(outcome);
    i->second.outcome_at = i->second.stops;
  }
  i->second.ended.notify_all(); // under the lock: unwatch may erase it
}

void completion_watchers::watch(const std::string& id) {
  std::lock_guard guard{mtx_};
  ++watchers_[id].count;
}

void completion_watchers::unwatch(const std::string& id) {
  std::lock_guard guard{mtx_};
  auto i = watchers_.find(id);
  if (i != watchers_.end() && --i->second.count == 0)
    watchers_.erase(i);
}

std::uint64_t completion_watchers::stops(const std::string& id) {
  std::lock_guard guard{mtx_};
  return watchers_[id].stops;
}

std::optional<run_outcome>
completion_watchers::wait_ended(const std::string& id,
                                std::chrono::milliseconds timeout,
                                std::uint64_t stops) {
  std::unique_lock guard{mtx_};
  auto& w = watchers_[id];
  // A tell with an outcome counts a stop too.
  w.ended.wait_for(guard, timeout, [&] { return w.stops != stops; });
  if (w.outcome_at > stops)
    return w.outcome;
  return std::nullopt;
}

} // namespace perdure::detail
