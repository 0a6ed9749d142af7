#pragma once

// The rows the store reads and writes, as plain values. Payloads are opaque
// encoded bytes (see codec.hpp); the store never looks inside them.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "perdure/error.hpp"
#include "perdure/run_listing.hpp"
#include "perdure/run_status.hpp"

namespace perdure::persistence {

/// Identifies the owner of a run. Every checkpoint carries it, and the store
/// rejects a write whose fence is not the run's current one: a process that
/// lost the run (a zombie) can never record anything for it again.
struct fence {
  std::string executor;
  std::int64_t epoch = 0;

  friend bool operator==(const fence&, const fence&) = default;
};

/// Which runs a process may claim (recover, take over, adopt): runs of the
/// workflows it registered, recorded with no app version or with its own.
/// A run it cannot run stays PENDING for a process that can.
struct claim_filter {
  /// The workflows it registered; and for each patch its code declares,
  /// the workflow's name, '\x1e', the patch (a run that took a patch
  /// not listed is left to a process that knows it).
  std::vector<std::string> names;
  std::string app_version;

  /// Returns whether a run of workflow `name` recorded with `version` may
  /// be claimed.
  bool admits(const std::string& name, const std::string& version) const {
    return (version.empty() || version == app_version)
           && std::find(names.begin(), names.end(), name) != names.end();
  }

  /// `admits`, for a run that took `patches` (each followed by '\x1f').
  bool admits(const std::string& name, const std::string& version,
              std::string_view patches) const;
};

/// Which invocations of virtual objects a process may run: those of a
/// handler it registered for their type, recorded with no app version or
/// with its own. A key is claimed only if its oldest unended invocation is
/// one of them (calls of a key run in order); else it is left, or given up
/// by its holder, for a process that can run it.
struct run_record;

struct object_claim_filter {
  /// The registered handlers of each registered type.
  std::vector<std::pair<std::string, std::vector<std::string>>> types;
  std::string app_version;

  /// Returns the handlers registered for `type` (none if it is not).
  const std::vector<std::string>& handlers(std::string_view type) const {
    static const std::vector<std::string> none;
    for (auto& [t, h] : types)
      if (t == type)
        return h;
    return none;
  }

  /// Returns whether a call of `handler` of `type` recorded with `version`
  /// may run here.
  bool admits(std::string_view type, std::string_view handler,
              std::string_view version) const;

