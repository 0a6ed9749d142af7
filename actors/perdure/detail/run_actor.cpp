#include "perdure/detail/run_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/behavior.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <spdlog/spdlog.h>

#include <limits>
#include <random>

#include "perdure/detail/clock.hpp"
#include "perdure/detail/run_core.hpp"
#include "perdure/detail/runtime_impl.hpp"
#include "perdure/persistence/text.hpp"
#include "perdure/workflow_context.hpp"

namespace perdure::detail {

namespace {

/// Every message to a run actor has one shape, `(run_atom, kind, seq, a, b,
/// c, payload, error)`, the fields' meaning by kind: a behavior is built per
/// actor, and each handler costs memory in every sleeping run. Kinds are a
/// `reply` (from off the actor) or, offset by `signal_base`, a `run_signal`.
using run_atom = caf::atom_constant<caf::atom("run")>;

constexpr std::int32_t signal_base = 100;

enum class reply : std::int32_t {
  /// A step's attempt ended: a = outcome, b = already checkpointed.
  outcome,
  /// A checkpoint's commit: a = outcome, b = write_ack.
  durable,
  /// A wait's check: a = outcome, b = winning index (or not_found), c =
  /// message cursor.
  found,
  /// A passivation write: a = succeeded, c = wake-up time, payload = the
  /// wake count seen before.
  passive,
  /// The wake-up time was cleared (`stay_awake`).
  awake,
};

/// Returns whether `code` means the store went away (past its retry budget)
/// rather than refused: the run restarts from the store once it answers
/// instead of spending an attempt of its retry policy.
bool outage(errc code) {
  return code == errc::store_unavailable || code == errc::store_full;
}

constexpr std::int32_t not_found = std::numeric_limits<std::int32_t>::min();

void send_reply(const caf::actor& me, reply kind, std::int32_t seq,
                std::int32_t a, std::int32_t b, std::int64_t c,
                std::string payload, std::string error) {
  caf::anon_send(me, run_atom::value, static_cast<std::int32_t>(kind), seq, a,
                 b, c, std::move(payload), std::move(error));
}

void send_signal(const caf::actor& me, run_signal kind, std::int32_t seq) {
  caf::anon_send(me, run_atom::value,
                 signal_base + static_cast<std::int32_t>(kind), seq,
                 std::int32_t{0}, std::int32_t{0}, std::int64_t{0},
                 std::string{}, std::string{});
}

/// A step attempt's outcome, back to the actor.
void send_outcome(const caf::actor& me, std::int32_t seq, persistence::outcome o,
                  std::string payload, std::string error, bool checkpointed) {
  send_reply(me, reply::outcome, seq, static_cast<std::int32_t>(o),
             checkpointed ? 1 : 0, 0, std::move(payload), std::move(error));
}

struct run_state;
using run_actor = caf::stateful_actor<run_state>;

/// Hands a final outcome to the journal writer; after the commit, the
/// committing thread tells run actor `me` (a `durable` message with the
/// outcome). Called on the step executor (`on_step_thread`: it may commit
/// itself) and on the actor alike.
void checkpoint(persistence::journal_writer& writer, const caf::actor& me,
                persistence::fence owner, persistence::journal_entry e,
                bool on_step_thread = false) {
  auto seq = e.seq;
  auto result = static_cast<std::int32_t>(e.outcome);
  auto payload = e.payload; // the actor needs it after the commit
  auto error = e.error;
  writer.append({std::move(owner), std::move(e)},
                [me, seq, result, payload = std::move(payload),
                 error = std::move(error)](persistence::write_result r) {
                  if (r.ack == persistence::write_ack::superseded) {
                    // The index holds another outcome (recorded by an
                    // attempt whose commit was in doubt): it stands, live
                    // as on replay.
                    auto& e = *r.recorded;
                    send_reply(me, reply::durable, seq,
                               static_cast<std::int32_t>(e.outcome),
                               static_cast<std::int32_t>(
                                 persistence::write_ack::committed),
                               0, std::move(e.payload), std::move(e.error));
                    return;
                  }
                  send_reply(me, reply::durable, seq, result,
                             static_cast<std::int32_t>(r.ack), 0, payload,
                             error);
                },
                on_step_thread);
}

/// The run as an actor's state. Everything here runs on the actor's turn.
struct run_state : run_core {
  run_actor* self = nullptr;
  runtime_impl* rt = nullptr;
  /// The fencing epoch; the executor is always this runtime's (kept once,
  /// in the config, not per run).
  std::int64_t epoch = 0;
  std::unique_ptr<std::string> parent_id; // null: none
  /// What starting the code needs (workflow name, inputs); gone after.
  struct start_info {
    std::string name;
    std::string inputs;
  };
  std::unique_ptr<start_info> pending_start;
  std::optional<workflow_context> ctx;
  /// The operation in flight, the coroutine waiting for it, its attempts.
  std::unique_ptr<operation> op;
  /// A sleep armed in memory: its index and due time (the operation itself
  /// is dropped meanwhile; a sleeping run holds as little as it can).
  std::int32_t sleeping_seq = -1;
  std::int64_t sleeping_due = 0;
  std::coroutine_handle<> waiting;
  std::int32_t attempt = 0;
  /// The run's end, kept until its final status has committed.
  std::unique_ptr<run_outcome> final_outcome;
  /// Set when the code went on after a non-determinism error.
  bool abandoned = false;
  /// When the await in flight started waiting (clock ms), for passivation.
  std::int64_t waiting_since = 0;
  /// Whether a passivation write is in flight.
  bool passivating = false;
  /// A wait's passivation written, its last check in flight.
  struct passivation {
    std::int64_t wake_at;
    std::uint64_t seen;
  };
  std::optional<passivation> confirming;
  /// A delivery check in flight (for the await at `checking_seq`); a wake
  /// meanwhile asks for one more check after it instead of a second one at
  /// once (two checks could record two winners for one index).
  std::int32_t checking_seq = -1;
  bool check_again = false;
  /// The await's outcome is being recorded: no further checks.
  bool recording = false;
  /// The step or transaction whose body runs on another thread now: the
  /// body may touch the coroutine frame (locals captured by reference), so
  /// the actor, and the frame with it, must not go before its reply.
  std::int32_t body_seq = -1;
  /// stop() came while a body ran: quit as soon as its reply arrives.
  bool quitting = false;
  /// A `stay_awake` write in flight, and a passivation waiting for it (two
  /// writes of the wake-up time on two connections could commit in either
  /// order, leaving a run out of memory with no wake-up time).
  bool waking = false;
  std::optional<std::int64_t> deferred_passivation;
  /// Declared last: the frame goes before everything it refers to.
  std::unique_ptr<run_driver> driver;

