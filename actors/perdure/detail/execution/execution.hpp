#pragma once

// One workflow execution: its journal and replay, the durable operations its
// coroutine performs (steps, waits, sleeps, children, deliveries), the
// passivation handshake and its end. Free of CAF: a host (the run actor
// today; an object actor can host several) gives it one turn at a time and
// carries its messages.

#include <chrono>
#include <coroutine>
#include <functional>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "perdure/detail/run_core.hpp"
#include "perdure/detail/execution/run_message.hpp"
#include "perdure/detail/workflow_entry.hpp"
#include "perdure/error.hpp"
#include "perdure/persistence/records.hpp"
#include "perdure/telemetry/trace.hpp"
#include "perdure/workflow_context.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure::persistence {
class journal_writer;
class store;
} // namespace perdure::persistence

namespace perdure::detail {

struct runtime_services;
struct workflow_series;
class run_trace;

/// Where an execution's messages go: callable from any thread, and after
/// the execution left (the message is then dropped).
class execution_mailbox {
public:
  virtual ~execution_mailbox() = default;

  /// Delivers `m` on one of the execution's later turns.
  virtual void tell(run_message m) const = 0;

  /// Delivers `m` after `delay`.
  virtual void tell_later(std::chrono::milliseconds delay,
                          run_message m) const = 0;
};

using mailbox = std::shared_ptr<const execution_mailbox>;

/// What hosts an execution.
class execution_host {
public:
  virtual ~execution_host() = default;

  /// Ends the execution's life: the host drops it, and the coroutine frame
  /// with it. Called on the execution's turn, once.
  virtual void quit() = 0;

  /// Starts the code of run `name` on `core` (taking `inputs`); nullptr:
  /// `name` is a workflow, which the execution looks up itself (`inputs`
  /// untouched). An object's host starts its handlers here, and sets
  /// `patches` to what the handler declares.
  virtual std::unique_ptr<run_driver>
  start_code(run_core& core, const std::string& name, std::string& inputs,
             persistence::encoding enc,
             const std::vector<std::string>*& patches) {
    (void)core, (void)name, (void)inputs, (void)enc, (void)patches;
    return nullptr;
  }

  /// Settles the run's end before anyone hears of it: an object's host
  /// encodes the state the invocation leaves, and turns the end into an
  /// ERROR if it cannot be stored (too large, not encodable).
  virtual void settle_end(persistence::completion_write& c) {
    (void)c;
  }

  /// Returns the write that ends the run (`c`, its final status, as
  /// settled): an object's host adds the state the invocation leaves.
  virtual persistence::write final_write(persistence::completion_write c) {
    return c;
  }

  /// Whether the run may leave memory while it sleeps or waits long (an
  /// object's invocation holds its key: it stays).
  virtual bool may_passivate() const {
    return true;
  }

  /// Returns the key the run holds while it runs (`type \x1f key`), if it
  /// is an object's invocation: its calls must not wait for that key.
  virtual std::string held_key() const {
    return {};
  }

  /// The run is a saga that now compensates: from here on a cancellation
  /// changes nothing (the run actor switches behaviour).
  virtual void compensating() {
  }
};

class execution;
class step_executor;

/// One attempt of a plain step, run on a step thread.
struct step_job {
  mailbox me;
  /// Valid while the body runs: the host stays until the body's reply.
  execution* exec = nullptr;
  std::int32_t seq = 0;
  bool last_attempt = false;
  step_body body;
  persistence::fence fence;
  persistence::journal_entry proto;
  runtime_services* rt = nullptr;
  /// Which attempt of the step this is (1 the first).
  std::int32_t attempt = 1;
};

/// One execution of a workflow run. Every member runs on the host's turn,
/// or on a step thread holding the turn (see `drive`): `turn_` orders them.
class execution final : public run_core {
public:
  execution();
  /// Reports its spans (the attempt's, an operation's cut short).
  ~execution() override;

  /// Runs `job` here, on a step thread. While a step's checkpoint commits
  /// on this thread and the coroutine goes straight on to another plain
  /// step, runs that one here too: a lone workflow's steps then cost no
  /// thread hand-off at all (each wake-up of a sleeping thread costs about
  /// 100 us on a virtualised kernel, a step's commit 400).
  static void run_steps(step_job job);

