// What an object actor does with its messages: starting invocations one
// at a time, delivering to them, committing their ends with the key's
// state, and leaving memory.

#include "perdure/detail/object/object_host.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perdure/detail/metrics/runtime_metrics.hpp"
#include "perdure/detail/runtime/caf_messages.hpp"
#include "perdure/detail/timer/clock.hpp"
#include "perdure/detail/execution/execution.hpp"
#include "perdure/detail/object/object_directory.hpp"
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

std::unique_ptr<run_driver> failing_driver(persistence::encoding enc,
                                           std::string why) {
  auto d = std::make_unique<typed_driver<void>>(enc);
  d->failed_ = std::make_exception_ptr(std::runtime_error(std::move(why)));
  return d;
}

std::unique_ptr<run_driver>
invocation::start_code(run_core& core, const std::string& name,
                       std::string& inputs, persistence::encoding enc,
                       const std::vector<std::string>*& patches) {
  auto h = obj->entry->handlers.find(name);
  if (h == obj->entry->handlers.end())
    return failing_driver(enc, "object type '" + obj->type
                                 + "' has no handler '" + name + "'");
  if (obj->unreadable)
    return failing_driver(enc, "the state of " + obj->type + " '" + obj->key
                                 + "' cannot be read: " + *obj->unreadable);
  shared = h->second.shared;
  patches = &h->second.patches;
  return h->second.start(core, obj->state->get(), obj->key, std::move(inputs),
                         enc);
}

std::string invocation::held_key() const {
  return obj->type + '\x1f' + obj->key;
}

void invocation::settle_end(persistence::completion_write& c) {
  if (c.status != run_status::success || shared)
    return;
  try {
    auto state = obj->state->encode(obj->rt->cfg.payload_encoding);
    auto limit = obj->rt->cfg.max_payload_bytes;
    if (state.size() <= limit) {
      end_state = std::move(state);
      return;
    }
    // Refused like an oversized input: the call fails, the state stays as
    // it was (never a write that fails for ever).
    c.error = "the state of " + obj->type + " '" + obj->key + "' would be "
              + std::to_string(state.size())
              + " bytes after this call, over the limit of "
              + std::to_string(limit)
              + " (config::max_payload_bytes): the call was refused and the "
                "state left as it was; keep large data elsewhere";
  } catch (const std::exception& ex) {
    c.error = std::string{"the state could not be encoded: "} + ex.what();
  }
  c.status = run_status::error;
  c.output.reset();
}

persistence::write invocation::final_write(persistence::completion_write c) {
  persistence::invocation_commit i;
  i.object_type = obj->type;
  i.object_key = obj->key;
  i.checks_base = !shared;
  i.base_version = obj->next_base; // what it ran on
  if (end_state) {
    i.state = std::move(end_state);
    end_state.reset();
    ++obj->next_base;
    obj->written = *i.state;
  }
  if (!i.state && !shared && !obj->unreadable) {
    try {
      obj->state->decode(obj->written); // a failure changes nothing
    } catch (const std::exception& ex) {
      obj->unreadable = ex.what(); // what it encoded, it cannot decode
    }
  }
  i.completion = std::move(c);
  submitted = true;
  return i;
}

void object_host::init(object_activation a) {
  entry = a.entry;
  type = std::move(a.claimed.object.type);
  key = std::move(a.claimed.object.key);
  owner = a.claimed.object.owner;
  written = std::move(a.claimed.object.state);
  next_base = a.claimed.object.version;
  state = entry->make_state();
  try {
    state->decode(written);
  } catch (const std::exception& ex) {
    // Written by other code (a rolling deploy that changed its shape): no
    // call fails for it; they wait for a process whose code reads it.
    rt->log().error("perdure: the state of {} '{}' (version {}) cannot be "
                    "read by this process's code ({}); its calls wait for a "
                    "process whose code can read it: deploy code that reads "
                    "this state",
                    type, key, a.claimed.object.version, ex.what());
    stopping = true; // nothing starts; the inbox goes back to the store
    caf::anon_send(caf::actor_cast<caf::actor>(self),
                   object_message{unreadable_state{a.claimed.object.version}});
    return;
  }
  for (auto& e : a.journals)
    journals[e.run_id].push_back(std::move(e));
  for (auto& run : a.claimed.inbox) {
    if (run.recovery_attempts > rt->cfg.max_recovery_attempts)
      give_up(std::move(run));
    else
      hold(std::move(run));
  }
  run_next();
}

