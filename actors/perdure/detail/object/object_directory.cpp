#include "perdure/detail/object/object_directory.hpp"

#include <caf/send.hpp>

#include "perdure/detail/object/object_actor.hpp"
#include "perdure/detail/object_entry.hpp"
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

object_directory::object_directory(runtime_services& rt) : rt_(rt) {
}

std::string object_directory::id_of(const std::string& type,
                                    const std::string& key) {
  // Names hold no NUL: one string names the pair.
  std::string id = type;
  id.push_back('\0');
  id += key;
  return id;
}

std::optional<caf::actor>
object_directory::prepare(persistence::run_record& run) {
  std::lock_guard guard{mtx_};
  auto i = active_.find(id_of(run.object_type, run.object_key));
  if (i == active_.end()) {
    run.status = run_status::enqueued;
    run.owner = {};
    return std::nullopt;
  }
  // Stored under the key's epoch, its actor takes it from memory: no read.
  run.status = run_status::pending;
  run.owner = {rt_.cfg.executor_id, i->second.epoch};
  return i->second.actor;
}

void object_directory::deliver(const std::optional<caf::actor>& to,
                               persistence::run_record run) {
  if (hand(to, run))
    return;
  // Stored; the actor left meanwhile, or there was none: whoever claims the
  // key next takes it (claims take ENQUEUED and PENDING invocations).
  reach(run.object_type, run.object_key, true);
}

bool object_directory::hand(const std::optional<caf::actor>& to,
                            persistence::run_record& run) {
  // Stored ENQUEUED though `to` was to take it in memory: older calls of
  // the key wait unseen, so it reaches the actor through the inbox.
  if (!to || run.status != run_status::pending)
    return false;
  std::lock_guard guard{mtx_};
  auto i = active_.find(id_of(run.object_type, run.object_key));
  if (i == active_.end() || i->second.actor != *to
      || i->second.epoch != run.owner.epoch)
    return false;
  ++i->second.handed;
  // Active here from now: its callers wait for its end, not the store.
  rt_.runs->invocation_started(run.id, *to, run_registry::queued_exec,
                               run.owner.epoch);
  hand_invocation(*to, std::move(run));
  return true;
}

void object_directory::reclaim(const std::string& type,
                               const std::string& key) {
  {
    std::lock_guard guard{mtx_};
    if (auto i = active_.find(id_of(type, key)); i != active_.end()) {
      tell_reclaim(i->second.actor); // it leaves; the key is claimed again
      return;
    }
  }
  reach(type, key, false);
}

void object_directory::reach(const std::string& type, const std::string& key,
                             bool announce) {
  auto id = id_of(type, key);
  {
    std::unique_lock guard{mtx_};
    settled_.wait(guard, [&] { return activating_.count(id) == 0; });
    if (auto i = active_.find(id); i != active_.end()) {
      ++i->second.handed; // passivation waits for it (see try_passivate)
      tell_inbox_news(i->second.actor);
      return;
    }
    activating_.insert(id);
  }
  bool active = false;
  try {
    active = activate(type, key);
  } catch (const std::exception& ex) {
    rt_.log().warn("perdure: could not claim {} '{}' ({}); trying again soon",
                   type, key, ex.what());
    std::lock_guard guard{mtx_};
    if (orphans_.empty())
      orphans_due_ = std::chrono::steady_clock::now() + rt_.cfg.orphan_retry;
    orphans_.emplace(id, std::make_pair(type, key));
  }
  {
    std::lock_guard guard{mtx_};
    activating_.erase(id);
  }
  settled_.notify_all();
  if (!active && announce) {
    try {
      rt_.stores->with([&](persistence::store& db) {
        db.notify(persistence::notice::calls(type, key));
      });
    } catch (const std::exception& ex) {
      // Stored anyway: the holder's sweep finds it.
      rt_.log().warn("perdure: could not announce an invocation of {} '{}': "
                     "{}",
                     type, key, ex.what());
    }
  }
}

bool object_directory::activate(const std::string& type,
                                const std::string& key) {
  auto registered = rt_.object_types.find(type);
  if (registered == rt_.object_types.end() || !rt_.runs->running())
    return false;
  auto id = id_of(type, key);
  std::optional<std::int64_t> unreadable_at;
  {
    std::lock_guard guard{mtx_};
    if (auto u = unreadable_.find(id); u != unreadable_.end())
      unreadable_at = u->second;
  }
  if (unreadable_at) {
    // Given up for a state this code cannot read: claimed again only once
    // another process wrote it.
    auto now = rt_.stores->with(
      [&](persistence::store& db) { return db.get_object(type, key); });
    if (now && now->version == *unreadable_at)
      return false;
    std::lock_guard guard{mtx_};
    unreadable_.erase(id);
  }
  auto claimed = rt_.stores->with([&](persistence::store& db) {
    return db.claim_object(type, key, rt_.cfg.executor_id, rt_.object_filter);
  });
  if (!claimed)
    return false; // another live process holds it
  object_activation a;
  a.entry = &registered->second;
  std::vector<std::string> ids;
  for (auto& run : claimed->inbox)
    ids.push_back(run.id);
  if (!ids.empty())
    a.journals = rt_.stores->with(
      [&](persistence::store& db) { return db.load_journals(ids); });
  auto epoch = claimed->object.owner.epoch;
  a.claimed = std::move(*claimed);
  std::lock_guard guard{mtx_};
  // Spawned under the lock: the actor is in the directory before it can
  // ask to leave.
  auto actor = rt_.launcher->spawn_object(std::move(a));
  if (!actor)
    return false; // stopping
  active_[id] = entry{*actor, epoch, 0};
  names_[id] = {type, key};
  return true;
}

