#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::persistence {

/// What reaches runs from outside their code: awakeable and promise
/// resolutions, messages, events, and the notices that announce them. One
/// role of `store`.
class delivery_store {
public:
  virtual ~delivery_store() = default;

  /// Stores the outcome of awakeable `r.id` (created by journal entry
  /// `r.run_id`/`r.seq`, kind `awakeable`; `r.seq` -1: a promise of run
  /// `r.run_id`, which need only exist) and, if the run is passivated,
  /// marks it `delivered_while_passivated` so that recovery and the sweep
  /// bring it back. The first outcome stays.
  virtual resolve_result resolve(const resolution& r) = 0;

  /// Makes delivery `d` (a message, or a resolution as `resolve` stores
  /// it) and `checkpoint` (of run `checkpoint.run_id`, fenced by `owner`)
  /// durable in one transaction: a workflow's delivery happens once. One
  /// that cannot happen (no such run, an unknown or already completed id)
  /// is recorded as the checkpoint's terminal error. Returns the
  /// checkpoint as recorded (also when it was recorded before: an in-doubt
  /// commit retried), or nothing if the fence rejected it.
  virtual std::optional<journal_entry>
  deliver(const fence& owner, journal_entry checkpoint, const delivery& d) = 0;

  /// Returns the stored outcome of awakeable `id`, if any.
  virtual std::optional<resolution> get_resolution(std::string_view id) = 0;

  /// Tells every process listening on this database (`delivery_listener`)
  /// `payload` (an encoded `notice`), after the current transaction.
  virtual void notify(std::string_view payload) = 0;

  /// `notify` of notice `n`.
  void notify(const notice& n) { notify(n.encode()); }

  /// Returns the PENDING runs of `executor` delivered to while passivated
  /// (`delivered_while_passivated`): a sweep revives those not in memory.
  virtual std::vector<std::string> awake_runs(std::string_view executor) = 0;

  /// Returns how many PENDING runs and invocations of `executor` should be
  /// in its memory at `now_ms` (not passivated, or due): one index range,
  /// the cheap half of the stranded-work check.
  virtual std::int64_t count_awake_pending(std::string_view executor,
                                           std::int64_t now_ms)
    = 0;

  /// Returns those runs and invocations (the check's second half, only
  /// when the count says something is missing).
  virtual std::vector<awake_pending>
  list_awake_pending(std::string_view executor, std::int64_t now_ms) = 0;

  /// Returns the sagas of `executor` asked to cancel and still going
  /// forward: a sweep signals them again (a notice may have been lost).
  virtual std::vector<std::string> signalled_sagas(std::string_view executor)
    = 0;


  /// Queues `payload` for run `run_id` on `topic` and, if the run is
  /// passivated, marks it as `resolve` does. Returns false if there is no
  /// such run.
  virtual bool send_message(std::string_view run_id, std::string_view topic,
                            std::string_view payload, std::int64_t at_ms)
    = 0;

  /// Returns the first message to `run_id` on `topic` after message id
  /// `after`, if any.
  virtual std::optional<message> next_message(std::string_view run_id,
                                              std::string_view topic,
                                              std::int64_t after)
    = 0;

  /// Publishes event `key` = `value` of run `checkpoint.run_id` together
  /// with `checkpoint` (kind `event`, payload `value`), in one transaction,
  /// fenced. Returns the checkpoint as recorded (an earlier one at its index
  /// stands, and publishes nothing), or nothing if fenced.
  virtual std::optional<journal_entry> record_event(const fence& owner,
                                                    journal_entry checkpoint,
                                                    const std::string& key,
                                                    const std::string& value)
    = 0;

  /// Records that saga run `checkpoint.run_id` entered phase `phase`
  /// (`saga_phase`) together with `checkpoint` (kind `phase`, payload
  /// `phase`), in one transaction, fenced: a cancellation either sees the
  /// phase or ends the run before it. Returns as `record_event` does.
  virtual std::optional<journal_entry> record_phase(const fence& owner,
                                                    journal_entry checkpoint,
                                                    const std::string& phase)
    = 0;

  /// Returns the value of event `key` of run `run_id`, if published.
  virtual std::optional<std::string> get_event(std::string_view run_id,
                                               std::string_view key)
    = 0;
};

} // namespace perdure::persistence
