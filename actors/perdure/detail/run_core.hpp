#pragma once

// The seam between workflow code (workflow_context, awaiters) and the actor
// that owns the run. Free of CAF, so public headers stay light.

#include <coroutine>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <functional>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "perdure/run_logger.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/persistence/records.hpp"
#include "perdure/retry_policy.hpp"
#include "perdure/sql_session.hpp"

namespace perdure::detail {

/// What one attempt of a step produced.
struct step_outcome {
  persistence::outcome result = persistence::outcome::value;
  std::string payload;
  std::string error;
};

/// A step's code, wrapped to encode its result and classify its exceptions.
using step_body = std::function<step_outcome()>;

/// A transactional step's code, wrapped to encode its result.
using transaction_body = std::function<std::string(sql_session&)>;

/// What a wait can be completed by.
struct wait_source {
  enum class kind : std::uint8_t {
    /// An awakeable or a promise: its resolution id.
    resolution,
    /// The next message on a topic: the topic.
    message,
    /// Another run's end (a child): its id.
    run,
  };
  kind what = kind::resolution;
  std::string key;
};

/// How a wait ended, as recorded in its journal entry's payload:
/// `<index>:<cursor>:<bytes>` (index -1: timed out; cursor: the message id).
struct wait_outcome {
  std::int32_t index = -1;
  std::int64_t cursor = 0;
  persistence::outcome result = persistence::outcome::value;
  std::string payload;
  std::string error;

  /// Returns the recorded form of the payload.
  std::string encode() const {
    return std::to_string(index) + ":" + std::to_string(cursor) + ":" + payload;
  }

  /// Reads a recorded wait entry.
  static wait_outcome decode(const persistence::journal_entry& e);
};

/// One durable operation the coroutine is about to perform.
struct operation {
  std::int32_t seq = 0;
  persistence::entry_kind kind = persistence::entry_kind::step;
  std::string name;
  step_body body;
  transaction_body tx_body;
  retry_policy policy;
  /// A sleep's wake-up time, or a wait's deadline (ms since the epoch; 0:
  /// none), fixed when first run.
  std::int64_t due_ms = 0;
  /// A wait's sources, in order of preference.
  std::vector<wait_source> sources;
  /// An event's value; a child's workflow name and inputs.
  std::string payload;
  std::string child_workflow;
  /// A call of an object's handler (`child_workflow`): the object, and
  /// whether the caller waits for it (`call`: it keeps holding its key).
  std::string object_type;
  std::string object_key;
  bool awaited = false;
  /// A child that undoes completed saga run `undo_of` (see
  /// `run_record::undo_of`).
  std::string undo_of;
  /// What a `send` or `resolve` delivers (shared: retries reuse it).
  std::shared_ptr<const persistence::delivery> delivery;
};

/// The run as seen by workflow code. Implemented by the run actor's state;
/// every member is called on that actor's turn only.
class run_core {
public:
  virtual ~run_core() = default;

  /// Returns the run's id.
  const std::string& run_id() const noexcept {
    return run_id_;
  }

  /// Returns the journal index of the next durable operation.
  std::int32_t next_seq() noexcept {
    if (jumps_)
      return next_seq_jumping();
    return next_seq_++;
  }

  /// Returns the journal index the next durable operation will take (what
  /// `next_seq` returns next), without taking it.
  std::int32_t peek_seq() const noexcept;

  /// Returns whether `seq` is already recorded (replay). Throws
  /// `perdure::error` with `errc::non_determinism`, and fails the run, if the
  /// recorded operation has another kind or name.
  bool replaying(std::int32_t seq, persistence::entry_kind kind,
                 const std::string& name);

  /// Performs `op` and resumes `h` once its outcome is durable (for a
  /// sleep: once it is due; for an await: once it was delivered).
  virtual void perform(operation op, std::coroutine_handle<> h) = 0;

  /// Returns the runtime clock's time, in ms since the epoch.
  virtual std::int64_t now_ms() const = 0;

  /// What `ctx.log()` writes through: the application's logger with this
  /// run's tags, or a silent one while the code replays its journal.
  virtual run_logger logger() {
    return {nullptr, {}};
  }

  /// The code passed a saga phase entry (live or on replay): the phase
  /// decides how a cancellation is taken from here on.
  virtual void phase_entered(const std::string& phase) {
    (void)phase;
  }

  /// Returns the recorded entry of `seq` (which `replaying` found).
  const persistence::journal_entry& recorded(std::int32_t seq) const {
    return recorded_->at(seq);
  }

  /// Returns the recorded entry of `seq`, or null.
  persistence::journal_entry* find_recorded(std::int32_t seq) {
    if (!recorded_)
      return nullptr;
    auto i = recorded_->find(seq);
    return i == recorded_->end() ? nullptr : &i->second;
  }

  /// Whether the code takes a patch here, and the marker to record first
  /// if it takes it for the first time (see `patched`).
  struct patch_decision {
    bool taken = false;
    std::optional<operation> marker;
  };

  /// Decides whether the code takes patch `name` here: a run that took it
  /// here before does; a run whose journal has another operation here
  /// passed this point under code without the patch and does not; a run
  /// here for the first time does, once `marker` is durable (the next
  /// operation may commit by another connection: it must not commit
  /// without it). Throws `invalid_argument` for a patch its workflow did
  /// not declare.
  patch_decision patched(const std::string& name);

