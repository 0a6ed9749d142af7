#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_set>

#include "perdure/persistence/store.hpp"

namespace perdure::persistence {

/// The production store: PostgreSQL through libpqxx. Each instance owns one
/// connection; several processes may share one database and schema.
class postgres_store final : public store {
public:
  /// Connects to `url` (a libpq URI or keyword string) and uses `schema`.
  postgres_store(std::string url, std::string schema,
                 std::chrono::milliseconds retry_budget);
  ~postgres_store() override;

  postgres_store(const postgres_store&) = delete;
  postgres_store& operator=(const postgres_store&) = delete;

  const char* dialect() const noexcept override {
    return "postgresql";
  }

  void migrate() override;
  int schema_version() override;
  create_result create_run(const run_record& run) override;
  std::vector<bool> create_runs(const std::vector<run_record>& runs) override;
  bool set_wake_at(const fence& owner, std::string_view run_id,
                   std::optional<std::int64_t> wake_at_ms) override;
  std::vector<std::string> cancel_run(std::string_view run_id,
                                      std::int64_t at_ms) override;
  resolve_result resolve(const resolution& r) override;
  std::optional<journal_entry> deliver(const fence& owner,
                                       journal_entry checkpoint,
                                       const delivery& d) override;
  std::optional<resolution> get_resolution(std::string_view id) override;
  void notify(std::string_view payload) override;
  std::vector<std::string> awake_runs(std::string_view executor) override;
  bool send_message(std::string_view run_id, std::string_view topic,
                    std::string_view payload, std::int64_t at_ms) override;
  std::optional<message> next_message(std::string_view run_id,
                                      std::string_view topic,
                                      std::int64_t after) override;
  transaction_outcome record_event(const fence& owner, journal_entry checkpoint,
                                   const std::string& key,
                                   const std::string& value) override;
  std::optional<std::string> get_event(std::string_view run_id,
                                       std::string_view key) override;
  std::optional<run_record> get_run(std::string_view id) override;
  std::vector<run_record> claim_pending_runs(std::string_view executor,
                                             std::int64_t now_ms) override;
  std::vector<journal_entry>
  load_journals(const std::vector<std::string>& run_ids) override;
  batch_result write_batch(const persistence::write_batch& batch) override;
  transaction_outcome
  run_transaction(const fence& owner, journal_entry checkpoint,
                  const std::function<std::string(sql_session&)>& body) override;

private:
  /// Batches with at least this many appends go through COPY.
  static constexpr std::size_t copy_threshold = 32;

  void connect();
  void copy_batch(const persistence::write_batch& batch,
                  const std::string& f_ids, const std::string& f_execs,
                  const std::string& f_epochs,
                  const std::array<std::string, 7>& completions,
                  std::unordered_set<std::string>& owned,
                  std::unordered_set<std::string>& done);
  static batch_result make_result(const persistence::write_batch& batch,
                                  const std::unordered_set<std::string>& owned,
                                  const std::unordered_set<std::string>& done);
  template <class F>
  auto with_retry(F&& attempt);

  /// `run_transaction`, plus `extra(pqxx::work&, const journal_entry&)` in
  /// the same transaction (Perdure's own rows written with the checkpoint).
  template <class Extra>
  transaction_outcome
  transact(const fence& owner, journal_entry checkpoint,
           const std::function<std::string(sql_session&)>& body,
           Extra&& extra);

  std::string url_;
  std::string schema_;
  std::chrono::milliseconds retry_budget_;
  struct connection;
  std::unique_ptr<connection> conn_;
};

} // namespace perdure::persistence
