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

protected:
  /// Runs `body` with a transaction that only reads (or autocommit),
  /// retried on transient failures as every store method is.
  virtual void read(const std::function<void(detail::sql_tx&)>& body) = 0;
};

} // namespace perdure::persistence