void object_directory::recover(bool at_start) {
  if (rt_.object_types.empty())
    return;
  for (;;) {
    auto keys = rt_.stores->with([&](persistence::store& db) {
      return db.claimable_objects(rt_.cfg.executor_id, rt_.object_filter, 512,
                                  at_start);
    });
    std::size_t claimed = 0;
    for (auto& [type, key] : keys) {
      bool before = false;
      {
        std::lock_guard guard{mtx_};
        before = active_.count(id_of(type, key)) > 0;
      }
      reach(type, key, false);
      std::lock_guard guard{mtx_};
      claimed += !before && active_.count(id_of(type, key)) > 0;
    }
    // A full page may hide more, as long as claims make progress.
    if (keys.size() < 512 || claimed == 0)
      return;
  }
}

void object_directory::stopped(const std::string& type, const std::string& key,
                               const caf::actor& actor, bool revive) {
  auto id = id_of(type, key);
  std::lock_guard guard{mtx_};
  if (auto i = active_.find(id); i != active_.end() && i->second.actor == actor) {
    active_.erase(i);
    names_.erase(id);
  }
  if (revive) {
    if (orphans_.empty())
      orphans_due_ = std::chrono::steady_clock::now() + rt_.cfg.orphan_retry;
    orphans_.emplace(std::move(id), std::make_pair(type, key));
  }
}

void object_directory::give_up(const std::string& type, const std::string& key,
                               const caf::actor& actor,
                               std::optional<std::int64_t> unreadable_version) {
  auto id = id_of(type, key);
  {
    std::lock_guard guard{mtx_};
    if (unreadable_version)
      unreadable_[id] = *unreadable_version;
    if (auto i = active_.find(id);
        i != active_.end() && i->second.actor == actor) {
      active_.erase(i);
      names_.erase(id);
    }
  }
}

void object_directory::retry_give_up(const std::string& type,
                                     const std::string& key) {
  // Claimed again (the claim gives the key up if its next call is not for
  // this process; a state it cannot read is met again).
  auto id = id_of(type, key);
  std::lock_guard guard{mtx_};
  unreadable_.erase(id);
  if (orphans_.empty())
    orphans_due_ = std::chrono::steady_clock::now() + rt_.cfg.orphan_retry;
  orphans_.emplace(std::move(id), std::make_pair(type, key));
}

bool object_directory::try_passivate(const std::string& type,
                                     const std::string& key,
                                     const caf::actor& actor,
                                     std::uint64_t received) {
  std::lock_guard guard{mtx_};
  auto i = active_.find(id_of(type, key));
  if (i == active_.end() || i->second.actor != actor
      || i->second.handed != received)
    return false;
  names_.erase(i->first);
  active_.erase(i);
  return true;
}

bool object_directory::revival_due() {
  std::lock_guard guard{mtx_};
  return !orphans_.empty()
         && std::chrono::steady_clock::now() >= orphans_due_;
}

void object_directory::revive_due() {
  decltype(orphans_) due;
  {
    std::lock_guard guard{mtx_};
    due.swap(orphans_);
  }
  for (auto& [id, which] : due)
    reach(which.first, which.second, false);
}

std::vector<caf::actor> object_directory::actors() {
  std::lock_guard guard{mtx_};
  std::vector<caf::actor> out;
  for (auto& [id, e] : active_)
    out.push_back(e.actor);
  return out;
}

std::vector<caf::actor> object_directory::drop_all() {
  std::lock_guard guard{mtx_};
  std::vector<caf::actor> out;
  for (auto& [id, e] : active_) {
    out.push_back(e.actor);
    if (auto n = names_.find(id); n != names_.end())
      dropped_.emplace(id, n->second);
  }
  active_.clear();
  names_.clear();
  return out;
}

void object_directory::revive_dropped() {
  decltype(dropped_) dropped;
  {
    std::lock_guard guard{mtx_};
    dropped.swap(dropped_);
  }
  for (auto& [id, which] : dropped)
    reach(which.first, which.second, false);
}

std::size_t object_directory::size() {
  std::lock_guard guard{mtx_};
  return active_.size();
}

} // namespace perdure::detail
