#include "perdure/detail/runs/deadlines.hpp"

#include "perdure/detail/execution/run_message.hpp"
#include "perdure/detail/timer/timer_service.hpp"

namespace perdure::detail {

void run_deadlines::arm(const std::string& id, std::int64_t due_ms) {
  std::lock_guard guard{mtx_};
  auto [i, fresh] = armed_.try_emplace(id, due_ms);
  if (!fresh && i->second == due_ms)
    return;
  i->second = due_ms; // a new attempt's deadline: the old timer is stale
  timers_.schedule({due_ms, id, deadline_seq});
}

void run_deadlines::fired(const std::string& id, std::int64_t due_ms) {
  std::lock_guard guard{mtx_};
  if (auto i = armed_.find(id); i != armed_.end() && i->second == due_ms)
    armed_.erase(i);
}

void run_deadlines::retry_later(const std::string& id, std::int64_t due_ms) {
  std::lock_guard guard{mtx_};
  if (retries_.empty())
    retry_due_ = std::chrono::steady_clock::now() + std::chrono::seconds{1};
  retries_[id] = due_ms;
}

std::vector<std::pair<std::string, std::int64_t>>
run_deadlines::take_due_retries(std::chrono::steady_clock::time_point now) {
  std::vector<std::pair<std::string, std::int64_t>> due;
  std::lock_guard guard{mtx_};
  if (retries_.empty() || now < retry_due_)
    return due;
  due.assign(retries_.begin(), retries_.end());
  retries_.clear();
  return due;
}

} // namespace perdure::detail
