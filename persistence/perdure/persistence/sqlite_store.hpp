#pragma once

#include <map>
#include <memory>
#include <string>

#include "perdure/persistence/sql_store.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace perdure::persistence {

namespace detail {
struct heads_read;
struct queue_candidate;
struct queue_choice;
struct queue_load;
} // namespace detail

/// Calls `observer` with the text of each statement any SQLite store of
/// this process prepares from now on (once per store and text; null:
/// none). For tests that check every statement's query plan.
void observe_sqlite_statements(void (*observer)(const std::string& sql));

/// The embedded default: one SQLite file in WAL mode, for development and
/// single-process use. Each instance owns one connection.
class sqlite_store final : public sql_store {
public:
  /// Opens (creating if needed) the database file at `path`.
  sqlite_store(std::string path, std::chrono::milliseconds retry_budget);
  ~sqlite_store() override;

  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  const char* dialect() const noexcept override {
    return "sqlite";
  }

  void migrate() override;
  create_result create_run(const run_record& run) override;
  std::optional<create_result> create_child(const fence& parent,
                                            const run_record& child) override;
  std::optional<run_record> claim_run(std::string_view id,
                                      std::string_view executor,
                                      const claim_filter& filter,
                                      bool count_attempt,
                                      bool new_epoch) override;
  std::int64_t acquire_lease(const lease_request& r) override;
  std::optional<lease_renewal> renew_lease(std::string_view executor,
                                           std::int64_t epoch) override;
  bool lapse_executor(std::string_view id) override;
  void release_lease(std::string_view executor, std::int64_t epoch) override;
  std::vector<run_record> take_over(std::string_view executor,
                                    const claim_filter& filter,
                                    std::optional<std::string_view> only,
                                    std::int64_t now_ms) override;
  std::vector<cancelled_run>
  cancel_run(std::string_view run_id, std::int64_t at_ms,
             std::optional<std::int64_t> deadline_ms) override;
  std::vector<cancelled_run>
  cancel_runs(const std::vector<std::string>& run_ids,
              std::int64_t at_ms) override;
  void notify(std::string_view payload) override;
  using delivery_store::notify;
  batch_result write_batch(const persistence::write_batch& batch) override;

  /// Returns the notices (`notify`) with an id above `after`, oldest
  /// first, as (id, payload); `after` -1: none, only the newest id (a
  /// listener starts from there).
  std::vector<std::pair<std::int64_t, std::string>>
  notices_after(std::int64_t after);

  std::optional<claimed_object>
  claim_object(std::string_view type, std::string_view key,
               std::string_view executor,
               const object_claim_filter& can) override;
  void release_object(std::string_view type, std::string_view key,
                      const fence& owner) override;
  std::optional<std::vector<run_record>>
  take_inbox(std::string_view type, std::string_view key,
             const fence& owner) override;
  std::vector<std::pair<std::string, std::string>>
  claimable_objects(std::string_view executor, const object_claim_filter& can,
                    std::int64_t limit, bool all_ours) override;

  create_result enqueue(const run_record& item) override;
  queue_claim claim_queued(const queue_claim_request& req) override;

protected:
  void read(const std::function<void(detail::sql_tx&)>& body) override;
  void write(const std::function<void(detail::sql_tx&)>& body) override;
  void autocommit(const std::function<void(detail::sql_tx&)>& body) override;

private:
  /// The SQL layer's transaction on this store's connection.
  class tx;
  /// A statement's current row, for the shared decoders.
  class row;
  /// Runs `body` in a write transaction, retried as every method is (for
  /// the methods written in other files).
  void in_write(const std::function<void()>& body);
  /// Runs `body` outside a transaction, retried.
  void retried(const std::function<void()>& body);
  /// Stores notice `payload` (inside the caller's transaction).
  void notice_in(std::string_view payload);
  /// The key was given up by `executor`: the invocations it held go back
  /// to ENQUEUED, and every process is told (on commit).
  void requeue_released(std::string_view type, std::string_view key,
                        std::string_view executor);
  class statement;