  void init(run_actor* s, runtime_impl* r, persistence::run_record run,
            std::vector<persistence::journal_entry> journal) {
    self = s;
    rt = r;
    run_id_ = std::move(run.id);
    epoch = run.owner.epoch;
    if (run.parent_id)
      parent_id = std::make_unique<std::string>(std::move(*run.parent_id));
    pending_start = std::make_unique<start_info>(
      start_info{std::move(run.name), std::move(run.inputs)});
    encoding_ = rt->cfg.payload_encoding;
    max_payload_ = rt->cfg.max_payload_bytes;
    for (auto& e : journal) {
      if (e.outcome == persistence::outcome::unreadable && !fatal_)
        fatal_ = std::make_unique<std::string>(e.error); // ends it ERROR
      std::string{}.swap(e.run_id); // the run's id is run_id_; save the copy
      record_outcome(std::move(e));
    }
  }

  void perform(operation next, std::coroutine_handle<> h) override {
    if (fatal_) {
      // The code caught the non-determinism error and went on: stop here.
      abandoned = true;
      return;
    }
    op = std::make_unique<operation>(std::move(next));
    waiting = h;
    attempt = 0;
    recording = false;
    check_again = false;
    switch (op->kind) {
      case persistence::entry_kind::step:
      case persistence::entry_kind::transaction:
        dispatch();
        return;
      case persistence::entry_kind::awakeable:
        // Nothing to run: the creation itself is what becomes durable.
        record(entry_for(op->seq));
        return;
      case persistence::entry_kind::deadline: {
        auto e = entry_for(op->seq);
        e.payload = std::to_string(op->due_ms);
        record(std::move(e));
        return;
      }
      case persistence::entry_kind::child:
        start_child();
        return;
      case persistence::entry_kind::event:
      case persistence::entry_kind::send:
      case persistence::entry_kind::resolve:
        dispatch();
        return;
      case persistence::entry_kind::sleep:
        if (auto* r = find_recorded(op->seq)) {
          arm(persistence::recorded_time(*r)); // replay: sleep what remains
        } else {
          auto e = entry_for(op->seq);
          e.payload = std::to_string(op->due_ms);
          record(std::move(e));
        }
        return;
      case persistence::entry_kind::await:
        waiting_since = now_ms();
        check_delivery();
        return;
    }
  }

  persistence::fence owner() const {
    return {rt->cfg.executor_id, epoch};
  }

  std::int64_t now_ms() const override {
    return rt->clock->now_ms();
  }

  /// Checkpoints `e` (outcome value) from the actor.
  void record(persistence::journal_entry e) {
    e.created_at_ms = detail::now_ms();
    checkpoint(*rt->writer, caf::actor_cast<caf::actor>(self), owner(),
               std::move(e));
  }

  /// Resumes the code waiting on the recorded operation in flight.
  void resume_recorded() {
    op.reset();
    auto h = std::exchange(waiting, {});
    h.resume();
    after_resume();
  }

