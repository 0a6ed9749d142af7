#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "perdure/persistence/sql_store.hpp"

namespace pqxx {
class transaction_base;
class result;
} // namespace pqxx

namespace perdure::persistence {

/// The production store: PostgreSQL through libpqxx. Each instance owns one
/// connection; several processes may share one database and schema.
class postgres_store final : public sql_store {
public:
  /// Connects to `opts.url` (a libpq URI or keyword string) and uses
  /// `opts.schema` (see `store_options`).
  explicit postgres_store(const store_options& opts);
  ~postgres_store() override;

  postgres_store(const postgres_store&) = delete;
  postgres_store& operator=(const postgres_store&) = delete;

  const char* dialect() const noexcept override {
    return "postgresql";
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
  std::int64_t lease_epoch() const noexcept override {
    return lease();
  }

private:
  /// Runs `body` in a transaction on this connection, retried as every
  /// method is (for the methods written in other files).
  void in_work(const std::function<void(pqxx::transaction_base&)>& body);
  /// Runs `body` with the SQL layer's transaction over a `Transaction`
  /// (read-only, read-write, or none), retried.
  template <class Transaction>
  void in_sql(const std::function<void(detail::sql_tx&)>& body);
  /// Runs `body`'s statements each on its own (no BEGIN/COMMIT), retried.
  void in_autocommit(
    const std::function<void(pqxx::transaction_base&)>& body);
  /// Batches with at least this many appends go through COPY.
  static constexpr std::size_t copy_threshold = 32;

  struct creation_arrays;

  /// What a batch's statements reported.
  struct batch_outcome {
    std::unordered_set<std::string> owned;    // <epoch>:<id> let through
    std::unordered_set<std::string> done;     // runs completed
    std::unordered_map<std::string, inserted_run> inserted; // runs created
    std::uint64_t appended = 0;               // journal rows inserted
  };
  /// Reads the rows of a write_batch statement into `out`.
  static void read_tagged(const pqxx::result& rows, batch_outcome& out);

  struct connection;

  void connect();
  void prepare_objects(connection& c, const std::string& s);
  void prepare_runs(connection& c, const std::string& s);
  void prepare_batches(connection& c, const std::string& s);
  /// The key was given up by `executor` (in `w`, which locked its row):
  /// the invocations it held go back to ENQUEUED, and every process is
  /// told (on commit).
  void requeue_released(pqxx::transaction_base& w, std::string_view type,
                        std::string_view key, std::string_view executor);
  /// `write_batch` without its invocations; then those alone.
  batch_result write_runs(const persistence::write_batch& batch);
  std::vector<bool>
  commit_invocations(const std::vector<invocation_commit>& invocations);
  /// A batch of creations and invocation ends, in one transaction.
  batch_result create_and_end(const persistence::write_batch& batch);
  void prepare_executors(connection& c, const std::string& s);
  /// Takes executor lock `key` on this connection (ending our own previous
  /// connection's session if it still holds it); returns whether it did.
  /// `end_stale`: our own previous connection may still hold it.
  bool lock_lease(pqxx::transaction_base& t, std::int32_t key,
                  bool end_stale);

  /// Returns the lease epoch fenced writes carry (0: unchecked).
  std::int64_t lease() const noexcept {
    return lease_epoch_ ? lease_epoch_->load(std::memory_order_relaxed) : 0;
  }
  void copy_batch(const persistence::write_batch& batch,
                  const creation_arrays& creations, const std::string& f_ids,
                  const std::string& f_execs, const std::string& f_epochs,
                  const std::array<std::string, 7>& completions,
                  batch_outcome& out);
  static batch_result make_result(const persistence::write_batch& batch,
                                  batch_outcome& out);
  template <class F>
  auto with_retry(F&& attempt);

  std::string url_;
  std::string schema_;
  /// The quoted schema and a dot, for the SQL layer's `{s}`.
  std::string schema_prefix_;
  /// The SQL layer's statements prepared on this connection so far.
  std::unordered_set<std::string> prepared_;
  std::chrono::milliseconds retry_budget_;
  std::shared_ptr<const std::atomic<std::int64_t>> lease_epoch_;
  std::chrono::milliseconds idle_transaction_timeout_;
  /// The executor lock this connection holds (see `acquire_lease`).
  std::int32_t lease_key_ = 0;
  bool lease_locked_ = false;
  /// The server process (pid, start time) of the connection that last
  /// took it.
  std::int32_t lease_pid_ = 0;
  std::string lease_session_;
  std::unique_ptr<connection> conn_;
};

} // namespace perdure::persistence