  /// Returns whether invocation `run` may run here.
  bool admits(const run_record& run) const;
};

/// The executor id a run has while no runtime owns it yet (started by a
/// client): any runtime that registered its workflow adopts it.
inline constexpr const char* unowned_executor = "";

/// What `store::acquire_lease` needs to know.
struct lease_request {
  std::string executor;
  /// This runtime instance (tells its rows from a predecessor's).
  std::string instance;
  std::string app_version;
  /// After this long without a heartbeat the lease lapses even if its
  /// holder still looks alive (a stalled or cut-off process).
  std::int64_t timeout_ms = 10'000;
};

/// What a heartbeat of a held lease found (see `store::renew_lease`).
struct lease_renewal {
  /// Other executors whose leases lapsed.
  std::vector<std::string> lapsed;
  /// Whether this connection holds the id's lock (PostgreSQL; a holder
  /// without it is declared lapsed after a second without heartbeats, not
  /// after its whole timeout).
  bool locked = true;
  /// Whether the renewal had to lock again first (its connection had been
  /// cut: every holder's likely was, so their heartbeats look old too).
  bool relocked = false;
};

/// The wake-up time a delivery (a resolution, a message, a child's end)
/// gives a passivated run: due at once. Only deliveries write it, so the
/// runs to bring back are found by it alone (an index of their own). The
/// stores' SQL spells it 0.
constexpr std::int64_t delivered_while_passivated = 0;

/// One workflow run.
struct run_record {
  std::string id;
  std::string name;
  run_status status = run_status::pending;
  std::string inputs;
  std::optional<std::string> output;
  std::optional<std::string> error;
  fence owner;
  std::int32_t recovery_attempts = 0;
  std::string app_version;
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;
  /// Null while the run is (or should be) in memory. Set while it is
  /// passivated: nothing needs it in memory before this time (its timer)
  /// unless something is delivered to it, which sets it to
  /// `delivered_while_passivated` so that the owner's sweep and recovery
  /// bring it back.
  std::optional<std::int64_t> wake_at_ms;
  /// The run that started this one as its child, if any.
  std::optional<std::string> parent_id;
  /// When the run is cancelled if it has not ended (ms since the epoch).
  std::optional<std::int64_t> deadline_ms;
  /// Set for an invocation of a virtual object's handler: the object's
  /// type and key (the run's name is the handler's). Invocations are the
  /// object's inbox: ENQUEUED until the key's owner takes them, then
  /// PENDING under the key's owner and epoch, in the order they were
  /// stored. Recovery and takeover of runs leave them to their object.
  std::string object_type;
  std::string object_key;
  /// An invocation's place in its key's inbox (the order it was stored),
  /// where known: read with the inbox, or returned by its creation; 0 if
  /// not known.
  std::int64_t inbox_seq = 0;
  /// The keys held by the calls this run serves, outermost first (each
  /// `type \x1f key`, joined by `\x1e`): calling one of them would wait
  /// for itself.
  std::string call_chain;
  /// The W3C `traceparent` the run was started in (its starter's, or the
  /// span of the run that started it); empty: none (its trace id is then
  /// derived from its id).
  std::string traceparent;
  /// Set once retention collected the run (perdure/retention): its inputs,
  /// output, error and journal are gone; its id and how it ended remain,
  /// a tombstone, until its policy lets the id go.
  std::optional<std::int64_t> collected_at_ms;
  /// A saga's phase (`saga_phase`), empty for any other run: cancelling a
  /// saga signals it instead of ending it.
  std::string saga_phase;
  /// Whether the run was asked to cancel: a saga observes it at its next
  /// durable operation, or at once while it waits.
  bool cancel_requested = false;
  /// Creation only (`create_child`), never stored: the run undoes saga run
  /// `undo_of`, which completed. It takes that run's inputs and its journal
  /// up to its DONE phase, asked to cancel: it replays, then compensates.
  std::string undo_of;
  /// Set for a queue item: its queue (empty for any other run). An item
  /// is ENQUEUED until a runtime claims it within the queue's limits, then
  /// PENDING like any run.
  std::string queue_name;
  /// Claimed lowest first, then in the order stored.
  std::int32_t priority = 0;
  /// The partition (e.g. a customer) its queue's per-partition limit counts
  /// it in; empty: the default one.
  std::string partition_key;
  /// While an item with this id is queued or running in its queue, another
  /// enqueue with it returns that item.
  std::string dedup_id;
  /// Not claimed before this time (ms since the epoch, the enqueuer's
  /// clock): a delayed enqueue, or a failed attempt's backoff.
  std::optional<std::int64_t> not_before_ms;
  /// When its last claim started it (the database's clock): what the rate
  /// limit counts.
  std::optional<std::int64_t> started_at_ms;
  /// How many times it was claimed (attempts begun).
  std::int32_t attempts = 0;
  /// Enqueue only, never read back: the item is cancelled if it has not
  /// ended this long after it starts (each claim sets its deadline).
  std::optional<std::int64_t> timeout_ms;
};

/// The phases of a saga run, as stored in `runs.saga_phase`.
namespace saga_phase {
/// Going forward: a cancellation is signalled, the saga compensates.
inline constexpr const char* forward = "FORWARD";
/// Undoing its completed steps: reported as COMPENSATING; a cancellation
/// changes nothing.
inline constexpr const char* compensating = "COMPENSATING";
/// Its forward part completed: too late to cancel it.
inline constexpr const char* done = "DONE";
} // namespace saga_phase

/// A PENDING run or invocation of an executor that should be in its
/// memory (not passivated, or due): what the stranded-work check compares
/// with what the process holds.
struct awake_pending {
  std::string id;
  std::int64_t epoch = 0;
  /// Set for an invocation (its key's actor holds it).
  std::string object_type;
  std::string object_key;
};

/// A cancellation's effect on one run of the cancelled tree.
struct cancelled_run {
  std::string id;
  /// Signalled (a saga going forward) rather than ended CANCELLED.
  bool signalled = false;
};

/// A virtual object's durable row: its state (empty before its first
/// commit) and the executor holding its key, at the fencing epoch that
/// every state write and every invocation of the key carries.
struct object_record {
  std::string type;
  std::string key;
  std::string state;
  std::int64_t version = 0;
  fence owner;
  std::int64_t updated_at_ms = 0;
};

/// A key taken by `object_store::claim_object`: the object and its inbox
/// (invocations not yet ended, oldest first, with their journals).
struct claimed_object {
  object_record object;
  std::vector<run_record> inbox;
};

/// What kind of durable operation a journal entry records. Replay compares
/// it, together with the name, against what the code does at that index.
enum class entry_kind : std::uint8_t {
  step,
  transaction,
  /// A durable sleep; the payload is the wake-up time (ms since the epoch).
  sleep,
  /// A wait's deadline, fixed when first reached (payload as for sleep).
  deadline,
  /// A child run started; the name is the child's id.
  child,
  /// An event published (`set_event`); the name is its key.
  event,
  /// An awakeable's creation; the name is its id.
  awakeable,
  /// The outcome of a wait (awakeable, promise, message, child's end or
  /// timeout); the payload says which (see `workflow_context`).
  await,
  /// A message this run sent (once); the name is its topic.
  send,
  /// An awakeable or promise this run completed (once).
  resolve,
  /// A saga's phase entered; the payload is the phase (`saga_phase`).
  phase,
  /// A patch the run took (`workflow_context::patched`); the name is the
  /// patch, the payload the index of the operation it came before. Kept
  /// apart from the operations: negative indexes (-2, -3, ...; -1 means
  /// "no index" to the runtime).
  patch,
};

/// Returns the stored spelling of `x`.
const char* to_string(entry_kind x) noexcept;

/// Returns the kind spelled `str`, if any.
std::optional<entry_kind> parse_entry_kind(const std::string& str) noexcept;

/// How a recorded operation ended.
enum class outcome : std::uint8_t {
  /// Completed with `payload` as its result.
  value = 0,
  /// Failed after all retries; rethrown as `perdure::step_failed`.
  failed = 1,
  /// Failed with a `perdure::terminal_error`; rethrown as such.
  terminal = 2,
  /// Never stored: the run was cancelled before this operation (a saga
  /// observing a cancellation); rethrown as `perdure::cancelled_error`.
  cancelled = 3,
  /// Never stored: the row could not be read (an unknown kind, an outcome
  /// outside this enum, a malformed time); `error` names the row. The run
  /// it belongs to ends ERROR with that reason; other runs are untouched.
  unreadable = 255,
};


/// One checkpoint in a run's journal.
struct journal_entry {
  std::string run_id;
  std::int32_t seq = 0;
  entry_kind kind = entry_kind::step;
  std::string name;
  persistence::outcome outcome = outcome::value;
  std::string payload;
  std::string error;
  std::int64_t created_at_ms = 0;
};

/// Returns the entry read from a journal row whose kind is spelled `kind`
/// and whose outcome is stored as `stored_outcome`; a row Perdure cannot
/// have written comes back `outcome::unreadable`, its `error` naming it.
/// Shared by both stores, so one bad row means the same on each.
journal_entry read_journal_row(std::string run_id, std::int64_t seq,
                               const std::string& kind, std::string name,
                               std::int64_t stored_outcome,
                               std::string payload, std::string error,
                               std::int64_t created_at_ms);

/// Returns the wake-up time recorded in a `sleep` or `deadline` entry.
std::int64_t recorded_time(const journal_entry& e);

/// A fenced journal append.
struct append_write {
  fence owner;
  journal_entry entry;
};

/// A fenced final status of a run.
struct completion_write {
  std::string run_id;
  fence owner;
  run_status status = run_status::success;
  std::optional<std::string> output;
  std::optional<std::string> error;
  std::int64_t at_ms = 0;
};

/// The end of an invocation: its final status and the object's new state
/// (none: unchanged, as after a failure or a read-only handler), committed
/// together, fenced by the key's owner (`completion.owner`, which is also
/// the invocation's): the invocation's effect applies exactly once.
struct invocation_commit {
  completion_write completion;
  std::string object_type;
  std::string object_key;
  std::optional<std::string> state;
  /// The object's version the invocation ran on. The key's invocations may
  /// commit in a pipeline (the next runs while this one commits): an
  /// exclusive one (`checks_base`) whose predecessor did not commit is
  /// refused, with a state or without (its outcome may rest on that state).
  std::int64_t base_version = 0;
  bool checks_base = false;
};

/// One write of the group-commit writer. A new kind of write is one more
/// alternative here, one more list in `write_batch` (`add`, `single`,
/// `batch_result::took_effect`), and its statement in each store.
using write = std::variant<run_record, append_write, completion_write,
                           invocation_commit>;

/// Returns the index of `T` among the alternatives of `write`.
template <class T>
constexpr std::size_t kind_of() {
  return []<class... Ts>(std::variant<Ts...>*) {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    std::size_t i = 0;
    while (i < sizeof...(Ts) && !same[i])
      ++i;
    return i;
  }(static_cast<write*>(nullptr));
}

/// Writes committed together in one transaction by `store::write_batch`:
/// run creations, journal appends and run completions.
struct write_batch {
  std::vector<run_record> creates;
  std::vector<append_write> appends;
  std::vector<completion_write> completions;
  std::vector<invocation_commit> invocations;

