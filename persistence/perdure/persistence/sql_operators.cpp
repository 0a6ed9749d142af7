// What operators read that no runtime needs: executors and queues
// (operator_store.hpp).

#include <chrono>
#include <string>
#include <vector>

#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_dialect;
using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

std::vector<executor_info> sql_store::list_executors() {
  // PostgreSQL keeps a lease's times as timestamptz (the server's clock
  // decides lapses), SQLite as ms since the epoch. Runs held: through
  // runs_pending, one probe per executor.
  static const std::string held
    = "(SELECT count(*) FROM {s}runs r WHERE r.status = 'PENDING' AND "
      "r.executor = e.id)";
  static const sql_query pg{
    "list_executors_pg",
    "SELECT id, state, app_version, epoch, (extract(epoch FROM "
    "heartbeat_at) * 1000)::bigint, lease_ms, (extract(epoch FROM "
    "started_at) * 1000)::bigint, "
      + held + " FROM {s}executors e ORDER BY id"};
  static const sql_query lite{
    "list_executors_sqlite",
    "SELECT id, state, app_version, epoch, heartbeat_at, lease_ms, "
    "started_at, "
      + held + " FROM {s}executors e ORDER BY id"};
  std::vector<executor_info> out;
  read([&](sql_tx& tx) {
    out.clear();
    auto& q = tx.dialect() == sql_dialect::postgresql ? pg : lite;
    tx.run(q, {}, [&](const sql_row& r) {
      executor_info e;
      e.id = r.text(0);
      e.state = r.text(1);
      e.app_version = r.text(2);
      e.epoch = r.int64(3);
      e.heartbeat_at = from_ms(r.int64(4));
      e.lease = std::chrono::milliseconds{r.int64(5)};
      e.started_at = from_ms(r.int64(6));
      e.runs_held = r.int64(7);
      out.push_back(std::move(e));
    });
  });
  return out;
}

std::vector<queue_info> sql_store::list_queues() {
  static const sql_query q{
    "list_queues", "SELECT name, concurrency, partition_concurrency, "
                   "rate_limit, rate_period_ms, updated_at FROM {s}queues "
                   "ORDER BY name"};
  std::vector<queue_info> out;
  read([&](sql_tx& tx) {
    out.clear();
    tx.run(q, {}, [&](const sql_row& r) {
      queue_info info;
      info.name = r.text(0);
      auto limit = [&](int col) -> std::optional<std::int32_t> {
        if (auto v = r.opt_int64(col))
          return static_cast<std::int32_t>(*v);
        return std::nullopt;
      };
      info.limits.concurrency = limit(1);
      info.limits.partition_concurrency = limit(2);
      info.limits.rate_limit = limit(3);
      info.limits.rate_period_ms = r.int64(4);
      info.updated_at = from_ms(r.int64(5));
      out.push_back(std::move(info));
    });
  });
  return out;
}

} // namespace perdure::persistence
