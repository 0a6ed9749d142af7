#include "perdure/queues/detail/runtime/queue_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/execution/step_executor.hpp"
#include "perdure/detail/execution/store_pool.hpp"
#include "perdure/detail/runs/run_launcher.hpp"
#include "perdure/detail/runs/run_registry.hpp"
#include "perdure/detail/runtime/services.hpp"
#include "perdure/queues/detail/runtime/queue_service.hpp"

namespace perdure::queues::detail {

namespace {

using std::chrono::milliseconds;

struct queue_state {
  queue_service* svc = nullptr;
  queue_entry* q = nullptr;
  /// A claim runs (on a control thread); another was asked for meanwhile.
  bool claiming = false;
  bool again = false;
  /// The actors of the items in memory here, watched: id by address, and
  /// the actor that hosts each id now.
  std::unordered_map<caf::actor_addr, std::string> watched;
  std::unordered_map<std::string, caf::actor> held;
  /// Wait before looking again while the queue's concurrency is used up by
  /// other processes: doubles up to a second, back to nothing on a claim.
  std::int64_t busy_backoff_ms = 0;
  /// When the timer in flight comes due (ms since the epoch), if any.
  std::int64_t timer_due = std::numeric_limits<std::int64_t>::max();
};

using queue_actor = caf::stateful_actor<queue_state>;

/// The `count` items of `queue` a claim stamped `stamped_ms` start later
/// than the rate limit's margin after it (a slow commit or journal load):
/// their stamps move to now, so the limit holds by actual start time.
void restamp(perdure::detail::runtime_services& rt, const std::string& queue,
             std::int64_t stamped_ms, std::int64_t count) {
  try {
    rt.stores->with([&](persistence::store& db) {
      db.restamp_queue_starts(queue, stamped_ms, count);
    });
  } catch (const std::exception& ex) {
    rt.log().warn("perdure: could not move the start times of {} items of "
                  "queue '{}' to their actual start ({}); its rate limit may "
                  "let a few more start in the next window",
                  count, queue, ex.what());
  }
}

/// Claims on a control thread and brings the items in; reports back.
void claim(queue_actor* self) {
  auto& st = self->state;
  if (st.claiming) {
    st.again = true;
    return;
  }
  st.claiming = true;
  st.again = false;
  auto& rt = st.svc->runtime();
  auto req = st.svc->claim_request(*st.q);
  if (req.capacity <= 0) { // every worker busy, enough claimed ahead
    st.claiming = false;
    return;
  }
  auto me = caf::actor_cast<caf::actor>(self);
  rt.control->post([me, &rt, svc = st.svc, q = st.q,
                    req = std::move(req)] {
    std::int64_t claimed = -1;
    persistence::queue_claim c;
    std::vector<std::string> ids;
    try {
      auto asked = std::chrono::steady_clock::now();
      c = rt.stores->with(
        [&](persistence::store& db) { return db.claim_queued(req); });
      {
        std::lock_guard guard{q->claimed_mtx};
        q->partition_cursor = c.partition_cursor;
      }
      claimed = static_cast<std::int64_t>(c.runs.size());
      for (auto& run : c.runs) {
        ids.push_back(run.id);
        rt.runs->claimed_again(run.id); // back from its queue: ours anew
      }
      // One never started has no journal to load.
      std::vector<std::string> started;
      for (std::size_t i = 0; i < c.runs.size(); ++i)
        if (i >= c.fresh.size() || !c.fresh[i])
          started.push_back(c.runs[i].id);
      std::unordered_map<std::string,
                         std::vector<persistence::journal_entry>>
        journals;
      if (!started.empty())
        for (auto& e : rt.stores->with([&](persistence::store& db) {
               return db.load_journals(started);
             }))
          journals[e.run_id].push_back(std::move(e));
      if (req.queue.rate_limit && !c.runs.empty()
          && std::chrono::steady_clock::now() - asked
               > std::chrono::milliseconds{req.rate_margin_ms})
        restamp(rt, req.queue.name, c.stamped_ms,
                static_cast<std::int64_t>(c.runs.size()));
      std::vector<claimed_item> items;
      for (auto& run : c.runs) {
        auto j = std::move(journals[run.id]);
        items.push_back({std::move(run), std::move(j)});
      }
      queue_service::stash(*q, std::move(items));
      ids.clear();
      svc->start_claimed(*q);
    } catch (const std::exception& ex) {
      rt.log().warn("perdure: claiming from queue '{}' failed ({}); trying "
                    "again in a second",
                    req.queue.name, ex.what());
      for (auto& id : ids) // claimed, then lost here: revived as orphans
        rt.runs->orphaned(id);
    }
    caf::anon_send(me, claimed_atom::value, claimed, c.concurrency_bound,
                   c.rate_wait_ms.value_or(-1), c.next_ready_ms.value_or(-1));
  });
}

/// Looks again in `ms` (unless a timer comes due sooner anyway), or in a
/// minute at the latest: an item's start time far off (a row another
/// process wrote, INT64_MAX) must not overflow the timer, and a look a
/// minute costs nothing.
void look_in(queue_actor* self, std::int64_t ms) {
  auto& st = self->state;
  ms = std::clamp<std::int64_t>(ms, 1, 60'000);
  auto due = perdure::detail::now_ms() + ms;
  if (due >= st.timer_due)
    return;
  st.timer_due = due;
  self->delayed_send(self, milliseconds{ms}, tick_atom::value);
}

caf::behavior queue_behavior(queue_actor* self, queue_service* svc,
                             queue_entry* q) {
  self->state.svc = svc;
  self->state.q = q;
  // An item's actor that failed (not one that ended or left memory): the
  // runtime revives its run, as a new actor, counting a recovery attempt.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto i = st.watched.find(dm.source);
    if (i == st.watched.end())
      return;
    auto id = std::move(i->second);
    st.watched.erase(i);
    auto h = st.held.find(id);
    if (h == st.held.end() || h->second.address() != dm.source)
      return; // a newer actor hosts it now
    st.held.erase(h);
    if (dm.reason && dm.reason != caf::exit_reason::user_shutdown)
      st.svc->runtime().log().warn(
        "perdure: the worker of queue '{}' running item {} failed; the item "
        "is revived on a new one",
        st.q->name, id);
    // Its worker is free (it failed, or its item sleeps out of memory).
    st.svc->left_memory(*st.q, id);
  });
  return {
    [self](wake_atom) { claim(self); },
    [self](tick_atom) {
      self->state.timer_due = std::numeric_limits<std::int64_t>::max();
      claim(self);
    },
    [self](held_atom, const std::string& id, const caf::actor& actor) {
      auto& st = self->state;
      if (auto i = st.held.find(id); i != st.held.end()) {
        if (i->second == actor)
          return;
        st.watched.erase(i->second.address()); // replaced by a newer copy
      }
      self->monitor(actor);
      st.watched[actor.address()] = id;
      st.held[id] = actor;
    },
    [self](released_atom, const std::string& id) {
      auto& st = self->state;
      auto h = st.held.find(id);
      if (h != st.held.end()) {
        self->demonitor(h->second);
        st.watched.erase(h->second.address());
        st.held.erase(h);
      }
      // Its worker took the next item claimed ahead (see the service);
      // look again once half of those are used up.
      if (queue_service::waiting(*st.q)
          < static_cast<std::size_t>(st.q->opts.worker_concurrency * 2))
        claim(self);
    },
    [self](claimed_atom, std::int64_t claimed, bool bound,
           std::int64_t rate_wait_ms, std::int64_t next_ready_ms) {
      auto& st = self->state;
      st.claiming = false;
      if (claimed > 0)
        st.busy_backoff_ms = 0;
      if (st.again) {
        claim(self);
      } else if (claimed < 0) {
        look_in(self, 1000);
      } else if (rate_wait_ms >= 0) {
        look_in(self, rate_wait_ms);
      } else if (bound) {
        // Others' items use the queue up: their ends are not announced.
        st.busy_backoff_ms
          = std::clamp<std::int64_t>(st.busy_backoff_ms * 2, 10, 1000);
        look_in(self, st.busy_backoff_ms);
      } else if (next_ready_ms >= 0) {
        look_in(self, next_ready_ms - perdure::detail::now_ms());
      }
      // Otherwise idle: notices wake it (and the service's probe).
    },
  };
}

} // namespace

caf::actor spawn_queue_actor(caf::actor_system& sys, queue_service& svc,
                             queue_entry& q) {
  return sys.spawn(queue_behavior, &svc, &q);
}

} // namespace perdure::queues::detail