  /// Records the outcome `e` (replay material, or what just became durable).
  void record_outcome(persistence::journal_entry e) {
    if (e.kind == persistence::entry_kind::patch) {
      if (e.outcome == persistence::outcome::value) // not a cancelled write
        took_patch(std::move(e));
      return;
    }
    if (!recorded_)
      recorded_ = std::make_unique<journal_map>();
    auto seq = e.seq;
    (*recorded_)[seq] = std::move(e);
  }

  /// Takes the journal read when the run starts: a retried or resumed
  /// run's entries sorted into what this attempt replays and what it
  /// carries (see `persistence::detail::new_attempt_marker`), patch
  /// markers noted, the rest recorded. An unreadable row sets `fatal`.
  void load_journal(std::vector<persistence::journal_entry> journal);

  /// Returns the next outcome an earlier attempt committed for
  /// transaction `name` (taken instead of a second commit), if any.
  std::optional<persistence::journal_entry>
  take_carried(const std::string& name);

  /// Removes and returns the recorded outcome of `seq`.
  persistence::journal_entry take(std::int32_t seq);

  /// Removes the recorded outcome of `seq`, if any.
  void forget(std::int32_t seq) {
    if (recorded_)
      recorded_->erase(seq);
  }

  /// Returns the id of the last message consumed on `topic` (0: none).
  std::int64_t consumed(const std::string& topic) const {
    for (auto& [t, id] : consumed_)
      if (t == topic)
        return id;
    return 0;
  }

  /// Notes that a wait consumed message `id` on `topic`.
  void consume(const std::string& topic, std::int64_t id) {
    for (auto& [t, last] : consumed_)
      if (t == topic) {
        last = std::max(last, id);
        return;
      }
    consumed_.emplace_back(topic, id);
  }

  /// Returns the encoding for new payloads.
  persistence::encoding payload_encoding() const noexcept {
    return encoding_;
  }

  /// Returns the largest payload accepted.
  std::size_t max_payload_bytes() const noexcept {
    return max_payload_;
  }

  /// While a shield lives, a saga's cancellation is not observed (a task
  /// step in flight finishes, and its compensation is known, first). Set
  /// and cleared by the code's position, so replay sees the same.
  void shield_cancellation(bool on) noexcept {
    cancel_shields_ += on ? 1 : -1;
  }

  /// Returns why the run must fail regardless of what its code does, or null.
  const std::string* fatal() const noexcept {
    return fatal_.get();
  }

protected:
  /// The code asks for `kind` `name` at `seq`, where the journal recorded
  /// `recorded` (called before the non-determinism error is thrown).
  virtual void diverged(std::int32_t seq, persistence::entry_kind kind,
                        const std::string& name,
                        const persistence::journal_entry& recorded) {
    (void)seq, (void)kind, (void)name, (void)recorded;
  }

  /// Whether the run's workflow declared patch `name` at registration.
  virtual bool declares_patch(const std::string& name) const = 0;
  /// Notes a patch marker read from the journal (or just durable).
  void took_patch(persistence::journal_entry e);

  /// The patches the run took: the patch, and the index of the operation
  /// it came before, in the order taken (their markers' indexes are -2,
  /// -3, ...: -1 means "no index" to the runtime). Allocated only for a run
  /// that took one: most never do, and a sleeping run's size counts.
  using patch_list = std::vector<std::pair<std::string, std::int32_t>>;
  std::unique_ptr<patch_list> patches_;
  std::string run_id_;
  std::int32_t next_seq_ = 0;
  /// Allocated only while there is something recorded: most of a sleeping
  /// run's life there is not.
  using journal_map = std::map<std::int32_t, persistence::journal_entry>;
  std::unique_ptr<journal_map> recorded_;
  std::unique_ptr<std::string> fatal_;
  /// Whether `fatal_` is a divergence of the code from the journal (what a
  /// deploy causes), not an unreadable row.
  bool diverged_ = false;
  /// Per topic, the last message consumed (few topics per run: a vector).
  std::vector<std::pair<std::string, std::int64_t>> consumed_;
  persistence::encoding encoding_ = persistence::encoding::json;
  std::size_t max_payload_ = 0;
  std::int32_t cancel_shields_ = 0;
  /// A retried queue item's indexes (see `persistence::detail::
  /// new_attempt_marker`): reaching `first`, the attempt goes on at
  /// `second`, past what earlier attempts used. Null for other runs.
  std::unique_ptr<std::vector<std::pair<std::int32_t, std::int32_t>>> jumps_;

  /// A retried item's (or resumed run's) transactional steps that
  /// committed in an earlier attempt, by name, in journal order: this
  /// attempt takes their results instead of committing again. Null for
  /// other runs.
  std::unique_ptr<
    std::unordered_map<std::string, std::deque<persistence::journal_entry>>>
    carried_;

private:
  std::int32_t next_seq_jumping() noexcept;
  void load_attempts(std::vector<persistence::journal_entry>& journal);
};

/// Holds off a saga's cancellation while it lives (see
/// `run_core::shield_cancellation`).
class [[nodiscard]] cancellation_shield {
public:
  explicit cancellation_shield(run_core& core) : core_(&core) {
    core_->shield_cancellation(true);
  }

  cancellation_shield(cancellation_shield&& other) noexcept
    : core_(std::exchange(other.core_, nullptr)) {
  }

  cancellation_shield(const cancellation_shield&) = delete;
  cancellation_shield& operator=(const cancellation_shield&) = delete;
  cancellation_shield& operator=(cancellation_shield&&) = delete;

  ~cancellation_shield() {
    if (core_)
      core_->shield_cancellation(false);
  }

private:
  run_core* core_;
};

/// Returns the value recorded in `e`, or throws what it recorded.
template <class T>
T unpack(const persistence::journal_entry& e);

} // namespace perdure::detail