  /// Takes over `run` (claimed, at its epoch) and the journal recorded so
  /// far; `box` reaches this execution on `host`. Tells itself to start.
  void init(execution_host& host, mailbox box, runtime_services& rt,
            persistence::run_record run,
            std::vector<persistence::journal_entry> journal);

  /// Handles `m` on the host's turn. Never throws: a handler that fails
  /// stops the execution and leaves the run to housekeeping.
  void receive(run_message& m);

  /// The host is asked to stop (the runtime stops): quits now, or once the
  /// step body in flight replied (it may touch the coroutine frame).
  /// Returns whether the host may quit now.
  bool on_exit_request();

  /// The host failed outside `receive`: reports the stop and has
  /// housekeeping revive the run (the host ends itself).
  void on_host_failure();

  /// Returns whether the run's final status committed (false for an
  /// execution that stopped otherwise: fenced, dropped, failed to write).
  bool ended() const noexcept {
    return ended_;
  }

  void perform(operation next, std::coroutine_handle<> h) override;

  std::int64_t now_ms() const override;
  run_logger logger() override;

  void phase_entered(const std::string& phase) override;
  bool declares_patch(const std::string& name) const override;

private:
  /// Takes the turn on a step thread and handles `m`, the committed
  /// checkpoint of the body this thread ran; sets `next` if the coroutine
  /// went on to a plain step. Returns false, changing nothing, when the
  /// host must handle `m` instead (it may quit, or the write failed).
  bool drive(run_message& m, std::optional<step_job>& next);
  /// Ends the host, or, on a step thread, has it end on its next turn.
  void quit_host();

  /// Sends this failed attempt of a queue item back to its queue, to be
  /// claimed again from `not_before_ms` on.
  void requeue(std::int64_t not_before_ms, std::string error);

  /// Returns after how long a wait the run leaves memory (ms).
  std::int64_t passivate_after_ms() const;

  execution_host* host_ = nullptr;
  bool ended_ = false;
  /// The turn: held by `receive` and by `drive`.
  std::mutex turn_;
  /// On a step thread holding the turn: where a plain step goes instead of
  /// the step executor, and whether the host was asked to quit.
  std::optional<step_job>* inline_next_ = nullptr;
  bool left_ = false;
  mailbox mailbox_;
  runtime_services* rt = nullptr;
  /// The fencing epoch; the executor is always this runtime's (kept once,
  /// in the config, not per run).
  std::int64_t epoch = 0;
  std::unique_ptr<std::string> parent_id; // null: none
  /// Where its plain steps and transactions run: its queue's worker pool,
  /// or the runtime's step threads.
  step_executor* steps_ = nullptr;
  /// A queue item's queue and the attempt this is (null: not an item); a
  /// failed attempt goes back to its queue (`requeued_`) or to the dead
  /// letters.
  struct queue_item {
    std::string queue;
    std::int32_t attempts = 0;
  };
  std::unique_ptr<queue_item> item_;
  /// Its workflow's (or object handler's) metrics, and when it was
  /// created (wall clock, ms: run durations).
  workflow_series* series_ = nullptr;
  std::int64_t created_at_ms_ = 0;
  /// Its workflow (or `type/handler`), for the lines of `ctx.log()`.
  std::string log_name_;
  /// Its place in its trace (always: log lines name the trace); spans go
  /// out only if a span sink is configured.
  std::unique_ptr<run_trace> trace_;
  /// The attempt span's attributes (only with a span sink).
  std::vector<telemetry::attribute> attempt_attributes_;
  /// The live operation whose span is open (-1: none), since when.
  std::int32_t op_span_seq_ = -1;
  std::int64_t op_span_start_ = 0;
  std::string op_span_name_;
  /// How the run ended here, if it did (the attempt span's status).
  std::optional<std::string> end_error_;
  bool end_known_ = false;
  /// Opens the span of the operation in flight, if it runs live.
  void open_op_span();
  /// Reports the open operation span, if any.
  void close_op_span(std::optional<std::string> error,
                     bool interrupted = false);
  /// Records its end in the metrics.
  void count_end(run_status status);
  bool requeued_ = false;
  /// Set BLOCKED instead of ending (see `block`).
  bool blocked_ = false;
  /// Given up to a process that knows a patch it took (see `release`).
  bool released_ = false;
  /// The patches its workflow's (or handler's) registration declares,
  /// once its code started.
  const std::vector<std::string>* declared_patches_ = nullptr;
  /// Returns a patch the run took that its workflow does not declare
  /// (this process runs older code), or null.
  const std::string* unknown_patch() const;
  /// Gives the run up to a process that knows its patches and leaves.
  void release(const std::string& patch);
  /// Its code no longer replays its journal: sets it BLOCKED (`why`: the
  /// divergence) and leaves memory.
  void block(const std::string& why);
  /// Whether a divergence blocks this run (see `config::on_non_determinism`).
  bool may_block() const;
  /// Leaves memory by `write` (on the control executor; false: fenced),
  /// which is not an end: its outcome comes back as `ended`; `what` names
  /// it in the log if the store fails.
  void leave_by(const char* what,
                std::function<bool(persistence::store&)> write);
  /// The keys held by the calls this run serves (see
  /// `run_record::call_chain`); null: none.
  std::unique_ptr<std::string> call_chain;
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
  /// Set when the code went on after a non-determinism error, or when a
  /// cancellation ends the run under its code (`cancelled_end_`).
  bool abandoned = false;
  /// The error of a cancellation that ended the run after its saga was
  /// done (the code did not see it).
  std::unique_ptr<std::string> cancelled_end_;
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
  /// A saga's phase as far as its code has got (`persistence::saga_phase`;
  /// empty: not a saga, or not yet), and whether it was asked to cancel.
  std::string saga_phase_;
  bool cancel_requested_ = false;
  /// Declared last: the frame goes before everything it refers to.
  std::unique_ptr<run_driver> driver;