  /// Where a write went: its kind (its index in `write`) and its place
  /// among the batch's writes of that kind.
  struct slot {
    std::size_t kind = 0;
    std::size_t index = 0;
  };

  /// Adds `w` to its list; returns where it went.
  slot add(write w);

  /// Returns the write in `s` alone, as a batch of one (a batch the
  /// database refused is committed write by write).
  write_batch single(slot s) const;

  bool empty() const noexcept {
    return creates.empty() && appends.empty() && completions.empty()
           && invocations.empty();
  }
};

/// A run a batch created, as the store reports it: stored ENQUEUED, and its
/// inbox place (see `batch_result`).
struct inserted_run {
  bool enqueued = false;
  std::int64_t inbox_seq = 0;
};

/// Which writes of a batch took effect. `created[i]` is false if the id
/// was taken; `appends[i]` and `completions[i]` are false if the fence
/// rejected them. An append to an index that already holds an outcome
/// (an in-doubt write sent again, or a second copy of the run) writes
/// nothing: `recorded[i]` is then the entry stored there, which stands
/// (`recorded` is empty when no append met one).
struct batch_result {
  std::vector<bool> created;
  /// `enqueued[i]`: creation i, an invocation asked PENDING under its key's
  /// epoch (to hand to the key's actor in memory), was stored ENQUEUED
  /// instead: older calls of the key wait unseen by that actor, so it
  /// reaches the actor through the inbox, after them (per-key order).
  std::vector<bool> enqueued;
  /// `inbox_seqs[i]`: creation i's `run_record::inbox_seq` (0 if none).
  std::vector<std::int64_t> inbox_seqs;
  std::vector<bool> appends;
  std::vector<bool> completions;
  std::vector<bool> invocations;
  /// Not `none` when the invocations' ends failed after the batch's other
  /// writes committed (PostgreSQL commits the two apart): the ends failed
  /// with this error, and the other writes stand as reported.
  errc invocations_failed = errc::none;
  std::vector<std::optional<journal_entry>> recorded;