  // -- children -----------------------------------------------------------------

  /// Creates the child run (off the actor, fenced by this run: a process
  /// that lost the parent creates nothing), starts it, and reports back as
  /// a step outcome, which is then checkpointed: a crash in between creates
  /// nothing twice (same id) and starts nothing twice (it is running).
  void start_child() {
    ++attempt;
    persistence::run_record child;
    child.id = op->name;
    child.name = op->child_workflow;
    child.inputs = op->payload;
    child.owner = {rt->cfg.executor_id, 1};
    child.app_version = rt->cfg.app_version;
    child.created_at_ms = detail::now_ms();
    child.parent_id = run_id_;
    auto me = caf::actor_cast<caf::actor>(self);
    rt->control->post([me, seq = op->seq, child = std::move(child), rt = rt,
                       fence = owner()] {
      auto report = [&](persistence::outcome o, std::string error) {
        send_outcome(me, seq, o, {}, std::move(error), false);
      };
      if (rt->workflows.count(child.name) == 0)
        return report(persistence::outcome::terminal,
                      "no workflow registered as '" + child.name + "'");
      if (!persistence::is_valid_name(child.id))
        return report(persistence::outcome::terminal,
                      "child ids must be 1 to 255 bytes of UTF-8 without NUL");
      try {
        auto result = rt->stores->with(
          [&](persistence::store& db) { return db.create_child(fence, child); });
        if (!result) {
          send_signal(me, run_signal::fenced, seq);
          return;
        }
        if (result->created) {
          rt->spawn_run(std::move(result->run), {});
        } else if (result->run.name != child.name
                   || result->run.inputs != child.inputs
                   || result->run.parent_id != child.parent_id) {
          return report(persistence::outcome::terminal,
                        "child id '" + child.id
                          + "' already names another run");
        } else {
          rt->revive(child.id); // ours from before a crash: make sure it runs
        }
        report(persistence::outcome::value, {});
      } catch (const perdure::error& ex) {
        if (outage(ex.code()))
          send_signal(me, run_signal::restart, seq);
        else
          report(persistence::outcome::failed, ex.what());
      } catch (const std::exception& ex) {
        report(persistence::outcome::failed, ex.what());
      }
    });
  }

  // -- sleeping -----------------------------------------------------------------

  /// Waits for the sleep in flight (recorded) to be due at `due`.
  void arm(std::int64_t due) {
    auto now = now_ms();
    if (due <= now) {
      resume_recorded();
      return;
    }
    if (due - now > rt->cfg.passivate_after.count()) {
      passivate(due);
      return;
    }
    sleeping_seq = op->seq;
    sleeping_due = due;
    op.reset();
    rt->timers->schedule({due, run_id_, sleeping_seq});
  }

  // -- awaiting ------------------------------------------------------------------

  /// Looks for the first source of the wait in flight that has delivered
  /// (off the actor: it reads the store); the answer comes back as a
  /// `found` message. Past the deadline with nothing delivered: timed out.
  void check_delivery() {
    if (recording)
      return; // found already
    if (checking_seq == op->seq) {
      check_again = true; // after the one in flight
      return;
    }
    checking_seq = op->seq;
    auto me = caf::actor_cast<caf::actor>(self);
    std::vector<std::int64_t> after;
    for (auto& s : op->sources)
      after.push_back(s.what == wait_source::kind::message ? consumed(s.key) : 0);
    rt->control->post([me, seq = op->seq, sources = op->sources,
                       after = std::move(after), due = op->due_ms, rt = rt,
                       run = run_id_] {
      wait_outcome w;
      bool found = false;
      try {
        found = rt->stores->with([&](persistence::store& db) {
          for (std::size_t i = 0; i < sources.size(); ++i) {
            if (delivered(db, run, sources[i], after[i], w)) {
              w.index = static_cast<std::int32_t>(i);
              return true;
            }
          }
          return false;
        });
        if (!found && due > 0 && rt->clock->now_ms() >= due) {
          w = wait_outcome{}; // index -1: timed out
          found = true;
        }
      } catch (const std::exception& ex) {
        rt->log().error("perdure: run {} could not check its wait: {}", run,
                      ex.what());
      }
      send_reply(me, reply::found, seq, static_cast<std::int32_t>(w.result),
                 found ? w.index : not_found, w.cursor, std::move(w.payload),
                 std::move(w.error));
    });
  }

