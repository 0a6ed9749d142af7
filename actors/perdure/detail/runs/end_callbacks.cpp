#include "perdure/detail/runs/end_callbacks.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "perdure/detail/delivery/notice_router.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/lease/lease_service.hpp"
#include "perdure/detail/object/object_directory.hpp"
#include "perdure/detail/runtime/queue_hooks.hpp"
#include "perdure/detail/runs/completion_watchers.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/detail/timer/timer_service.hpp"
#include "perdure/persistence/journal_writer.hpp"

namespace perdure::detail {

namespace {

/// The runtime whose callbacks this thread runs (none: nullptr).
thread_local const runtime_services* callbacks_of = nullptr;

} // namespace

bool end_callbacks::runs_on(const runtime_services* rt) noexcept {
  return rt != nullptr && callbacks_of == rt;
}

end_callbacks::end_callbacks(runtime_services& rt) : rt_(rt) {
  thread_ = std::thread{[this] { loop(); }};
}

end_callbacks::~end_callbacks() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable())
    return; // its own thread deletes it: nothing of the runtime is touched
  thread_.join();
  // Ends known in memory that did not run yet: their callers hear of them.
  for (auto& f : ready_)
    call_guarded(rt_, f);
  for (auto& [id, all] : pending_)
    for (auto& w : all)
      if (w.dropped)
        call_guarded(rt_, w.dropped);
}

void end_callbacks::post(std::function<void()> f) {
  {
    std::lock_guard guard{mtx_};
    ready_.push_back(std::move(f));
  }
  cv_.notify_all();
}

namespace {

/// Runs `f`; returns what it threw, if anything (empty: nothing).
std::string call_catching(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
  return {};
}

void log_throw(runtime_services& rt, const std::string& threw) {
  if (!threw.empty())
    rt.log().error("perdure: a when_done or call_async callback threw: {}",
                   threw);
}

} // namespace

void end_callbacks::call_guarded(runtime_services& rt,
                                 const std::function<void()>& f) {
  log_throw(rt, call_catching(f));
}

bool end_callbacks::run_unlocked(std::vector<std::function<void()>>& fs,
                                 std::unique_lock<std::mutex>& guard) {
  // A member while it runs: a callback that stops the runtime runs the
  // rest of it (stop_from_own_thread), not nobody.
  batch_ = std::move(fs);
  batch_next_ = 0;
  while (batch_next_ < batch_.size()) {
    auto f = std::move(batch_[batch_next_++]);
    guard.unlock();
    auto threw = call_catching(f);
    guard.lock();
    if (delete_itself_)
      return false; // f stopped the runtime (which may be gone): not logged
    guard.unlock();
    log_throw(rt_, threw);
    guard.lock();
  }
  batch_.clear();
  return true;
}

void end_callbacks::add(const std::string& id,
                        std::function<void(const ended_run&)> done,
                        std::function<void()> dropped) {
  {
    std::lock_guard guard{mtx_};
    pending_[id].push_back({std::move(done), std::move(dropped)});
    ended_.insert(id); // checked at once: it may have ended already
  }
  cv_.notify_all();
}

void end_callbacks::ended(const std::string& id) {
  {
    std::lock_guard guard{mtx_};
    if (pending_.count(id) == 0)
      return;
    ended_.insert(id);
  }
  cv_.notify_all();
}

std::unordered_map<std::string, std::shared_ptr<const ended_run>>
end_callbacks::read_ended(const std::vector<std::string>& ids) {
  // Many callers may wait on runs held elsewhere (every poll reads them
  // all): a statement per chunk, not a round trip per run.
  constexpr std::size_t chunk = 500;
  std::unordered_map<std::string, std::shared_ptr<const ended_run>> out;
  for (std::size_t at = 0; at < ids.size(); at += chunk) {
    std::vector<std::string> some(
      ids.begin() + static_cast<std::ptrdiff_t>(at),
      ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), at + chunk)));
    try {
      auto runs = rt_.stores->with(
        [&](persistence::store& db) { return db.get_runs(some); });
      std::unordered_set<std::string> found;
      for (auto& run : runs) {
        found.insert(run.id);
        if (is_terminal(run.status)) {
          auto id = run.id;
          out[id] = std::make_shared<const ended_run>(std::move(run));
        }
      }
      for (auto& id : some) // gone: the callback's get() says so
        if (found.count(id) == 0)
          out[id] = std::make_shared<const ended_run>();
    } catch (const std::exception& ex) {
      rt_.log().warn("perdure: could not read {} runs for their callbacks "
                     "(trying again at the next poll): {}",
                     some.size(), ex.what());
    }
  }
  return out;
}

void end_callbacks::stop_from_own_thread(std::unique_ptr<end_callbacks> self) {
  decltype(pending_) waiting;
  std::vector<std::function<void()>> rest;
  {
    std::lock_guard guard{self->mtx_};
    self->stopping_ = true;
    self->delete_itself_ = true;
    waiting.swap(self->pending_);
    // The ends after the stopping callback's in its batch, and the ends
    // posted since: known, so their callers hear them.
    for (auto i = self->batch_next_; i < self->batch_.size(); ++i)
      rest.push_back(std::move(self->batch_[i]));
    self->batch_next_ = self->batch_.size();
    for (auto& f : self->ready_)
      rest.push_back(std::move(f));
    self->ready_.clear();
    self->thread_.detach();
  }
  auto& rt = self->rt_;
  (void)self.release(); // the thread's now
  // Still within stop(), nested in the stopping callback: the runtime is
  // alive for these.
  for (auto& f : rest)
    call_guarded(rt, f);
  for (auto& [id, all] : waiting)
    for (auto& w : all)
      if (w.dropped)
        call_guarded(rt, w.dropped);
}

void end_callbacks::loop() {
  callbacks_of = &rt_;
  run();
  bool delete_itself = false;
  {
    std::lock_guard guard{mtx_};
    delete_itself = delete_itself_;
  }
  if (delete_itself)
    delete this; // nothing of it is touched after this
}

void end_callbacks::run() {
  std::unique_lock guard{mtx_};
  auto next_poll = std::chrono::steady_clock::now();
  while (!stopping_) {
    cv_.wait_until(guard, next_poll, [this] {
      return stopping_ || !ended_.empty() || !ready_.empty();
    });
    if (stopping_)
      break;
    if (!ready_.empty()) { // ends known in memory: no read
      auto ready = std::move(ready_);
      ready_.clear();
      if (!run_unlocked(ready, guard))
        return;
      if (ended_.empty() && std::chrono::steady_clock::now() < next_poll)
        continue;
    }
    std::vector<std::string> check;
    if (std::chrono::steady_clock::now() >= next_poll) {
      // Runs ending in other processes tell nobody here: read the store.
      for (auto& [id, callbacks] : pending_)
        if (!rt_.runs->is_active(id))
          check.push_back(id);
      next_poll = std::chrono::steady_clock::now() + rt_.cfg.poll_interval;
    }
    for (auto& id : ended_)
      check.push_back(id);
    ended_.clear();
    guard.unlock();
    auto done = read_ended(check);
    guard.lock();
    std::vector<std::function<void()>> due;
    for (auto& entry : done) {
      auto i = pending_.find(entry.first);
      if (i == pending_.end())
        continue;
      for (auto& w : i->second)
        due.push_back(
          [f = std::move(w.done), run = entry.second] { f(*run); });
      pending_.erase(i);
    }
    if (!run_unlocked(due, guard))
      return;
  }
}

} // namespace perdure::detail