  statement& prepare(const std::string& sql);
  void exec(const char* sql);
  template <class F>
  auto with_retry(F&& attempt);
  template <class F>
  auto in_transaction(F&& body);
  bool fenced_ok(const std::string& run_id, const fence& owner);
  /// Moves the PENDING runs matching SQL condition `which` (its ?1 bound
  /// to `arg`) that `filter` admits to `executor`, epoch + 1.
  std::vector<run_record> claim_where(const std::string& which,
                                      std::string_view arg,
                                      const claim_filter& filter,
                                      std::string_view executor,
                                      std::int64_t now_ms, bool adopting);
  bool insert_entry(const journal_entry& entry);
  std::optional<journal_entry> recorded_entry(const std::string& run_id,
                                              std::int32_t seq);
  bool insert_run(const run_record& run, inserted_run* out = nullptr);
  /// Writes run `c.run_id`'s final status if `c.owner` still holds it
  /// (and marks a passivated parent); returns whether it did.
  bool complete_run(const completion_write& c);
  /// Ends invocation `i` if its key and run are still its owner's.
  bool commit_invocation(const invocation_commit& i);
  /// Moves the key's ENQUEUED invocations and its PENDING ones (all, or
  /// those under another owner) under `owner` as PENDING; returns them,
  /// oldest first.
  std::vector<run_record> take_invocations(std::string_view type,
                                           std::string_view key,
                                           const fence& owner,
                                           bool all_pending);
  run_record read_run_row(std::string_view id);
  void mark_parent_delivered(std::string_view run_id, std::int64_t at_ms);
  /// `cancel_run`'s work, inside a transaction the caller opened.
  std::vector<cancelled_run>
  cancel_in_transaction(std::string_view run_id, std::int64_t at_ms,
                        std::optional<std::int64_t> deadline_ms);

  /// The database's clock (ms since the epoch).
  std::int64_t db_now_ms();
  /// What counts against a queue's limits now (see `claim_queued`).
  detail::queue_load queue_load_of(const queue_claim_request& req);
  /// The queue's first ready items by priority then age
  /// (`first_ready_to_read`), and partitions' heads in turn
  /// (`detail::read_heads_after`).
  std::vector<detail::queue_candidate>
  first_ready(const queue_claim_request& req);
  detail::heads_read
  partition_heads(const queue_claim_request& req, const std::string& from,
                  std::int64_t most,
                  std::vector<detail::queue_candidate>& heads);
  /// The candidates `sql` reads (?1 queue, ?2 now, ?3 `limit`, ?4
  /// `partition` if any, then the claim filter's parameters).
  std::vector<detail::queue_candidate>
  read_candidates(const queue_claim_request& req, const std::string& sql,
                  std::int64_t limit,
                  const std::optional<std::string>& partition = {});
  /// Claims the chosen items still ENQUEUED, counting their starts.
  void claim_chosen(const queue_claim_request& req,
                    const detail::queue_choice& choice,
                    const detail::queue_load& load, queue_claim& out);

  /// Checkpoints the write-ahead log and truncates it; true if it did.
  bool truncate_log();
  /// The log's auto-checkpoint size (pages) for the room on its disk.
  std::int64_t checkpoint_pages() const;

  std::string path_;
  std::chrono::milliseconds retry_budget_;
  /// The disk filled since the log was last truncated.
  bool was_full_ = false;
  /// The file lock of the runtime this store holds the lease for.
  int lease_fd_ = -1;
  sqlite3* db_ = nullptr;
  std::map<std::string, std::unique_ptr<statement>> statements_;
  /// The SQL layer's statements by name, as rewritten for SQLite.
  std::map<std::string, std::string> rewritten_;
};

} // namespace perdure::persistence
