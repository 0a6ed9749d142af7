#include "perdure/detail/object/object_actor.hpp"

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

namespace {

/// An invocation's mailbox: its object actor's, tagged with the
/// invocation's number.
class tagged_mailbox final : public execution_mailbox {
public:
  tagged_mailbox(caf::actor object, std::uint32_t exec)
    : object_(std::move(object)), exec_(exec) {
  }

  void tell(run_message m) const override {
    caf::anon_send(object_,
                   object_message{tagged_run_message{exec_, std::move(m)}});
  }

  void tell_later(std::chrono::milliseconds delay,
                  run_message m) const override {
    caf::delayed_anon_send(
      object_, delay, object_message{tagged_run_message{exec_, std::move(m)}});
  }

private:
  caf::actor object_;
  std::uint32_t exec_;
};

struct object_host;
using object_actor = caf::stateful_actor<object_host>;

/// A handler that cannot run (unknown, or the state cannot be read): its
/// invocation ends ERROR with `why`, changing nothing.
std::unique_ptr<run_driver> failing_driver(persistence::encoding enc,
                                           std::string why) {
  auto d = std::make_unique<typed_driver<void>>(enc);
  d->failed_ = std::make_exception_ptr(std::runtime_error(std::move(why)));
  return d;
}

/// One invocation of the key, hosting its execution.
struct invocation final : execution_host {
  object_host* obj = nullptr;
  std::uint32_t tag = 0;
  bool shared = false;
  bool left = false;
  /// Its end is written (see `final_write`): it only waits for the commit.
  std::atomic<bool> submitted{false};
  execution exec;

  void quit() override {
    left = true; // the host drops it after this turn (it is inside it now)
  }

  std::unique_ptr<run_driver> start_code(run_core& core,
                                         const std::string& name,
                                         std::string& inputs,
                                         persistence::encoding enc) override;

  void settle_end(persistence::completion_write& c) override;
  persistence::write final_write(persistence::completion_write c) override;
  /// The state this invocation leaves, encoded by `settle_end`.
  std::optional<std::string> end_state;

  bool may_passivate() const override {
    return false; // it holds the key while it waits
  }

  std::string held_key() const override;
};

/// The object actor's state.
struct object_host {
  object_actor* self = nullptr;
  runtime_services* rt = nullptr;
  const object_entry* entry = nullptr;
  std::string type;
  std::string key;
  persistence::fence owner;
  std::unique_ptr<state_box> state;
  /// The state after the last invocation whose end was written (encoded),
  /// to roll a failed one back to; and the version that state will have.
  std::string written;
  std::int64_t next_base = 0;
  /// Whether invocations may run while earlier ones commit: only if the
  /// writer commits in submission order (one connection).
  bool pipelined = false;
  /// An end did not commit: what the key holds is unsure here. No new
  /// invocation starts; the actor leaves once the ones committing ended.
  bool doomed = false;
  /// Set if the stored state could not be decoded: no handler runs on it.
  std::optional<std::string> unreadable;
  std::deque<persistence::run_record> queue;
  std::unordered_map<std::string, std::vector<persistence::journal_entry>>
    journals;
  /// The invocation running, and those whose ends commit meanwhile.
  std::unique_ptr<invocation> current;
  std::unordered_map<std::uint32_t, std::unique_ptr<invocation>> committing;
  /// Shared invocations running (on committed state, together).
  std::unordered_map<std::uint32_t, std::unique_ptr<invocation>> readers;
  std::uint32_t next_tag = 1;
  /// Invocations handed by this process (see `object_directory`).
  std::uint64_t received = 0;
  bool taking_inbox = false;
  bool inbox_again = false;
  /// Handed while a take of the inbox was under way: they join the queue
  /// with what it took, in inbox order (a call taken may be older).
  std::vector<persistence::run_record> handed_in_take;
  std::uint64_t idle_generation = 0;
  bool stopping = false;