void object_host::give_up(persistence::run_record run) {
  // It took its process (or actor) down at every start: it ends, changing
  // nothing, and the key goes on with the next one.
  persistence::invocation_commit i;
  i.object_type = type;
  i.object_key = key;
  i.completion.run_id = run.id;
  i.completion.owner = owner;
  i.completion.status = run_status::retries_exceeded;
  i.completion.error = "recovered " + std::to_string(run.recovery_attempts)
                       + " times, more than the limit of "
                       + std::to_string(rt->cfg.max_recovery_attempts);
  i.completion.at_ms = detail::now_ms();
  run_outcome outcome{i.completion.status, std::nullopt, i.completion.error};
  rt->log().error("perdure: call {} of {} '{}' {}", run.id, type, key,
                  *i.completion.error);
  rt->writer->submit(std::move(i), [rt = rt, run = std::move(run), outcome,
                                    epoch = owner.epoch](
                                     persistence::write_result r) {
    if (r.ack != persistence::write_ack::committed)
      return;
    if (rt->cfg.metrics)
      rt->metrics.ended_without_execution(run, outcome.status,
                                          detail::now_ms());
    rt->run_stopped(run.id, outcome, epoch);
  });
}

void object_host::run_next() {
  if (stopping || doomed)
    return;
  // In order: an exclusive one alone, shared ones together, and only on
  // committed state (none running or committing before them).
  while (!queue.empty()) {
    auto& next = queue.front();
    auto h = entry->handlers.find(next.name);
    if (h == entry->handlers.end()
        || (!next.app_version.empty()
            && next.app_version != rt->cfg.app_version)) {
      // Calls of a key run in order: this one, and those after it, go to a
      // process that can run it (a rolling deploy), never end ERROR here.
      if (!current && committing.empty() && readers.empty())
        give_up_key("its next call (" + next.id + ", handler '" + next.name
                      + "', version '" + next.app_version
                      + "') is not one this process runs",
                    std::nullopt);
      return;
    }
    auto shared = h->second.shared;
    if (current || (shared ? !committing.empty() : !readers.empty()))
      break;
    auto inv = start(std::move(queue.front()));
    queue.pop_front();
    if (!shared) {
      current = std::move(inv);
      break;
    }
    auto tag = inv->tag;
    readers.emplace(tag, std::move(inv));
  }
  if (queue.empty() && !current && committing.empty() && readers.empty()) {
    idle_since = std::chrono::steady_clock::now();
    arm_idle_timer(rt->cfg.object_idle_timeout);
  }
}

void object_host::arm_idle_timer(std::chrono::steady_clock::duration after) {
  if (idle_timer_armed)
    return;
  idle_timer_armed = true;
  caf::delayed_anon_send(caf::actor_cast<caf::actor>(self), after,
                         object_message{idle_check{}});
}

std::unique_ptr<invocation> object_host::start(persistence::run_record run) {
  std::vector<persistence::journal_entry> journal;
  if (auto j = journals.find(run.id); j != journals.end()) {
    journal = std::move(j->second);
    journals.erase(j);
  }
  auto inv = std::make_unique<invocation>();
  inv->obj = this;
  inv->tag = next_tag++;
  rt->runs->invocation_started(run.id, caf::actor_cast<caf::actor>(self), inv->tag,
                         owner.epoch);
  inv->exec.init(*inv,
                 std::make_shared<tagged_mailbox>(
                   caf::actor_cast<caf::actor>(self), inv->tag),
                 *rt, std::move(run), std::move(journal));
  return inv;
}

bool object_host::bodies_done() {
  // Asked of each: one whose step body runs quits when it replies.
  bool done = !current || current->exec.on_exit_request();
  for (auto& [tag, r] : readers)
    done = r->exec.on_exit_request() && done;
  return done;
}

void object_host::deliver(tagged_run_message& m) {
  if (current && current->tag == m.exec) {
    current->exec.receive(m.message);
    if (current->left) {
      finished(std::move(current));
    } else if (current->submitted) {
      // It only waits for its commit: the next one runs meanwhile on the
      // state it left (its reply still waits for its own commit). The
      // writer commits a key's ends in the order they were submitted.
      auto tag = current->tag;
      committing.emplace(tag, std::move(current));
      run_next();
    }
    return;
  }
  for (auto* others : {&committing, &readers}) {
    auto i = others->find(m.exec);
    if (i == others->end())
      continue;
    i->second->exec.receive(m.message);
    if (i->second->left) {
      auto inv = std::move(i->second);
      others->erase(i);
      finished(std::move(inv));
    }
    return;
  }
  // An invocation that ended: dropped.
}

