#include "perdure/queues/detail/runtime/queue_service.hpp"

#include <caf/send.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/persistence/detail/queue_choice.hpp"
#include "perdure/queues/detail/runtime/queue_actor.hpp"

namespace perdure::queues::detail {

namespace {

/// Queue `name`'s limits as the store takes them.
persistence::queue_definition definition(const std::string& name,
                                         const queue_options& opts) {
  persistence::queue_definition d;
  d.name = name;
  d.concurrency = opts.concurrency;
  d.partition_concurrency = opts.partition_concurrency;
  if (opts.rate) {
    d.rate_limit = opts.rate->limit;
    d.rate_period_ms = opts.rate->period.count();
  }
  return d;
}

} // namespace

queue_service::queue_service(perdure::detail::runtime_services& rt) : rt_(rt) {
}

queue_service::~queue_service() {
  stop();
}

void queue_service::add(std::string name, queue_options opts) {
  if (queues_.count(name) > 0)
    throw perdure::error(errc::invalid_argument,
                         "queue '" + name + "' is registered already");
  auto q = std::make_unique<queue_entry>();
  q->name = name;
  q->opts = std::move(opts);
  q->shared = persistence::detail::shares_limits(definition(name, q->opts));
  // Made once here and replaced only when the runtime stopped (`join`):
  // items recovered while the runtime starts already run their steps on it.
  q->pool = std::make_unique<perdure::detail::step_executor>(
    static_cast<std::size_t>(q->opts.worker_concurrency), &rt_);
  queues_.emplace(std::move(name), std::move(q));
}

persistence::queue_claim_request
queue_service::claim_request(queue_entry& q) const {
  persistence::queue_claim_request req;
  req.queue = definition(q.name, q.opts);
  req.executor = rt_.cfg.executor_id;
  for (auto& [name, entry] : rt_.workflows)
    req.filter.names.push_back(name);
  req.filter.app_version = rt_.cfg.app_version;
  req.now_ms = perdure::detail::now_ms();
  // Its idle workers, and, while nothing shared limits the queue, items
  // claimed ahead: a worker going idle starts its next item without a
  // round trip. About 100 ms worth at the rate its items end here, at
  // least as many as it has workers, at most 15 times that (many short
  // items need large claims: 5-9 K items/s with 10 workers claiming 30-70
  // ahead, 13-14 K claiming 150; few long ones need none).
  std::lock_guard guard{q.claimed_mtx};
  req.partition_after = q.partition_cursor;
  auto workers = q.opts.worker_concurrency;
  std::int64_t total = workers;
  if (!q.shared) {
    auto since = req.now_ms - q.rate_since_ms;
    if (since >= 50) {
      auto rate = static_cast<double>(q.ended - q.ended_since) * 1000.0
                  / static_cast<double>(since);
      q.ends_per_s = q.rate_since_ms == 0 ? rate
                                          : 0.5 * q.ends_per_s + 0.5 * rate;
      q.rate_since_ms = req.now_ms;
      q.ended_since = q.ended;
    }
    auto ahead = static_cast<std::int64_t>(q.ends_per_s / 10);
    total += std::clamp<std::int64_t>(ahead, workers, 15LL * workers);
  }
  req.capacity = static_cast<std::int32_t>(
    total - static_cast<std::int64_t>(q.in_memory.size() + q.claimed.size()));
  return req;
}

void queue_service::stash(queue_entry& q, std::vector<claimed_item> items) {
  std::lock_guard guard{q.claimed_mtx};
  for (auto& i : items)
    q.claimed.push_back(std::move(i));
}

void queue_service::start_claimed(queue_entry& q) {
  for (;;) {
    std::optional<claimed_item> item;
    {
      std::lock_guard guard{q.claimed_mtx};
      if (q.claimed.empty()
          || static_cast<std::int32_t>(q.in_memory.size())
               >= q.opts.worker_concurrency)
        return;
      item = std::move(q.claimed.front());
      q.claimed.pop_front();
      q.in_memory.insert(item->run.id); // its worker, taken now
    }
    auto id = item->run.id;
    if (rt_.cfg.metrics) {
      auto due = std::max(item->run.created_at_ms,
                          item->run.not_before_ms.value_or(0));
      rt_.metrics.queue_started(
        q.name,
        static_cast<double>(perdure::detail::now_ms() - due) / 1000.0);
    }
    // Spawned outside the lock: spawning calls `holding`.
    if (!rt_.launcher->spawn_run(std::move(item->run), std::move(item->journal))) {
      {
        std::lock_guard guard{q.claimed_mtx};
        q.in_memory.erase(id);
      }
      rt_.runs->orphaned(id); // PENDING here: revived (nothing if stopping)
    }
  }
}

void queue_service::left_memory(queue_entry& q, const std::string& id) {
  {
    std::lock_guard guard{q.claimed_mtx};
    q.in_memory.erase(id);
  }
  start_claimed(q);
}

std::size_t queue_service::waiting(queue_entry& q) {
  std::lock_guard guard{q.claimed_mtx};
  return q.claimed.size();
}

void queue_service::start() {
  std::vector<persistence::queue_definition> defs;
  auto poll = std::chrono::milliseconds::max();
  {
    std::lock_guard guard{mtx_};
    running_ = true;
    // Items recovered before this are in `items_` and `in_memory` already.
    for (auto& [name, q] : queues_) {
      q->actor = spawn_queue_actor(*rt_.system, *this, *q);
      defs.push_back(definition(name, q->opts));
      poll = std::min(poll, q->opts.poll_interval);
    }
    // Recovered and taken-over items are watched like claimed ones: one
    // that sleeps out of memory (or fails) frees its worker.
    for (auto& [id, actor] : unwatched_)
      if (auto i = items_.find(id); i != items_.end())
        caf::anon_send(queues_.at(i->second)->actor, held_atom::value, id,
                       actor);
    unwatched_.clear();
  }
  try {
    rt_.stores->with([&](persistence::store& db) {
      for (auto& d : defs)
        db.define_queue(d);
      return 0;
    });
  } catch (const std::exception& ex) {
    rt_.log().warn("perdure: could not store the queues' limits ({}); they "
                   "are enforced all the same",
                   ex.what());
  }
  for (auto& [name, q] : queues_)
    caf::anon_send(q->actor, wake_atom::value);
  if (!queues_.empty())
    prober_ = std::make_unique<perdure::detail::ticker>(poll,
                                                        [this] { probe(); });
}

void queue_service::stop() {
  prober_.reset();
  std::lock_guard guard{mtx_};
  if (!running_)
    return;
  running_ = false;
  for (auto& [name, q] : queues_)
    if (q->actor)
      caf::anon_send_exit(q->actor, caf::exit_reason::user_shutdown);
  // The pools stay until the service goes: items' steps may still run
  // while the runtime stops its actors; the runtime is gone by then.
}

void queue_service::join() {
  for (auto& [name, q] : queues_) {
    q->pool->stop(); // idle by now: every item's actor is gone
    q->pool = std::make_unique<perdure::detail::step_executor>(
      static_cast<std::size_t>(q->opts.worker_concurrency), &rt_);
    q->actor = caf::actor{};
    std::lock_guard guard{q->claimed_mtx};
    q->claimed.clear();
    q->in_memory.clear();
  }
  std::lock_guard guard{mtx_};
  items_.clear();
  unwatched_.clear();
}

void queue_service::lease_lost() {
  // Every run here was dropped; what was claimed ahead is PENDING under
  // this executor, for whoever takes it over (this process once it holds
  // the lease again).
  for (auto& [name, q] : queues_) {
    std::lock_guard guard{q->claimed_mtx};
    q->claimed.clear();
    q->in_memory.clear();
  }
  std::lock_guard guard{mtx_};
  items_.clear();
  unwatched_.clear();
}

void queue_service::probe() {
  std::vector<std::string> names;
  for (auto& [name, q] : queues_)
    names.push_back(name);
  try {
    auto heads = rt_.stores->with(
      [&](persistence::store& db) { return db.queued_heads(names); });
    auto now = perdure::detail::now_ms();
    std::lock_guard guard{mtx_};
    if (!running_)
      return;
    for (auto& [name, first_ready] : heads)
      if (first_ready <= now)
        caf::anon_send(queues_.at(name)->actor, wake_atom::value);
  } catch (const std::exception& ex) {
    rt_.log().warn("perdure: looking for queued items failed ({})", ex.what());
  }
}

void queue_service::notice(const std::string& queue) {
  auto i = queues_.find(queue);
  std::lock_guard guard{mtx_};
  if (running_ && i != queues_.end())
    caf::anon_send(i->second->actor, wake_atom::value);
}

perdure::detail::step_executor*
queue_service::steps_for(const std::string& queue) {
  auto i = queues_.find(queue);
  return i == queues_.end() ? nullptr : i->second->pool.get();
}

std::optional<std::int64_t> queue_service::retry_at(const std::string& queue,
                                                    std::int32_t attempts,
                                                    bool terminal) {
  auto i = queues_.find(queue);
  item_retry_policy policy;
  if (i != queues_.end()) {
    policy = i->second->opts.retry;
  } else { // not registered here
    policy.max_attempts = perdure::detail::default_item_retry::max_attempts;
    policy.backoff = std::chrono::milliseconds{
      perdure::detail::default_item_retry::backoff_ms};
  }
  if (terminal || attempts >= policy.max_attempts)
    return std::nullopt;
  auto wait = static_cast<double>(policy.backoff.count())
              * std::pow(policy.factor, std::max(0, attempts - 1));
  wait = std::min(wait, static_cast<double>(policy.max_backoff.count()));
  return perdure::detail::now_ms() + static_cast<std::int64_t>(wait);
}

void queue_service::holding(const std::string& queue, const std::string& id,
                            const caf::actor& actor) {
  auto i = queues_.find(queue);
  if (i == queues_.end())
    return; // another process's queue: its item runs here on our threads
  {
    std::lock_guard guard{i->second->claimed_mtx};
    i->second->in_memory.insert(id);
  }
  std::lock_guard guard{mtx_};
  items_[id] = queue; // also while recovering, before `start`
  if (running_) // its queue actor watches it
    caf::anon_send(i->second->actor, held_atom::value, id, actor);
  else
    unwatched_[id] = actor; // watched from `start` on
}

void queue_service::finishing(const std::string& id) {
  queue_entry* q = nullptr;
  {
    std::lock_guard guard{mtx_};
    auto i = items_.find(id);
    if (i == items_.end())
      return;
    q = queues_.at(i->second).get();
  }
  if (q->shared) // its claims count PENDING items: wait for the commit
    return;
  {
    std::lock_guard guard{q->claimed_mtx};
    q->in_memory.erase(id);
    ++q->ended;
  }
  start_claimed(*q);
}

void queue_service::claimed_ahead(std::unordered_set<std::string>& ids) {
  for (auto& [name, q] : queues_) {
    std::lock_guard guard{q->claimed_mtx};
    for (auto& c : q->claimed)
      ids.insert(c.run.id);
  }
}

void queue_service::released(const std::string& id) {
  queue_entry* q = nullptr;
  {
    std::lock_guard guard{mtx_};
    auto i = items_.find(id);
    if (i == items_.end()) {
      // Not in memory: it may wait claimed ahead (and was cancelled).
      for (auto& [name, entry] : queues_) {
        std::lock_guard q_guard{entry->claimed_mtx};
        std::erase_if(entry->claimed, [&](const claimed_item& c) {
          return c.run.id == id;
        });
      }
      return;
    }
    q = queues_.at(i->second).get();
    items_.erase(i);
    unwatched_.erase(id);
  }
  {
    // Free before its queue actor hears: the claim it makes then counts
    // this worker idle (else it claimed nothing until the next poll).
    std::lock_guard guard{q->claimed_mtx};
    q->in_memory.erase(id);
  }
  {
    std::lock_guard guard{mtx_};
    if (running_)
      caf::anon_send(q->actor, released_atom::value, id);
  }
  start_claimed(*q); // its worker takes the next item at once
}

} // namespace perdure::queues::detail
