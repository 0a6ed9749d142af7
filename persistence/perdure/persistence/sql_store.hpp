#pragma once

// The store operations that are the same SQL on both backends, written
// once over the SQL layer (detail/sql/): canonical PostgreSQL-syntax SQL,
// run through a small driver seam (`sql_tx`). The two stores derive from
// it and keep only what is backend-specific by nature (leases, notices,
// the group-commit batch, migrations) or not moved yet.

#include <functional>

#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

namespace detail {
class sql_tx;
} // namespace detail

class sql_store : public store {
public:
  int schema_version() override;
  std::optional<run_record> get_run(std::string_view id) override;
  std::vector<run_record>
  get_runs(const std::vector<std::string>& ids) override;
  std::optional<resolution> get_resolution(std::string_view id) override;
  std::vector<std::string> awake_runs(std::string_view executor) override;
  std::int64_t count_awake_pending(std::string_view executor,
                                   std::int64_t now_ms) override;
  std::vector<awake_pending>
  list_awake_pending(std::string_view executor, std::int64_t now_ms) override;
  std::vector<std::string> signalled_sagas(std::string_view executor) override;
  std::optional<message> next_message(std::string_view run_id,
                                      std::string_view topic,
                                      std::int64_t after) override;
  std::optional<std::string> get_event(std::string_view run_id,
                                       std::string_view key) override;
  std::vector<journal_entry>
  load_journals(const std::vector<std::string>& run_ids) override;
  run_page list_runs(const run_filter& filter) override;
  std::optional<object_record> get_object(std::string_view type,
                                          std::string_view key) override;
  std::vector<std::string> list_object_keys(std::string_view type,
                                            std::string_view after,
                                            std::int64_t limit) override;
  bool set_wake_at(const fence& owner, std::string_view run_id,
                   std::optional<std::int64_t> wake_at_ms) override;
  std::vector<run_record> claim_pending_runs(std::string_view executor,
                                             const claim_filter& filter,
                                             std::int64_t now_ms) override;
  std::int64_t release_unclaimable(std::string_view executor,
                                   const claim_filter& filter) override;
  resume_outcome resume_run(std::string_view run_id,
                            std::optional<std::string_view> app_version,
                            std::int64_t at_ms,
                            std::string_view reason) override;
  bool release_run(const fence& owner, std::string_view run_id) override;
  fork_outcome fork_run(const fork_request& req) override;
  void note_version(std::string_view version, std::int64_t at_ms) override;
  std::vector<version_report> versions() override;
  std::vector<executor_info> list_executors() override;
  store_gauges refresh_store_gauges(std::int64_t now_ms,
                                    std::int64_t interval_ms,
                                    const std::string& by) override;
  std::vector<queue_info> list_queues() override;
  std::int64_t move_runs(std::string_view from, std::string_view to,
                         std::int64_t at_ms, std::string_view reason) override;
  std::vector<run_event> run_events(std::string_view run_id) override;
  bool block_run(const fence& owner, std::string_view run_id,
                 std::string_view why, std::int64_t code_since_ms,
                 std::int64_t at_ms) override;
  std::vector<run_record> claim_blocked(std::string_view executor,
                                        const claim_filter& filter,
                                        std::int64_t code_since_ms,
                                        std::int64_t limit) override;
  std::int64_t count_unclaimable(std::string_view executor,
                                 const claim_filter& filter) override;

  // -- deliveries and fenced writes (sql_deliveries.cpp) -------------------------

  resolve_result resolve(const resolution& r) override;
  std::optional<journal_entry> deliver(const fence& owner,
                                       journal_entry checkpoint,
                                       const delivery& d) override;
  bool send_message(std::string_view run_id, std::string_view topic,
                    std::string_view payload, std::int64_t at_ms) override;
  std::optional<journal_entry> record_event(const fence& owner,
                                            journal_entry checkpoint,
                                            const std::string& key,
                                            const std::string& value) override;
  std::optional<journal_entry> record_phase(const fence& owner,
                                            journal_entry checkpoint,
                                            const std::string& phase) override;
  std::optional<journal_entry>
  run_transaction(const fence& owner, journal_entry checkpoint,
                  const std::function<std::string(sql_session&)>& body) override;