  /// Returns whether `s` has delivered, filling `w` (on the step executor).
  static bool delivered(persistence::store& db, const std::string& run,
                        const wait_source& s, std::int64_t after,
                        wait_outcome& w) {
    switch (s.what) {
      case wait_source::kind::resolution: {
        auto r = db.get_resolution(s.key);
        if (!r)
          return false;
        w.result = r->result;
        w.payload = std::move(r->payload);
        w.error = std::move(r->error);
        return true;
      }
      case wait_source::kind::message: {
        auto m = db.next_message(run, s.key, after);
        if (!m)
          return false;
        w.cursor = m->id;
        w.payload = std::move(m->payload);
        return true;
      }
      case wait_source::kind::run: {
        auto r = db.get_run(s.key);
        if (!r || !is_terminal(r->status))
          return false;
        if (r->status == run_status::success) {
          w.payload = r->output.value_or(std::string{});
        } else {
          w.result = persistence::outcome::terminal;
          w.error = "child workflow '" + s.key + "' ended "
                    + std::string{to_string(r->status)} + ": "
                    + r->error.value_or("no reason recorded");
        }
        return true;
      }
    }
    return false;
  }

  void on_found(std::int32_t seq, bool found, std::int32_t index,
                std::int64_t cursor, std::int32_t result, std::string payload,
                std::string error) {
    if (seq == checking_seq)
      checking_seq = -1;
    if (!op || op->seq != seq || op->kind != persistence::entry_kind::await
        || passivating || recording)
      return;
    if (!found && std::exchange(check_again, false)) {
      check_delivery(); // woken while this check was in flight
      return;
    }
    check_again = false;
    if (confirming) {
      auto p = *std::exchange(confirming, std::nullopt);
      if (!found) {
        leave_or_stay(seq, p.wake_at, p.seen);
        return;
      }
      stay_awake(); // delivered after all: record it below
    }
    if (found) {
      wait_outcome w;
      w.index = index;
      w.cursor = cursor;
      w.payload = std::move(payload);
      auto e = entry_for(seq);
      e.outcome = static_cast<persistence::outcome>(result);
      e.payload = w.encode();
      e.error = std::move(error);
      recording = true; // one record per index, whatever wakes come now
      record(std::move(e));
      return;
    }
    // Not yet: a delivery wakes us, or the deadline. Past the threshold,
    // leave memory until then.
    auto now = now_ms();
    auto threshold = rt->cfg.passivate_after.count();
    auto due = op->due_ms;
    if (now - waiting_since >= threshold && (due == 0 || due - now > threshold)) {
      passivate(due == 0 ? passivated_forever : due);
      return;
    }
    auto next = waiting_since + threshold;
    if (due > 0)
      next = std::min(next, due);
    if (next <= now)
      next = due > 0 ? due : now + threshold;
    rt->timers->schedule({next, run_id_, seq});
  }

  /// A timer is due (`seq` of the operation), or something was delivered
  /// (`seq` -1).
  void on_wake(std::int32_t seq) {
    if (sleeping_seq >= 0) {
      if (seq != sleeping_seq)
        return;
      if (sleeping_due <= now_ms()) {
        sleeping_seq = -1;
        resume_recorded();
      } else { // woken early (the clock moved differently): wait again
        rt->timers->schedule({sleeping_due, run_id_, sleeping_seq});
      }
      return;
    }
    if (!op || passivating || (seq >= 0 && op->seq != seq))
      return;
    if (op->kind == persistence::entry_kind::sleep) {
      if (auto* e = find_recorded(op->seq))
        arm(persistence::recorded_time(*e));
    } else if (op->kind == persistence::entry_kind::await) {
      check_delivery();
    }
  }

  // -- passivation ----------------------------------------------------------------

  /// Records that nothing needs this run before `wake_at`, then leaves
  /// memory (unless woken meanwhile).
  void passivate(std::int64_t wake_at) {
    passivating = true;
    if (waking) { // after the wake-up time was cleared, not before
      deferred_passivation = wake_at;
      return;
    }
    auto me = caf::actor_cast<caf::actor>(self);
    auto seen = rt->wake_count(run_id_);
    rt->control->post([me, seq = op->seq, seen, wake_at, fence = owner(),
                       id = run_id_, pool = rt->stores.get(),
                       log = &rt->log()] {
      bool ok = false;
      try {
        ok = pool->with([&](persistence::store& db) {
          return db.set_wake_at(fence, id, wake_at);
        });
      } catch (const std::exception& ex) {
        log->error("perdure: run {} could not passivate: {}", id,
                      ex.what());
      }
      send_reply(me, reply::passive, seq, ok ? 1 : 0, 0, wake_at,
                 std::to_string(seen), {});
    });
  }

  void on_passive(std::int32_t seq, bool ok, std::int64_t wake_at,
                  std::uint64_t seen) {
    passivating = false;
    if (!ok) {
      // Fenced or cancelled meanwhile; or the store failed: stay in memory
      // and keep waiting (a failed write changed nothing).
      if (op && op->seq == seq)
        on_wake(seq);
      return;
    }
    if (op && op->seq == seq && op->kind == persistence::entry_kind::await) {
      // A delivery committed before the wake-up time was written cleared
      // nothing and may have no notice on its way (its sender crashed):
      // look once more now that the time is written. One committed after
      // clears it again, and the sweep finds the run.
      confirming = passivation{wake_at, seen};
      check_delivery();
      return;
    }
    leave_or_stay(seq, wake_at, seen);
  }