  persistence::fence owner() const;

  /// Checkpoints `e` (outcome value) from the actor.
  void record(persistence::journal_entry e);

  /// Resumes the code waiting on the recorded operation in flight.
  void resume_recorded();

  // -- children -----------------------------------------------------------------

  /// Creates the child run (off the actor, fenced by this run: a process
  /// that lost the parent creates nothing), starts it, and reports back as
  /// a step outcome, which is then checkpointed: a crash in between creates
  /// nothing twice (same id) and starts nothing twice (it is running).
  void start_child();

  /// `start_child` for a call of an object's handler: the invocation is
  /// stored in the key's inbox (fenced by this run) and delivered.
  void start_call();

  /// Returns the call chain a run this one starts serves: this run's, plus
  /// the key it holds if it waits for the callee (`awaited`).
  std::string callee_chain(bool awaited) const;

  /// On the control executor: creates `child`, fenced by its parent's
  /// `fence`, then `start`s it if new, or, stored before by the same call
  /// (a crash in between), runs `again`; reports the outcome of operation
  /// `seq` to `me` (another run under that id: a terminal error).
  static void create_child_run(
    runtime_services& rt, const mailbox& me, std::int32_t seq,
    const persistence::fence& fence, persistence::run_record child,
    const std::function<void(persistence::run_record&)>& start,
    const std::function<void(const persistence::run_record&)>& again);

  // -- sleeping -----------------------------------------------------------------

  /// Waits for the sleep in flight (recorded) to be due at `due`.
  void arm(std::int64_t due);

  // -- awaiting ------------------------------------------------------------------

  /// Looks for the first source of the wait in flight that has delivered
  /// (off the actor: it reads the store); the answer comes back as a
  /// `found` message. Past the deadline with nothing delivered: timed out.
  void check_delivery();

  /// Returns whether `s` has delivered, filling `w` (on the step executor).
  static bool delivered(persistence::store& db, const std::string& run,
                        const wait_source& s, std::int64_t after,
                        wait_outcome& w);

  /// A wait's check came back; `failed`: the store could not be read.
  void on_found(std::int32_t seq, bool failed, bool found, std::int32_t index,
                std::int64_t cursor, std::int32_t result, std::string payload,
                std::string error);
  /// How soon a wait whose check failed reads the store again.
  static constexpr std::int64_t wait_check_retry_ms = 250;

  /// A timer is due (`seq` of the operation), or something was delivered
  /// (`seq` -1).
  void on_wake(std::int32_t seq);

  // -- passivation ----------------------------------------------------------------

  /// Records that nothing needs this run before `wake_at`, then leaves
  /// memory (unless woken meanwhile).
  void passivate(std::int64_t wake_at);

  void on_passive(std::int32_t seq, bool ok, std::int64_t wake_at,
                  std::uint64_t seen);

  /// Leaves memory after a passivation write, unless woken meanwhile.
  void leave_or_stay(std::int32_t seq, std::int64_t wake_at,
                     std::uint64_t seen);