void object_host::finished(std::unique_ptr<invocation> inv) {
  if (!inv->exec.ended()) {
    // Fenced, dropped, or its end could not be written: what the key holds
    // is unsure here (later ends built on it are refused by their base
    // version). Leave once nothing runs; the key is claimed again.
    doomed = true;
  }
  if (stopping && !doomed) {
    // Ends being committed are waited for: their callers hear of them.
    if (committing.empty() && bodies_done())
      quit();
    return;
  }
  if (current || !committing.empty() || !readers.empty()) {
    if (!doomed)
      run_next(); // a reader's end may let an exclusive one start
    return;
  }
  if (doomed) {
    leave(true);
    return;
  }
  run_next();
}

void object_host::hold(persistence::run_record run) {
  rt->runs->invocation_started(run.id, caf::actor_cast<caf::actor>(self),
                         run_registry::queued_exec, owner.epoch);
  queue.push_back(std::move(run));
}

void object_host::take_inbox() {
  if (taking_inbox) {
    inbox_again = true;
    return;
  }
  taking_inbox = true;
  rt->control->post([me = caf::actor_cast<caf::actor>(self), rt = rt,
                     type = type, key = key, owner = owner] {
    inbox_taken taken;
    try {
      taken.runs = rt->stores->with([&](persistence::store& db) {
        return db.take_inbox(type, key, owner);
      });
    } catch (const std::exception& ex) {
      rt->log().warn("perdure: could not read the inbox of {} '{}' ({}); "
                     "trying again",
                     type, key, ex.what());
      caf::delayed_anon_send(me, std::chrono::milliseconds{200},
                             object_message{inbox_news{false}});
      taken.runs.emplace();
    }
    caf::anon_send(me, object_message{std::move(taken)});
  });
}

void object_host::give_up_key(const std::string& why,
                              std::optional<std::int64_t> unreadable_version) {
  rt->log().info("perdure: {} '{}' is left for another process: {}", type, key,
                 why);
  stopping = true;
  for (auto& run : queue) // its callers read the store
    forget(run.id);
  queue.clear();
  rt->objects->give_up(type, key, caf::actor_cast<caf::actor>(self),
                       unreadable_version);
  rt->control->post([rt = rt, type = type, key = key, owner = owner] {
    try {
      rt->stores->with([&](persistence::store& db) {
        db.release_object(type, key, owner);
      });
    } catch (const std::exception& ex) {
      rt->log().warn("perdure: could not give up {} '{}' ({}); trying again "
                     "soon",
                     type, key, ex.what());
      rt->objects->retry_give_up(type, key);
    }
  });
  quit_soon();
}

void object_host::leave(bool revive) {
  stopping = true;
  for (auto& run : queue) // not run here: their callers read the store
    forget(run.id);
  queue.clear();
  rt->objects->stopped(type, key, caf::actor_cast<caf::actor>(self), revive);
  if (!current && committing.empty() && readers.empty())
    quit_soon();
}

void object_host::forget(const std::string& run_id) {
  // At this actor's epoch, not any: a newer actor of the key (claimed
  // again) may run this invocation already, and stays known as its runner.
  rt->run_stopped(run_id, std::nullopt, owner.epoch);
}

void object_host::quit_soon() {
  // Calls handed before the directory forgot this actor are in the mailbox
  // ahead of this: they reach the `stopping` branch (back to the store)
  // instead of going down with the actor.
  caf::anon_send(caf::actor_cast<caf::actor>(self),
                 object_message{quit_request{}});
}

void object_host::quit() {
  // Whatever is still here is not run or ended by this actor: the runtime
  // forgets it, and its callers read the store.
  for (auto& run : handed_in_take)
    queue.push_back(std::move(run));
  handed_in_take.clear();
  for (auto& run : queue)
    forget(run.id);
  queue.clear();
  if (current)
    forget(current->exec.run_id());
  for (auto& [tag, r] : readers)
    forget(r->exec.run_id());
  for (auto& [tag, c] : committing)
    forget(c->exec.run_id());
  self->quit();
}

/// An invocation handed to this key: queued, or (leaving) passed on.
void object_host::on_arrived(invocation_arrived& m) {
  ++received;
  if (stopping) {
    // Handed as the actor left: whoever holds the key next takes it.
    forget(m.run.id);
    rt->control->post([svc = rt, t = type, k = key] {
      svc->objects->reach(t, k, true);
    });
    return;
  }
  if (taking_inbox) {
    handed_in_take.push_back(std::move(m.run));
    return;
  }
  queue.push_back(std::move(m.run));
  run_next();
}