  /// Leaves memory after a passivation write, unless woken meanwhile.
  void leave_or_stay(std::int32_t seq, std::int64_t wake_at,
                     std::uint64_t seen) {
    if (op && op->seq == seq && rt->finish_passivation(run_id_, epoch, seen)) {
      if (wake_at != passivated_forever)
        rt->timers->schedule({wake_at, run_id_, -1});
      rt->log().debug("perdure: run {} passivated", run_id_);
      self->quit(); // the state, and with it the coroutine frame, goes
      return;
    }
    // Woken while passivating: the run stays, and the store must not keep a
    // wake-up time that would hide it from recovery.
    stay_awake();
    if (op && op->seq == seq)
      on_wake(seq);
  }

  /// Clears the run's wake-up time (it stays in memory after all). If that
  /// fails, the store says "passivated" of a run in memory, which a crash
  /// would then leave asleep: the run restarts from the store instead
  /// (housekeeping revives it, and reviving clears the time).
  void stay_awake() {
    auto me = caf::actor_cast<caf::actor>(self);
    waking = true;
    rt->control->post([me, fence = owner(), id = run_id_,
                       pool = rt->stores.get(), log = &rt->log()] {
      try {
        pool->with([&](persistence::store& db) {
          return db.set_wake_at(fence, id, std::nullopt);
        });
        send_reply(me, reply::awake, 0, 1, 0, 0, {}, {});
      } catch (const std::exception& ex) {
        log->warn("perdure: run {} could not record that it is awake "
                     "({}); it restarts",
                     id, ex.what());
        send_signal(me, run_signal::restart, 0);
      }
    });
  }

  /// Stops the actor and has housekeeping revive the run from the store.
  void restart() {
    stop(std::nullopt);
    rt->orphaned(run_id_);
  }

  /// The actor failed (an exception in a handler): stops as `stop` does
  /// and has housekeeping revive the run, counted as a recovery.
  void crash() {
    rt->run_stopped(run_id_, std::nullopt, epoch);
    rt->orphaned(run_id_, true);
    leave();
  }

  /// Handles one message (see `run_behavior`).
  void handle(std::int32_t kind, std::int32_t seq, std::int32_t a,
              std::int32_t b, std::int64_t c, std::string& payload,
              std::string& error);

  /// The wake-up time is cleared; a passivation that waited for it goes on.
  void on_awake() {
    waking = false;
    if (auto due = std::exchange(deferred_passivation, std::nullopt)) {
      passivating = false;
      if (op)
        passivate(*due);
    }
  }

  void on_cancel() {
    rt->log().info("perdure: run {} cancelled", run_id_);
    stop(run_outcome{run_status::cancelled, std::nullopt,
                     std::string{"cancelled"}});
  }