  /// Clears the run's wake-up time (it stays in memory after all). If that
  /// fails, the store says "passivated" of a run in memory, which a crash
  /// would then leave asleep: the run restarts from the store instead
  /// (housekeeping revives it, and reviving clears the time).
  void stay_awake();

  /// Stops the actor and has housekeeping revive the run from the store.
  void restart();

  /// A handler threw: stops as `stop` does and has housekeeping revive
  /// the run, counted as a recovery.
  void crash();

  /// Handles one message (see `receive`).
  void handle(run_message& m);

  /// The wake-up time is cleared; a passivation that waited for it goes on.
  void on_awake();

  /// A cancellation: `ended` (the store ended the run CANCELLED) stops
  /// it; otherwise it is a saga's signal, observed at once if it waits, or
  /// at its next durable operation.
  void on_cancel(bool ended);

  /// Whether a cancellation is observed now (a saga going forward, or
  /// done, that was asked to cancel).
  bool cancel_observable() const;

  /// A saga asked to cancel: cuts a sleep short or ends a wait with the
  /// cancellation, when nothing about it is in flight (else the answer in
  /// flight observes it).
  void interrupt();

  /// Ends the operation in flight with the cancellation (not recorded: on
  /// replay the same operation observes it again, the request being
  /// durable).
  void cancel_operation();

  /// Runs one attempt of the operation in flight on the step executor.
  void dispatch();
  /// `dispatch` of a step: its body on a step thread (this one, if it ran
  /// the last step and no other run's step waits).
  void dispatch_step(std::int32_t seq);

  /// Stores the delivery in flight together with its checkpoint (off the
  /// actor: exactly once), then wakes the run it went to.
  void deliver();

  std::chrono::milliseconds retry_delay() const;

  void on_outcome(std::int32_t seq, persistence::outcome kind,
                  std::string payload, std::string error, bool checkpointed);

  /// Returns the journal entry of the operation in flight, outcome unset.
  persistence::journal_entry entry_for(std::int32_t seq) const;

  /// A final outcome, committed by the journal writer (see `checkpoint`).
  void on_durable(std::int32_t seq, std::int32_t ack, std::int32_t result,
                  std::string payload, std::string error);

  void on_retry(std::int32_t seq);

  /// Returns true if the write was committed; otherwise stops the actor,
  /// leaving the run to its new owner (rejected) or to recovery (failed).
  bool write_committed(std::int32_t ack, const char* what);

  void lost_ownership();

  /// Hands the durable outcome to the coroutine and lets it run on.
  void resume_with(persistence::journal_entry e);

  void after_resume();

  /// Records the run's final status; the actor ends once it committed.
  void finish();

  void on_ended(std::int32_t ack);

  void stop(std::optional<run_outcome> outcome);
  /// Tells a parent (here or in another process) that this run ended.
  void wake_parent();

  /// Quits, unless a body still runs: then once its reply arrives (the
  /// frame it may touch must outlive it).
  void leave();

  /// Returns whether `m` is the reply of the body in flight (and notes
  /// that the body is done).
  bool body_replied(const run_message& m);

  void start_code();
  /// Runs `code`, a handler its host started, to its first suspension.
  void start_handler(std::unique_ptr<run_driver> code);
};

/// Returns whether `code` means the store went away (past its retry budget)
/// rather than refused: the run restarts from the store once it answers
/// instead of spending an attempt of its retry policy.
bool outage(errc code);

/// Sends `m` to the execution behind `to`.
inline void tell(const mailbox& to, run_message m) {
  to->tell(std::move(m));
}

inline void send_signal(const mailbox& to, run_signal kind, std::int32_t seq) {
  tell(to, signalled{kind, seq});
}

/// A step attempt's outcome, back to its execution.
inline void send_outcome(const mailbox& to, std::int32_t seq,
                         persistence::outcome o, std::string payload,
                         std::string error, bool checkpointed) {
  tell(to, attempt_ended{seq, o, checkpointed, std::move(payload),
                         std::move(error)});
}

/// Hands a final outcome to the journal writer; after the commit, the
/// committing thread tells the execution behind `to` (a
/// `checkpoint_committed` with the outcome). Called on the step executor
/// (`on_step_thread`: it may commit itself) and on the host alike.
void checkpoint(persistence::journal_writer& writer, const mailbox& to,
                persistence::fence owner, persistence::journal_entry e,
                bool on_step_thread = false);

} // namespace perdure::detail