  // -- queues (sql_queues.cpp) ---------------------------------------------------

  void define_queue(const queue_definition& q) override;
  void record_queue_starts(const std::vector<std::string>& queues) override;
  void restamp_queue_starts(std::string_view queue, std::int64_t stamped_ms,
                            std::int64_t count) override;
  std::vector<std::pair<std::string, std::int64_t>>
  queued_heads(const std::vector<std::string>& queues) override;
  bool retry_item(const fence& owner, std::string_view id,
                  std::int64_t not_before_ms, const std::string& error,
                  std::int64_t at_ms) override;
  std::optional<run_record> requeue(std::string_view id, std::int64_t at_ms,
                                    std::string_view reason) override;
  queue_stats count_queue(std::string_view queue,
                          std::int64_t now_ms) override;

  // -- schedules (sql_schedules.cpp) ---------------------------------------------

  bool create_schedule(const schedule_record& s) override;
  bool update_schedule(const schedule_record& s) override;
  bool set_schedule_paused(std::string_view name, bool paused,
                           std::optional<std::int64_t> next_tick_ms,
                           std::optional<std::int64_t> due_ms,
                           std::int64_t at_ms) override;
  bool remove_schedule(std::string_view name) override;
  std::optional<schedule_record> get_schedule(std::string_view name) override;
  std::vector<schedule_record> list_schedules() override;
  std::optional<std::int64_t> next_schedule_due() override;
  std::vector<schedule_decision>
  fire_schedules(std::int64_t now_ms, std::int64_t limit,
                 const schedule_planner& plan) override;
  std::optional<std::int64_t>
  start_schedule_runs(std::string_view name,
                      const std::vector<schedule_decision::start>& starts,
                      std::int64_t at_ms) override;

  // -- retention (sql_retention.cpp) ---------------------------------------------

  bool claim_retention(std::string_view holder, std::int64_t now_ms,
                       std::int64_t until_ms) override;
  void release_retention(std::string_view holder) override;
  retention_progress retention_state() override;
  std::vector<std::string> retained_workflows(bool tombstones) override;
  std::vector<run_record> collectable_runs(std::string_view name,
                                           std::string_view status,
                                           std::int64_t before_ms,
                                           std::int64_t limit, bool whole,
                                           std::int64_t after_ms,
                                           std::string_view after_id) override;
  std::vector<std::string> collect_runs(const std::vector<std::string>& ids,
                                        std::int64_t at_ms,
                                        std::int64_t* rows) override;
  std::int64_t expire_tombstones(std::string_view name,
                                 std::string_view status,
                                 std::int64_t before_ms, std::int64_t limit,
                                 std::int64_t at_ms) override;

protected:
  /// Runs `body` with a transaction that only reads (or autocommit),
  /// retried on transient failures as every store method is.
  virtual void read(const std::function<void(detail::sql_tx&)>& body) = 0;
  /// Runs `body` in a write transaction (committed when it returns),
  /// retried as a whole.
  virtual void write(const std::function<void(detail::sql_tx&)>& body) = 0;
  /// Runs `body`'s statements each on its own (autocommit), retried.
  virtual void autocommit(const std::function<void(detail::sql_tx&)>& body)
    = 0;
  /// The lease epoch this store's fenced writes carry (0: unchecked; one
  /// runtime per file on SQLite holds its lease by a file lock).
  virtual std::int64_t lease_epoch() const noexcept {
    return 0;
  }

  /// A checkpoint with a write of its own, fenced: if `owner` still holds
  /// the run and nothing is recorded at the checkpoint's index, `body`
  /// writes (and may fill the entry's payload and outcome) and the entry
  /// is appended, in one transaction (`first` runs before the fence).
  /// Returns the entry as stored (the earlier one if recorded before), or
  /// nothing if the run is not `owner`'s.
  std::optional<journal_entry>
  fenced(const fence& owner, journal_entry checkpoint,
         const std::function<void(detail::sql_tx&, journal_entry&)>& body,
         const std::function<void(detail::sql_tx&)>& first = nullptr);
};

} // namespace perdure::persistence