  void init(object_activation a);
  void on(object_message& m);
  void run_next();
  /// Ends `run`, an invocation recovered too often, RETRIES_EXCEEDED.
  void give_up(persistence::run_record run);
  /// Starts `run` as a new invocation.
  std::unique_ptr<invocation> start(persistence::run_record run);
  /// Returns whether no step body of an invocation here runs (those with
  /// one quit when it replied): the actor may go.
  bool bodies_done();
  /// Routes `m` to the invocation it is for, if it is still here.
  void deliver(tagged_run_message& m);
  /// Invocation `inv` ended (committed or not).
  void finished(std::unique_ptr<invocation> inv);
  /// Queues claimed invocation `run`, known to the runtime from now on (a
  /// cancel reaches it; the stranded-work check sees it held).
  void hold(persistence::run_record run);
  void take_inbox();
  /// Gives the key up, nothing running: `why` its next call (or its state,
  /// at `unreadable_version`) is not for this process's code. The calls
  /// it held go back to the store for a process that can run them.
  void give_up_key(const std::string& why,
                   std::optional<std::int64_t> unreadable_version);
  /// Leaves memory; `revive`: the key's invocations may be left, so it is
  /// claimed again soon.
  void leave(bool revive);
  /// Quits the actor, telling the runtime of the invocations it leaves.
  void quit();
  /// Quits once the messages already in the mailbox are handled.
  void quit_soon();
};

std::unique_ptr<run_driver>
invocation::start_code(run_core& core, const std::string& name,
                       std::string& inputs, persistence::encoding enc) {
  auto h = obj->entry->handlers.find(name);
  if (h == obj->entry->handlers.end())
    return failing_driver(enc, "object type '" + obj->type
                                 + "' has no handler '" + name + "'");
  if (obj->unreadable)
    return failing_driver(enc, "the state of " + obj->type + " '" + obj->key
                                 + "' cannot be read: " + *obj->unreadable);
  shared = h->second.shared;
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
  pipelined = rt->writer->connections() == 1;
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
  rt->writer->submit(std::move(i), [rt = rt, id = run.id, outcome,
                                    epoch = owner.epoch](
                                     persistence::write_result r) {
    if (r.ack == persistence::write_ack::committed)
      rt->run_stopped(id, outcome, epoch);
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
  if (queue.empty() && !current && committing.empty() && readers.empty())
    caf::delayed_anon_send(caf::actor_cast<caf::actor>(self),
                           rt->cfg.object_idle_timeout,
                           object_message{idle_check{++idle_generation}});
}

std::unique_ptr<invocation> object_host::start(persistence::run_record run) {
  ++idle_generation;
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
    } else if (current->submitted && pipelined) {
      // It only waits for its commit: the next one runs meanwhile on the
      // state it left (its reply still waits for its own commit).
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
    rt->run_stopped(run.id, std::nullopt, -1);
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
    rt->run_stopped(run.id, std::nullopt, -1);
  queue.clear();
  rt->objects->stopped(type, key, caf::actor_cast<caf::actor>(self), revive);
  if (!current && committing.empty() && readers.empty())
    quit_soon();
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
    rt->run_stopped(run.id, std::nullopt, -1);
  queue.clear();
  auto forget = [&](invocation& inv) {
    rt->run_stopped(inv.exec.run_id(), std::nullopt, owner.epoch);
  };
  if (current)
    forget(*current);
  for (auto& [tag, r] : readers)
    forget(*r);
  for (auto& [tag, c] : committing)
    forget(*c);
  self->quit();
}

void object_host::on(object_message& message) {
  struct visitor {
    object_host& h;
    void operator()(tagged_run_message& m) {
      h.deliver(m);
    }
    void operator()(invocation_arrived& m) {
      ++h.received;
      if (h.stopping) {
        // Handed as the actor left: whoever holds the key next takes it.
        h.rt->run_stopped(m.run.id, std::nullopt, -1);
        h.rt->control->post([rt = h.rt, type = h.type, key = h.key] {
          rt->objects->reach(type, key, true);
        });
        return;
      }
      if (h.taking_inbox) {
        h.handed_in_take.push_back(std::move(m.run));
        return;
      }
      h.queue.push_back(std::move(m.run));
      h.run_next();
    }
    void operator()(inbox_news& m) {
      if (h.stopping)
        return; // it left the directory: the key's next holder takes them
      if (m.reclaim) {
        h.doomed = true; // claimed again, with whatever it missed
        if (!h.current && h.committing.empty() && h.readers.empty())
          h.leave(true);
        return;
      }
      if (m.handed)
        ++h.received; // counted as handed (see object_directory::reach)
      h.take_inbox();
    }
    void operator()(inbox_taken& m) {
      h.taking_inbox = false;
      auto handed = std::exchange(h.handed_in_take, {});
      if (!m.runs) { // the key went to another process
        for (auto& run : handed)
          h.queue.push_back(std::move(run));
        h.leave(false);
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
          h.hold(std::move(run));
        else // known to the runtime already (see object_directory)
          h.queue.push_back(std::move(run));
      }
      if (std::exchange(h.inbox_again, false))
        h.take_inbox();
      h.run_next();
    }
    void operator()(queued_cancel& m) {
      auto is_it = [&](auto& run) { return run.id == m.run_id; };
      auto held = std::find_if(h.handed_in_take.begin(),
                               h.handed_in_take.end(), is_it);
      bool was_held = held != h.handed_in_take.end();
      if (was_held) // never runs either
        h.handed_in_take.erase(held);
      auto q = std::find_if(h.queue.begin(), h.queue.end(), is_it);
      if (q != h.queue.end() || was_held) {
        // Never runs: the store says CANCELLED.
        if (q != h.queue.end())
          h.queue.erase(q);
        h.rt->run_stopped(m.run_id,
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
        h.deliver(t);
        return true;
      };
      if (h.current && started(*h.current))
        return;
      for (auto& [tag, r] : h.readers)
        if (started(*r))
          return;
    }
    void operator()(quit_request&) {
      h.quit();
    }
    void operator()(unreadable_state& m) {
      h.give_up_key("its state cannot be read", m.version);
    }
    void operator()(idle_check& m) {
      if (m.generation != h.idle_generation || h.current || !h.queue.empty()
          || !h.committing.empty() || !h.readers.empty() || h.taking_inbox
          || h.stopping)
        return;
      if (h.rt->objects->try_passivate(h.type, h.key,
                                       caf::actor_cast<caf::actor>(h.self),
                                       h.received))
        h.quit();
    }
  };
  std::visit(visitor{*this}, message);
}

caf::behavior object_behavior(object_actor* self, runtime_services* rt,
                              object_activation a) {
  auto& host = self->state;
  host.self = self;
  host.rt = rt;
  self->set_exception_handler([self, rt](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      rt->log().error("perdure: object {} '{}' actor failed: {}",
                      self->state.type, self->state.key, ex.what());
    } catch (...) {
    }
    if (self->state.current)
      self->state.current->exec.on_host_failure();
    for (auto& [tag, r] : self->state.readers)
      r->exec.on_host_failure();
    self->state.rt->objects->stopped(self->state.type, self->state.key,
                                     caf::actor_cast<caf::actor>(self), true);
    for (auto& run : self->state.queue)
      rt->run_stopped(run.id, std::nullopt, -1);
    for (auto& run : self->state.handed_in_take)
      rt->run_stopped(run.id, std::nullopt, -1);
    for (auto& [tag, c] : self->state.committing)
      rt->run_stopped(c->exec.run_id(), std::nullopt, self->state.owner.epoch);
    return caf::sec::runtime_error;
  });
  // runtime::stop(): the invocation running stays until its step body
  // replied (the body may touch its frame); queued ones stay in the store.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& h = self->state;
    h.stopping = true;
    // Ends being committed are waited for (the writer outlives the actors);
    // the rest go once no step body of theirs runs.
    (void)msg;
    if (h.committing.empty() && h.bodies_done())
      h.quit();
  });
  host.init(std::move(a));
  return {
    [self](object_message& m) { self->state.on(m); },
  };
}

} // namespace

caf::actor spawn_object_actor(caf::actor_system& sys, runtime_services& rt,
                              object_activation a) {
  return sys.spawn(object_behavior, &rt, std::move(a));
}

void hand_invocation(const caf::actor& object, persistence::run_record run) {
  caf::anon_send(object, object_message{invocation_arrived{std::move(run)}});
}

void cancel_queued(const caf::actor& object, std::string run_id) {
  caf::anon_send(object, object_message{queued_cancel{std::move(run_id)}});
}

void tell_reclaim(const caf::actor& object) {
  caf::anon_send(object, object_message{inbox_news{false, true}});
}

void tell_inbox_news(const caf::actor& object) {
  caf::anon_send(object, object_message{inbox_news{}});
}

} // namespace perdure::detail