  /// Runs one attempt of the operation in flight on the step executor.
  void dispatch() {
    ++attempt;
    auto me = caf::actor_cast<caf::actor>(self);
    auto seq = op->seq;
    if (op->kind == persistence::entry_kind::step
        || op->kind == persistence::entry_kind::transaction)
      body_seq = seq;
    if (op->kind == persistence::entry_kind::step) {
      // The executor hands a final outcome straight to the journal writer,
      // and the writer's ack brings it to the actor: one actor hop per step.
      // A failure with attempts left comes back to the actor for its retry.
      auto last_attempt = attempt >= op->policy.max_attempts;
      rt->steps->post([me, seq, last_attempt, body = op->body,
                       writer = rt->writer.get(), fence = owner(),
                       proto = entry_for(seq), rt = rt]() mutable {
        // Right before the body: a process that lost the run to another
        // one, or is stopping (stop() empties the active runs), runs none
        // of its steps any more.
        if (!rt->may_run_step(proto.run_id, fence.epoch)) {
          send_signal(me, run_signal::drop, seq);
          return;
        }
        auto out = body();
        if (out.result == persistence::outcome::failed && !last_attempt) {
          send_outcome(me, seq, out.result, std::move(out.payload),
                       std::move(out.error), false);
          return;
        }
        auto e = std::move(proto);
        e.outcome = out.result;
        e.payload = std::move(out.payload);
        e.error = persistence::valid_text(out.error);
        e.created_at_ms = detail::now_ms();
        // A step thread may block: it commits itself if a writer
        // connection is idle (one hand-off less per step).
        checkpoint(*writer, me, std::move(fence), std::move(e), true);
      });
      return;
    }
    if (op->delivery) {
      deliver();
      return;
    }
    auto checkpoint = entry_for(seq);
    checkpoint.created_at_ms = now_ms();
    auto is_event = op->kind == persistence::entry_kind::event;
    if (is_event)
      checkpoint.payload = op->payload;
    // A transaction runs user SQL (step executor); an event is the
    // runtime's own row (control executor).
    auto& executor = is_event ? *rt->control : *rt->steps;
    executor.post([me, seq, checkpoint, fence = owner(), body = op->tx_body,
                   is_event, rt = rt] {
      auto send_failure = [&](persistence::outcome o, const char* what) {
        send_outcome(me, seq, o, {}, what, false);
      };
      if (!rt->owns(checkpoint.run_id, fence.epoch)) {
        send_signal(me, run_signal::drop, seq);
        return;
      }
      auto body_ran = false;
      try {
        auto& pool = is_event ? *rt->stores : *rt->tx_stores;
        auto recorded = pool.with([&](persistence::store& db) {
          if (is_event) // Perdure's own row, with its checkpoint
            return db.record_event(fence, checkpoint, checkpoint.name,
                                   checkpoint.payload);
          return db.run_transaction(fence, checkpoint, [&](sql_session& s) {
            body_ran = true;
            return body(s);
          });
        });
        if (!recorded) {
          send_signal(me, run_signal::fenced, seq);
          return;
        }
        // As recorded: an outcome an earlier attempt committed stands.
        auto& e = *recorded;
        if (is_event && e.outcome == persistence::outcome::value)
          e.payload.clear(); // the event's value is no result
        send_outcome(me, seq, e.outcome, std::move(e.payload),
                     std::move(e.error), true);
      } catch (const perdure::error& ex) {
        // A store that could not be reached before the user's SQL ran
        // restarts the run (no attempt spent). Once the body ran, an
        // outage-like failure spends an attempt: the user's SQL can fail
        // in ways that look like one (a deadlock every time, an
        // idle-session timeout), and its retry policy must bound them.
        if (outage(ex.code()) && !body_ran)
          send_signal(me, run_signal::restart, seq);
        else
          send_failure(persistence::outcome::failed, ex.what());
      } catch (const terminal_error& ex) {
        send_failure(persistence::outcome::terminal, ex.what());
      } catch (const std::exception& ex) {
        send_failure(persistence::outcome::failed, ex.what());
      } catch (...) {
        send_failure(persistence::outcome::failed, "unknown exception");
      }
    });
  }

  /// Stores the delivery in flight together with its checkpoint (off the
  /// actor: exactly once), then wakes the run it went to.
  void deliver() {
    auto me = caf::actor_cast<caf::actor>(self);
    auto seq = op->seq;
    auto checkpoint = entry_for(seq);
    checkpoint.created_at_ms = detail::now_ms();
    rt->control->post([me, seq, checkpoint = std::move(checkpoint),
                       fence = owner(), d = op->delivery, rt = rt] {
      try {
        auto recorded = rt->stores->with([&](persistence::store& db) {
          return db.deliver(fence, checkpoint, *d);
        });
        if (!recorded) {
          send_signal(me, run_signal::fenced, seq);
          return;
        }
        if (recorded->outcome == persistence::outcome::value) {
          rt->wake(d->run_id(), -1);
          rt->announce('w', d->run_id());
        }
        send_outcome(me, seq, recorded->outcome, {}, recorded->error, true);
      } catch (const perdure::error& ex) {
        if (outage(ex.code()))
          send_signal(me, run_signal::restart, seq);
        else
          send_outcome(me, seq, persistence::outcome::failed, {}, ex.what(),
                       false);
      } catch (const std::exception& ex) {
        send_outcome(me, seq, persistence::outcome::failed, {}, ex.what(),
                     false);
      }
    });
  }

  std::chrono::milliseconds retry_delay() const {
    auto& p = op->policy;
    double ms = static_cast<double>(p.initial_delay.count());
    for (int i = 1; i < attempt; ++i)
      ms *= p.backoff;
    ms = std::min(ms, static_cast<double>(p.max_delay.count()));
    thread_local std::minstd_rand rng{std::random_device{}()};
    std::uniform_real_distribution<double> jitter{ms / 2, ms};
    return std::chrono::milliseconds{static_cast<long>(jitter(rng))};
  }

  void on_outcome(std::int32_t seq, std::int32_t result, std::string payload,
                  std::string error, bool checkpointed) {
    if (!op || op->seq != seq)
      return;
    auto kind = static_cast<persistence::outcome>(result);
    if (kind == persistence::outcome::failed
        && attempt < op->policy.max_attempts) {
      rt->log().debug("perdure: run {} step '{}' attempt {} failed: {}", run_id_,
                    op->name, attempt, error);
      self->delayed_send(self, retry_delay(), run_atom::value,
                         signal_base
                           + static_cast<std::int32_t>(run_signal::retry),
                         seq, std::int32_t{0}, std::int32_t{0},
                         std::int64_t{0}, std::string{}, std::string{});
      return;
    }
    auto e = entry_for(seq);
    e.outcome = kind;
    e.payload = std::move(payload);
    e.error = persistence::valid_text(error);
    e.created_at_ms = now_ms();
    if (checkpointed)
      resume_with(std::move(e));
    else
      checkpoint(*rt->writer, caf::actor_cast<caf::actor>(self), owner(),
                 std::move(e));
  }

