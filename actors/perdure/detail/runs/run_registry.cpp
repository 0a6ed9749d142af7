#include "perdure/detail/runs/run_registry.hpp"

#include "perdure/detail/object/object_actor.hpp"
#include "perdure/detail/workflow/run_actor.hpp"

namespace perdure::detail {

run_registry::run_registry(std::chrono::milliseconds orphan_retry)
  : orphan_retry_(orphan_retry) {
}

void run_registry::reset() {
  std::lock_guard guard{mtx_};
  lease_lost_ = false;
  fenced_.clear();
  orphans_.clear();
  orphans_busy_ = false;
  orphan_backoff_ = std::chrono::milliseconds{0};
}

void run_registry::open() {
  std::lock_guard guard{mtx_};
  running_ = true;
}

bool run_registry::close() {
  std::lock_guard guard{mtx_};
  return std::exchange(running_, false);
}

bool run_registry::running() const {
  std::lock_guard guard{mtx_};
  return running_;
}

bool run_registry::live() const {
  std::lock_guard guard{mtx_};
  return running_ && !lease_lost_;
}

bool run_registry::lease_lost() const {
  std::lock_guard guard{mtx_};
  return lease_lost_;
}

std::vector<caf::actor> run_registry::take_actors() {
  std::vector<caf::actor> actors;
  std::lock_guard guard{mtx_};
  for (auto& [id, a] : active_)
    actors.push_back(a.actor);
  active_.clear();
  return actors;
}

void run_registry::lose_lease() {
  std::lock_guard guard{mtx_};
  lease_lost_ = true;
  for (auto& [id, a] : active_)
    if (a.exec == 0) // object actors go with their directory
      signal_run(a.actor, a.exec, run_signal::drop, -1);
  active_.clear();
  orphans_.clear();
}

bool run_registry::regain_lease() {
  std::lock_guard guard{mtx_};
  lease_lost_ = false;
  fenced_.clear();
  return running_;
}

bool run_registry::owns(const std::string& id, std::int64_t epoch) const {
  std::lock_guard guard{mtx_};
  return owns_locked(id, epoch);
}

bool run_registry::owns_locked(const std::string& id,
                               std::int64_t epoch) const {
  // A lost lease: others may be running every run of ours.
  auto i = active_.find(id);
  return !lease_lost_ && i != active_.end() && i->second.epoch == epoch
         && fenced_.count(id) == 0;
}

run_registry::body_admission
run_registry::enter_body(const std::string& id, std::int64_t epoch,
                         std::int32_t seq) {
  std::unique_lock guard{mtx_};
  if (!owns_locked(id, epoch))
    return body_admission::refused;
  if (in_body_.emplace(id, seq).second)
    return body_admission::run;
  // An older copy of this run is in this step's body: wait for it.
  body_done_.wait_for(guard, std::chrono::milliseconds{100});
  return body_admission::busy;
}

void run_registry::leave_body(const std::string& id, std::int32_t seq) {
  {
    std::lock_guard guard{mtx_};
    in_body_.erase(std::make_pair(id, seq));
  }
  body_done_.notify_all();
}

bool run_registry::is_active(const std::string& id) const {
  std::lock_guard guard{mtx_};
  return active_.count(id) > 0;
}

void run_registry::claimed_again(const std::string& id) {
  std::lock_guard guard{mtx_};
  fenced_.erase(id);
}

bool run_registry::fenced_from(const std::string& id, std::int64_t epoch) {
  std::lock_guard guard{mtx_};
  auto i = active_.find(id);
  if (reviving_.count(id) > 0
      || (i != active_.end() && i->second.epoch > epoch))
    return false; // our own newer claim fenced an older copy here
  auto& at = fenced_[id];
  at = std::max(at, epoch);
  orphans_.erase(id);
  return true;
}

std::optional<caf::actor>
run_registry::admit(const std::string& id, std::int64_t epoch,
                    const std::function<caf::actor()>& spawn) {
  std::lock_guard guard{mtx_};
  if (!running_ || lease_lost_)
    return std::nullopt;
  if (auto f = fenced_.find(id); f != fenced_.end()) {
    if (epoch <= f->second)
      return std::nullopt;
    fenced_.erase(f);
  }
  auto i = active_.find(id);
  if (i != active_.end()) {
    // Two spawns of one run race (a start or a recovery, and a revival's
    // newer claim): the copy at the newer epoch runs, the other one goes.
    if (i->second.epoch >= epoch)
      return std::nullopt;
    signal_run(i->second.actor, i->second.exec, run_signal::drop, -1);
    active_.erase(i);
  }
  auto actor = spawn();
  active_.emplace(id, active_run{actor, 0, epoch});
  return actor;
}

void run_registry::invocation_started(const std::string& id,
                                      caf::actor actor, std::uint32_t exec,
                                      std::int64_t epoch) {
  std::lock_guard guard{mtx_};
  if (!running_)
    return;
  // A claim of the key at a newer epoch than a fencing of this invocation
  // here (a lease regained, the key claimed again): that copy is ours.
  if (auto f = fenced_.find(id); f != fenced_.end() && f->second < epoch)
    fenced_.erase(f);
  active_[id] = active_run{std::move(actor), 0, epoch, exec};
}

void run_registry::stopped(const std::string& id, std::int64_t epoch) {
  // Only the copy that stops leaves: an older copy replaced by a newer
  // claim must not take the newer one's place with it.
  std::lock_guard guard{mtx_};
  auto i = active_.find(id);
  if (i != active_.end() && (epoch < 0 || i->second.epoch == epoch))
    active_.erase(i);
}

void run_registry::wake(const std::string& id, std::int32_t seq,
                        const std::function<void()>& absent) {
  std::lock_guard guard{mtx_};
  if (!running_)
    return;
  auto i = active_.find(id);
  if (i != active_.end()) {
    ++i->second.wakes;
    signal_run(i->second.actor, i->second.exec, run_signal::wake, seq);
    return;
  }
  absent();
}

void run_registry::wake_all() {
  std::lock_guard guard{mtx_};
  for (auto& [id, a] : active_)
    signal_run(a.actor, a.exec, run_signal::wake, -1);
}

std::uint64_t run_registry::wake_count(const std::string& id) const {
  std::lock_guard guard{mtx_};
  auto i = active_.find(id);
  return i == active_.end() ? 0 : i->second.wakes;
}

bool run_registry::finish_passivation(const std::string& id,
                                      std::int64_t epoch,
                                      std::uint64_t seen) {
  std::lock_guard guard{mtx_};
  auto i = active_.find(id);
  if (i == active_.end() || i->second.epoch != epoch
      || i->second.wakes != seen)
    return false;
  active_.erase(i);
  return true;
}

bool run_registry::cancel(const std::string& id,
                          std::optional<std::int64_t> up_to_epoch) {
  std::lock_guard guard{mtx_};
  auto i = active_.find(id);
  if (i == active_.end())
    return false;
  if (up_to_epoch && i->second.epoch > *up_to_epoch)
    return true; // a newer life: it reads its own row
  // The actor stops and reports the end itself.
  if (i->second.exec == queued_exec)
    cancel_queued(i->second.actor, id); // an invocation not started
  else
    signal_run(i->second.actor, i->second.exec, run_signal::cancel, 0);
  return true;
}

bool run_registry::signal_cancel(const std::string& id) {
  std::lock_guard guard{mtx_};
  if (signal_cancel_locked(id))
    return true;
  if (reviving_.count(id) > 0) {
    // Coming back now, maybe from a row read before the request:
    // signalled once it is in memory (see end_revival).
    cancels_pending_.insert(id);
    return true;
  }
  return false;
}

bool run_registry::signal_cancel_locked(const std::string& id) {
  auto i = active_.find(id);
  if (i == active_.end())
    return false;
  ++i->second.wakes; // a passivation under way stays for it
  signal_run(i->second.actor, i->second.exec, run_signal::cancel, 1);
  return true;
}

bool run_registry::begin_revival(const std::string& id, bool wake) {
  std::lock_guard guard{mtx_};
  // An orphan of ours is revived by housekeeping at a new epoch: a wake
  // keeping its epoch could run alongside a body its last copy began.
  return running_ && !lease_lost_ && active_.count(id) == 0
         && fenced_.count(id) == 0 && !(wake && orphans_.count(id) > 0)
         && reviving_.insert(id).second;
}

void run_registry::end_revival(const std::string& id) {
  std::lock_guard guard{mtx_};
  reviving_.erase(id);
  if (cancels_pending_.erase(id) > 0)
    signal_cancel_locked(id);
}

void run_registry::orphaned(const std::string& id, bool crashed) {
  std::lock_guard guard{mtx_};
  // With the lease lost, the recovery that regains it claims every run
  // still ours: an orphan revived besides would claim it a second time,
  // and two actors of one run would each run the step under way (found by
  // the torture run: a queue item's body twice at once after a regain).
  if (!running_ || lease_lost_ || fenced_.count(id) > 0)
    return;
  if (orphans_.empty() && !orphans_busy_)
    orphans_due_ = std::chrono::steady_clock::now()
                   + std::max(orphan_backoff_, orphan_retry_);
  orphans_[id] |= crashed;
}

bool run_registry::orphans_due(std::chrono::steady_clock::time_point now) {
  std::lock_guard guard{mtx_};
  if (!running_ || orphans_.empty() || orphans_busy_ || now < orphans_due_)
    return false;
  orphans_busy_ = true;
  return true;
}

std::unordered_map<std::string, bool> run_registry::take_orphans() {
  std::unordered_map<std::string, bool> ids;
  std::lock_guard guard{mtx_};
  ids.swap(orphans_);
  return ids;
}

void run_registry::orphans_done() {
  std::lock_guard guard{mtx_};
  orphans_busy_ = false;
  // The store still failing: try less often, up to 8 x orphan_retry.
  orphan_backoff_ = orphans_.empty()
                      ? std::chrono::milliseconds{0}
                      : std::min(std::max(orphan_backoff_ * 2, orphan_retry_),
                                 orphan_retry_ * 8);
  orphans_due_ = std::chrono::steady_clock::now()
                 + std::max(orphan_backoff_, orphan_retry_);
}

std::size_t run_registry::held_count() const {
  std::lock_guard guard{mtx_};
  return active_.size() + reviving_.size() + orphans_.size();
}

std::size_t run_registry::active_count() const {
  std::lock_guard guard{mtx_};
  return active_.size();
}

std::optional<std::vector<std::pair<std::string, std::int64_t>>>
run_registry::unheld(
  const std::vector<std::pair<std::string, std::int64_t>>& listed,
  const std::unordered_set<std::string>& ahead) const {
  std::lock_guard guard{mtx_};
  if (!running_ || lease_lost_)
    return std::nullopt;
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (auto& [id, epoch] : listed) {
    if (active_.count(id) > 0 || reviving_.count(id) > 0
        || orphans_.count(id) > 0 || ahead.count(id) > 0)
      continue;
    if (auto f = fenced_.find(id); f != fenced_.end() && epoch <= f->second)
      continue; // lost to another process, which claims it anew
    out.emplace_back(id, epoch);
  }
  return out;
}

} // namespace perdure::detail
