#include "perdure/detail/runs/completion_watchers.hpp"

#include "perdure/detail/runs/collected.hpp"
#include "perdure/detail/runs/end_callbacks.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/error.hpp"

namespace perdure::detail {

namespace {

/// Returns run `id`'s end from `run` as the store has it (ended, or gone).
call_end end_of(const std::string& id, const ended_run& run) {
  call_end end;
  end.id = id;
  try {
    if (!run)
      throw perdure::error(errc::not_found,
                           "call '" + id + "' is gone from the store");
    throw_if_collected(*run);
    end.outcome = {run->status, run->output, run->error};
  } catch (...) {
    end.failure = std::current_exception();
  }
  return end;
}

std::exception_ptr stopped_before_end(const std::string& id) {
  return std::make_exception_ptr(perdure::error(
    errc::not_running,
    "the runtime stopped before call '" + id
      + "' ended here; it may still run: read its end with "
        "retrieve_workflow(id).get() from a running client"));
}

} // namespace

completion_watchers::completion_watchers(runtime_services& svc) : svc_(svc) {
}

completion_watchers::~completion_watchers() = default;

end_callbacks& completion_watchers::callbacks() {
  if (!svc_.runs->running())
    throw perdure::error(errc::not_running, "the runtime is not running");
  if (!callbacks_)
    callbacks_ = std::make_unique<end_callbacks>(svc_);
  return *callbacks_;
}

void completion_watchers::on_end(const std::string& id,
                                 std::function<void()> done) {
  std::lock_guard guard{callbacks_mtx_};
  callbacks().add(id, [done = std::move(done)](const ended_run&) { done(); });
}

std::uint64_t completion_watchers::on_outcome(const std::string& id,
                                              outcome_callback done,
                                              bool in_place, bool confirmed) {
  std::lock_guard guard{callbacks_mtx_};
  (void)callbacks(); // started (or not_running) now, not at the end
  auto token = ++next_token_;
  outcomes_[id].push_back({token, std::move(done), in_place, confirmed, {}});
  return token;
}

void completion_watchers::confirm(const std::string& id, std::uint64_t token) {
  registration r;
  {
    std::lock_guard guard{callbacks_mtx_};
    auto i = outcomes_.find(id);
    if (i == outcomes_.end())
      return;
    for (auto& each : i->second)
      if (each.token == token && !each.parked && !each.stopped) {
        each.confirmed = true;
        return;
      }
    r = take(id, token); // told while unconfirmed: it runs now
    if (r.done && !r.parked && callbacks_) { // told a stop: the store's word
      read_when_ended(id, std::move(r.done));
      return;
    }
  }
  if (r.done && r.parked) {
    auto end = std::move(*r.parked);
    run_now(std::move(r), std::move(end));
  } else if (r.done) // stopping: unreachable while registered, never silent
    run_now(std::move(r), call_end{id, {}, stopped_before_end(id)});
}

bool completion_watchers::on_callback_thread() {
  std::lock_guard guard{callbacks_mtx_};
  return callbacks_ && callbacks_->on_own_thread();
}

completion_watchers::registration
completion_watchers::take(const std::string& id, std::uint64_t token) {
  auto i = outcomes_.find(id);
  if (i == outcomes_.end())
    return {};
  auto& all = i->second;
  for (auto j = all.begin(); j != all.end(); ++j) {
    if (j->token != token)
      continue;
    auto r = std::move(*j);
    all.erase(j);
    if (all.empty())
      outcomes_.erase(i);
    return r;
  }
  return {};
}

void completion_watchers::run_now(registration r, call_end end) {
  if (!r.in_place) {
    std::lock_guard guard{callbacks_mtx_};
    if (callbacks_) {
      callbacks_->post([done = std::move(r.done),
                        end = std::move(end)]() mutable {
        done(std::move(end));
      });
      return;
    }
  }
  end_callbacks::call_guarded(svc_, [&] { r.done(std::move(end)); });
}

void completion_watchers::finish(const std::string& id, std::uint64_t token,
                                 call_end end) {
  registration r;
  {
    std::lock_guard guard{callbacks_mtx_};
    r = take(id, token);
  }
  if (r.done) // else told first, or stopped (and told `not_running`)
    run_now(std::move(r), std::move(end));
}

void completion_watchers::read_later(const std::string& id,
                                     std::uint64_t token) {
  registration r;
  {
    std::lock_guard guard{callbacks_mtx_};
    r = take(id, token);
    if (r.done && !r.parked && callbacks_) {
      read_when_ended(id, std::move(r.done));
      return;
    }
  }
  if (r.done && r.parked) { // told while unconfirmed: the end is known
    auto end = std::move(*r.parked);
    run_now(std::move(r), std::move(end));
  } else if (r.done) // stopping: unreachable while registered, never silent
    run_now(std::move(r), call_end{id, {}, stopped_before_end(id)});
}

void completion_watchers::read_when_ended(const std::string& id,
                                          outcome_callback done) {
  // Shared: whichever of the two runs, the other is dropped unrun.
  auto shared = std::make_shared<outcome_callback>(std::move(done));
  callbacks_->add(
    id, [id, shared](const ended_run& run) { (*shared)(end_of(id, run)); },
    [id, shared] { (*shared)(call_end{id, {}, stopped_before_end(id)}); });
}

void completion_watchers::stop_callbacks() {
  // Joined outside the lock: a callback may call when_done (which throws
  // not_running now) or wait for a run whose end takes it.
  std::unique_ptr<end_callbacks> callbacks;
  decltype(outcomes_) unended;
  {
    std::lock_guard guard{callbacks_mtx_};
    callbacks = std::move(callbacks_);
    unended.swap(outcomes_);
  }
  if (callbacks && callbacks->on_own_thread()) // stop() in a callback
    end_callbacks::stop_from_own_thread(std::move(callbacks));
  callbacks.reset(); // before the stores it reads
  // Their ends were not seen here: their callers hear so, not nothing.
  for (auto& entry : unended) { // not a structured binding: clang 14
    const std::string& id = entry.first; // cannot capture one in a lambda
    for (auto& r : entry.second)
      end_callbacks::call_guarded(
        svc_, [&] { r.done(call_end{id, {}, stopped_before_end(id)}); });
  }
}

void completion_watchers::tell(const std::string& id,
                               std::optional<run_outcome> outcome) {
  std::vector<registration> told;
  {
    std::lock_guard guard{callbacks_mtx_};
    if (auto i = outcomes_.find(id); i != outcomes_.end()) {
      auto all = std::move(i->second);
      outcomes_.erase(i);
      std::vector<registration> unconfirmed;
      for (auto& r : all) {
        if (!r.confirmed) {
          // Perhaps a refused repeat of another call under its key: it
          // hears this end only once its own write is known to be this
          // call (`confirm`, `read_later`), else its error (`finish`).
          if (outcome && !r.parked)
            r.parked = call_end{id, *outcome, nullptr};
          else if (!outcome)
            r.stopped = true;
          unconfirmed.push_back(std::move(r));
        } else if (!outcome && callbacks_) { // stopped without an end
          read_when_ended(id, std::move(r.done));
        } else {
          told.push_back(std::move(r));
        }
      }
      if (!unconfirmed.empty())
        outcomes_[id] = std::move(unconfirmed);
    }
    if (callbacks_)
      callbacks_->ended(id); // it reads the store: any stop may be an end
  }
  for (auto& r : told)
    run_now(std::move(r),
            outcome ? call_end{id, *outcome, nullptr}
                    : call_end{id, {}, stopped_before_end(id)});
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