  /// Returns the journal entry of the operation in flight, outcome unset.
  persistence::journal_entry entry_for(std::int32_t seq) const {
    persistence::journal_entry e;
    e.run_id = run_id_;
    e.seq = seq;
    e.kind = op->kind;
    e.name = op->name;
    return e;
  }

  /// A final outcome, committed by the journal writer (see `checkpoint`).
  void on_durable(std::int32_t seq, std::int32_t ack, std::int32_t result,
                  std::string payload, std::string error) {
    if (!op || op->seq != seq || !write_committed(ack, "its checkpoint"))
      return;
    auto e = entry_for(seq);
    e.outcome = static_cast<persistence::outcome>(result);
    e.payload = std::move(payload);
    e.error = std::move(error);
    if (op->kind == persistence::entry_kind::sleep) {
      // The wake-up time is durable (ours, or one recorded before): wait.
      arm(e.outcome == persistence::outcome::value
            ? persistence::recorded_time(e)
            : op->due_ms);
      return;
    }
    resume_with(std::move(e));
  }

  void on_retry(std::int32_t seq) {
    if (op && op->seq == seq) {
      if (op->kind == persistence::entry_kind::child)
        start_child();
      else
        dispatch();
    }
  }

  /// Returns true if the write was committed; otherwise stops the actor,
  /// leaving the run to its new owner (rejected) or to recovery (failed).
  bool write_committed(std::int32_t ack, const char* what) {
    switch (static_cast<persistence::write_ack>(ack)) {
      case persistence::write_ack::committed:
        return true;
      case persistence::write_ack::rejected:
        lost_ownership();
        return false;
      case persistence::write_ack::failed:
        rt->log().error("perdure: run {} stops: {} could not be written; it "
                      "is revived when the store answers again",
                      run_id_, what);
        restart();
        return false;
      case persistence::write_ack::superseded:
        return true; // the sender substituted the recorded outcome
    }
    return false;
  }

  void lost_ownership() {
    rt->report_fenced(run_id_);
    rt->fenced_from(run_id_, epoch);
    stop(std::nullopt);
  }

  /// Hands the durable outcome to the coroutine and lets it run on.
  void resume_with(persistence::journal_entry e) {
    std::string{}.swap(e.run_id);
    record_outcome(std::move(e));
    op.reset();
    auto h = std::exchange(waiting, {});
    h.resume();
    after_resume();
  }

  void after_resume() {
    if (abandoned || !driver || driver->done())
      finish();
  }

  /// Records the run's final status; the actor ends once it committed.
  void finish() {
    persistence::completion_write c;
    c.run_id = run_id_;
    c.owner = owner();
    c.at_ms = now_ms();
    if (fatal_) {
      c.status = run_status::error;
      c.error = *fatal_;
    } else {
      try {
        auto out = driver->take_result();
        if (out.size() > max_payload_) {
          c.status = run_status::error;
          c.error = "output of " + std::to_string(out.size())
                    + " bytes exceeds the limit of "
                    + std::to_string(max_payload_);
        } else {
          c.status = run_status::success;
          c.output = std::move(out);
        }
      } catch (const std::exception& ex) {
        c.status = run_status::error;
        c.error = persistence::valid_text(ex.what());
      } catch (...) {
        c.status = run_status::error;
        c.error = "unknown exception";
      }
    }
    driver.reset();
    final_outcome = std::make_unique<run_outcome>(
      run_outcome{c.status, c.output, c.error});
    auto me = caf::actor_cast<caf::actor>(self);
    rt->writer->complete(std::move(c), [me](persistence::write_result r) {
      send_signal(me, run_signal::ended, static_cast<std::int32_t>(r.ack));
    });
  }

  void on_ended(std::int32_t ack) {
    if (write_committed(ack, "its final status"))
      stop(*final_outcome);
  }

  void stop(std::optional<run_outcome> outcome) {
    auto ended = outcome.has_value();
    rt->run_stopped(run_id_, std::move(outcome), epoch);
    if (ended && parent_id)
      rt->wake(*parent_id, -1); // a parent may be waiting for this end
    leave();
  }

  /// Quits, unless a body still runs: then once its reply arrives (the
  /// frame it may touch must outlive it).
  void leave() {
    if (body_seq >= 0) {
      quitting = true;
      return;
    }
    self->quit();
  }