/// Calls were stored for the key (or it is to be claimed again).
void object_host::on_inbox_news(inbox_news& m) {
  if (stopping)
    return; // it left the directory: the key's next holder takes them
  if (m.reclaim) {
    doomed = true; // claimed again, with whatever it missed
    if (!current && committing.empty() && readers.empty())
      leave(true);
    return;
  }
  if (m.handed)
    ++received; // counted as handed (see object_directory::reach)
  take_inbox();
}

/// The inbox taken from the store: held in the order stored.
void object_host::on_inbox_taken(inbox_taken& m) {
  taking_inbox = false;
  auto handed = std::exchange(handed_in_take, {});
  if (!m.runs) { // the key went to another process
    for (auto& run : handed)
      queue.push_back(std::move(run));
    leave(false);
    return;
  }
  // In the order they were stored (a place not known goes last).
  std::vector<std::pair<persistence::run_record, bool>> arrived;
  for (auto& run : *m.runs)
    arrived.emplace_back(std::move(run), true);
  for (auto& run : handed)
    arrived.emplace_back(std::move(run), false);
  auto place = [](const persistence::run_record& r) {
    return r.inbox_seq > 0 ? r.inbox_seq
                           : std::numeric_limits<std::int64_t>::max();
  };
  std::stable_sort(arrived.begin(), arrived.end(),
                   [&](const auto& a, const auto& b) {
                     return place(a.first) < place(b.first);
                   });
  for (auto& [run, taken] : arrived) {
    if (taken)
      hold(std::move(run));
    else // known to the runtime already (see object_directory)
      queue.push_back(std::move(run));
  }
  if (std::exchange(inbox_again, false))
    take_inbox();
  run_next();
}

/// A queued (or just started) invocation was cancelled.
void object_host::on_queued_cancel(queued_cancel& m) {
  auto is_it = [&](auto& run) { return run.id == m.run_id; };
  auto held = std::find_if(handed_in_take.begin(),
                           handed_in_take.end(), is_it);
  bool was_held = held != handed_in_take.end();
  if (was_held) // never runs either
    handed_in_take.erase(held);
  auto q = std::find_if(queue.begin(), queue.end(), is_it);
  if (q != queue.end() || was_held) {
    // Never runs: the store says CANCELLED.
    if (q != queue.end())
      queue.erase(q);
    rt->run_stopped(m.run_id,
                      run_outcome{run_status::cancelled, std::nullopt,
                                  std::string{"cancelled"}},
                      -1);
    return;
  }
  // Started meanwhile: its execution observes the cancel.
  auto started = [&](invocation& inv) {
    if (inv.exec.run_id() != m.run_id)
      return false;
    tagged_run_message t{inv.tag, signalled{run_signal::cancel, 0}};
    deliver(t);
    return true;
  };
  if (current && started(*current))
    return;
  for (auto& [tag, r] : readers)
    if (started(*r))
      return;
}

/// Idle for the whole timeout: passivate. Idle for less (it worked since
/// the timer was armed): look again when the timeout would be up. Busy:
/// the timer is armed again when it goes idle.
void object_host::on_idle_check(idle_check&) {
  idle_timer_armed = false;
  if (current || !queue.empty() || !committing.empty() || !readers.empty()
      || taking_inbox || stopping)
    return;
  auto idle_for = std::chrono::steady_clock::now() - idle_since;
  if (idle_for < rt->cfg.object_idle_timeout) {
    arm_idle_timer(rt->cfg.object_idle_timeout - idle_for);
    return;
  }
  if (rt->objects->try_passivate(type, key,
                                   caf::actor_cast<caf::actor>(self),
                                   received))
    quit();
}

void object_host::on(object_message& message) {
  struct visitor {
    object_host& h;
    void operator()(tagged_run_message& m) {
      h.deliver(m);
    }
    void operator()(invocation_arrived& m) {
      h.on_arrived(m);
    }
    void operator()(inbox_news& m) {
      h.on_inbox_news(m);
    }
    void operator()(inbox_taken& m) {
      h.on_inbox_taken(m);
    }
    void operator()(queued_cancel& m) {
      h.on_queued_cancel(m);
    }
    void operator()(quit_request&) {
      h.quit();
    }
    void operator()(unreadable_state& m) {
      h.give_up_key("its state cannot be read", m.version);
    }
    void operator()(idle_check& m) {
      h.on_idle_check(m);
    }
  };
  std::visit(visitor{*this}, message);
}

} // namespace perdure::detail