  /// Returns whether the write in `s` took effect.
  bool took_effect(write_batch::slot s) const;
};

/// The outcome of an awakeable, delivered from outside the run.
struct resolution {
  std::string id;
  std::string run_id;
  std::int32_t seq = 0;
  outcome result = outcome::value;
  std::string payload;
  std::string error;
  std::int64_t at_ms = 0;
};

/// A message sent to a run on a topic; ids grow in sending order.
struct message {
  std::int64_t id = 0;
  std::string payload;
};

/// What `store::resolve` did.
enum class resolve_result : std::uint8_t {
  /// Stored; the run may now be woken.
  resolved,
  /// No awakeable with this id exists.
  unknown_id,
  /// It was resolved or rejected before; the first outcome stays.
  already_resolved,
};

/// A message a run sends to run `run_id` on `topic`.
struct outgoing_message {
  std::string run_id;
  std::string topic;
  std::string payload;
  std::int64_t at_ms = 0;
};

/// What a workflow delivers to another run, exactly once (see
/// `store::deliver`).
struct delivery {
  std::variant<outgoing_message, resolution> what;
  /// How errors name the receiver, e.g. "awakeable 'awk_1_x'".
  std::string target;

  /// Returns the run delivered to.
  const std::string& run_id() const noexcept {
    if (auto* m = std::get_if<outgoing_message>(&what))
      return m->run_id;
    return std::get<resolution>(what).run_id;
  }

  /// Sets `checkpoint`'s outcome to what storing the delivery gave
  /// (`stored`; a message to no run is `unknown_id`): a value, or a
  /// terminal error naming `target`.
  void settle(journal_entry& checkpoint, resolve_result stored) const;
};

/// What `store::create_run` found.
struct create_result {
  /// True if this call inserted the run.
  bool created = false;
  /// The run as stored (the existing one if `created` is false).
  run_record run;
};

/// Returns `ms` milliseconds since the epoch as a time point.
std::chrono::system_clock::time_point from_ms(std::int64_t ms);

/// A `run_filter` as the stores' listing queries take it: optional text
/// parameters (null: not filtered), the cursor taken apart. Shared by both
/// stores so that a cursor means the same on each.
struct listing_query {
  /// `status`: as reported (COMPENSATING); `stored_status`: as stored
  /// (PENDING), which an index can find.
  std::optional<std::string> status, stored_status, name, cursor_id,
    app_version, executor, parent_id, queue, object_type, object_key,
    id_prefix;
  std::optional<std::int64_t> after, before, cursor_at, ended_after,
    ended_before;
  bool unended = false;
  std::int64_t limit = 100;

  /// Throws `errc::invalid_argument` for a limit outside 1..1000 or a
  /// cursor no page returned.
  static listing_query from(const run_filter& f);

  /// Sets `page.next_cursor` if the page is full (more may follow).
  void finish(run_page& page) const;
};

} // namespace perdure::persistence