  /// Returns whether a message of `kind` about `seq` is the reply of the
  /// body in flight (and notes that the body is done).
  bool body_replied(std::int32_t kind, std::int32_t seq) {
    if (body_seq < 0 || seq != body_seq)
      return false;
    auto reply_kind = kind == static_cast<std::int32_t>(reply::outcome)
                      || kind == static_cast<std::int32_t>(reply::durable);
    auto signal = kind - signal_base;
    auto signal_kind = signal == static_cast<std::int32_t>(run_signal::fenced)
                       || signal == static_cast<std::int32_t>(run_signal::drop)
                       || signal
                            == static_cast<std::int32_t>(run_signal::restart);
    if (!reply_kind && !signal_kind)
      return false;
    body_seq = -1;
    return true;
  }

  void start_code() {
    auto start = std::move(pending_start);
    if (fatal_) { // a journal row that cannot be read: this run alone fails
      rt->log().error("perdure: run {} cannot be replayed: {}", run_id_, *fatal_);
      abandoned = true;
      finish();
      return;
    }
    auto i = rt->workflows.find(start->name);
    if (i == rt->workflows.end()) {
      fatal_ = std::make_unique<std::string>("unknown workflow '" + start->name
                                             + "'");
      abandoned = true;
      finish();
      return;
    }
    ctx.emplace(*this);
    driver = i->second.start(*ctx, std::move(start->inputs), encoding_);
    driver->start();
    after_resume();
  }
};

caf::behavior run_behavior(run_actor* self, runtime_impl* rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal) {
  self->state.init(self, rt, std::move(run), std::move(journal));
  send_signal(caf::actor_cast<caf::actor>(self), run_signal::start, 0);
  // Exceptions must not escape a handler: in CAF 0.17 they kill the actor.
  // The coroutine keeps its own exceptions; the handlers below only move
  // values around, and anything unexpected ends this actor alone, leaving
  // the run PENDING for recovery.
  self->set_exception_handler([self, rt](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      rt->log().error("perdure: run {} actor failed: {}", self->state.run_id(),
                    ex.what());
    } catch (...) {
    }
    // Not left for the next process start: housekeeping revives it (a run
    // that fails its actor every time ends at max_recovery_attempts).
    self->state.rt->run_stopped(self->state.run_id(), std::nullopt,
                                self->state.epoch);
    self->state.rt->orphaned(self->state.run_id(), true);
    return caf::sec::runtime_error;
  });
  // runtime::stop() sends every run an exit: a run whose body still runs
  // stays until the body's reply (its frame must outlive the body).
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (self->state.body_seq >= 0)
      self->state.quitting = true;
    else
      self->quit(msg.reason);
  });
  return {
    [self, rt](run_atom, std::int32_t kind, std::int32_t seq, std::int32_t a,
           std::int32_t b, std::int64_t c, std::string& payload,
           std::string& error) {
      auto& st = self->state;
      auto replied = st.body_replied(kind, seq);
      if (st.quitting) { // stopped while a body ran: wait for it, then go
        if (replied)
          self->quit();
        return;
      }
      try {
        st.handle(kind, seq, a, b, c, payload, error);
      } catch (const std::exception& ex) {
        // Caught here, not by CAF: CAF would end the actor at once, and
        // with it the frame a step body in flight may still use.
        rt->log().error("perdure: run {} actor failed: {}", st.run_id(),
                      ex.what());
        st.crash();
      }
    },
  };
}

void run_state::handle(std::int32_t kind, std::int32_t seq, std::int32_t a,
                       std::int32_t b, std::int64_t c, std::string& payload,
                       std::string& error) {
  if (kind >= signal_base) {
    switch (static_cast<run_signal>(kind - signal_base)) {
      case run_signal::start: start_code(); break;
      case run_signal::retry: on_retry(seq); break;
      case run_signal::fenced: lost_ownership(); break;
      case run_signal::wake: on_wake(seq); break;
      case run_signal::cancel: on_cancel(); break;
      case run_signal::ended: on_ended(seq); break;
      case run_signal::restart: restart(); break;
      case run_signal::drop: stop(std::nullopt); break;
    }
    return;
  }
  switch (static_cast<reply>(kind)) {
    case reply::outcome:
      on_outcome(seq, a, std::move(payload), std::move(error), b != 0);
      break;
    case reply::durable:
      on_durable(seq, b, a, std::move(payload), std::move(error));
      break;
    case reply::found:
      on_found(seq, b != not_found, b, c, a, std::move(payload),
               std::move(error));
      break;
    case reply::passive:
      on_passive(seq, a != 0, c, std::stoull(payload));
      break;
    case reply::awake:
      on_awake();
      break;
  }
}

} // namespace

void signal_run(const caf::actor& run, run_signal kind, std::int32_t seq) {
  send_signal(run, kind, seq);
}

caf::actor spawn_run_actor(caf::actor_system& sys, runtime_impl& rt,
                           persistence::run_record run,
                           std::vector<persistence::journal_entry> journal) {
  return sys.spawn(run_behavior, &rt, std::move(run), std::move(journal));
}

} // namespace perdure::detail
