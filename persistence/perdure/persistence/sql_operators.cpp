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

store_gauges sql_store::refresh_store_gauges(std::int64_t now_ms,
                                             std::int64_t interval_ms,
                                             const std::string& by) {
  // Claimed in a short transaction of its own: whoever's UPDATE comes
  // first after the interval computes; the others find nothing due. The
  // scans then run in a read transaction (no write lock held on SQLite,
  // no row lock on PostgreSQL), and the rows are swapped in a short write.
  static const sql_query claim{
    "store_gauges_claim",
    "UPDATE {s}store_gauges_refresh SET computed_at = $1, computed_by = $2 "
    "WHERE id = 1 AND computed_at <= $3 RETURNING id"};
  static const sql_query runs{
    "store_gauges_runs",
    "SELECT status, app_version, COUNT(*) FROM {s}runs GROUP BY status, "
    "app_version"};
  static const sql_query queues{
    "store_gauges_queues",
    "SELECT queue_name, CASE status WHEN 'PENDING' THEN 'running' ELSE "
    "'queued' END, COUNT(*) FROM {s}runs WHERE queue_name IS NOT NULL AND "
    "queue_name <> '' AND status IN ('ENQUEUED', 'PENDING') GROUP BY "
    "queue_name, status"};
  // Waiting to run: queued, or PENDING and not asleep out of memory (a run
  // sleeping for days is not late).
  static const sql_query oldest{
    "store_gauges_oldest",
    "SELECT COUNT(*), COALESCE(MIN(created_at), 0) FROM {s}runs WHERE "
    "status = 'ENQUEUED' OR (status = 'PENDING' AND wake_at IS NULL)"};
  static const sql_query passivated{
    "store_gauges_passivated",
    "SELECT COUNT(*) FROM {s}runs WHERE status = 'PENDING' AND wake_at IS "
    "NOT NULL"};
  static const sql_query clear{"store_gauges_clear",
                               "DELETE FROM {s}store_gauges"};
  static const sql_query insert{
    "store_gauges_insert",
    "INSERT INTO {s}store_gauges (gauge, label_a, label_b, value) VALUES "
    "($1, $2, $3, $4)"};
  static const sql_query when{
    "store_gauges_when",
    "SELECT computed_at, computed_by FROM {s}store_gauges_refresh WHERE id "
    "= 1"};
  static const sql_query all{
    "store_gauges_all",
    "SELECT gauge, label_a, label_b, value FROM {s}store_gauges ORDER BY "
    "gauge, label_a, label_b"};
  bool due = false;
  write([&](sql_tx& tx) {
    due = tx.first(claim,
                   {now_ms, std::string_view{by}, now_ms - interval_ms},
                   [](const sql_row&) { return true; })
            .has_value();
  });
  if (due) {
    std::vector<store_gauge> computed;
    read([&](sql_tx& tx) {
      computed.clear();
      tx.run(runs, {}, [&](const sql_row& r) {
        computed.push_back({"runs", r.text(0), r.text(1), r.int64(2)});
      });
      tx.run(queues, {}, [&](const sql_row& r) {
        computed.push_back({"queue_depth", r.text(0), r.text(1), r.int64(2)});
      });
      tx.first(oldest, {}, [&](const sql_row& r) {
        if (r.int64(0) > 0)
          computed.push_back({"oldest_pending_ms", "", "", r.int64(1)});
        return true;
      });
      tx.first(passivated, {}, [&](const sql_row& r) {
        computed.push_back({"passivated", "", "", r.int64(0)});
        return true;
      });
    });
    write([&](sql_tx& tx) {
      tx.run(clear, {});
      for (auto& g : computed)
        tx.run(insert, {std::string_view{g.gauge}, std::string_view{g.label_a},
                        std::string_view{g.label_b}, g.value});
    });
  }
  store_gauges out;
  read([&](sql_tx& tx) {
    out = {};
    tx.first(when, {}, [&](const sql_row& r) {
      out.computed_at_ms = r.int64(0);
      out.computed_by = r.text(1);
      return true;
    });
    tx.run(all, {}, [&](const sql_row& r) {
      out.readings.push_back({r.text(0), r.text(1), r.text(2), r.int64(3)});
    });
  });
  return out;
}

} // namespace perdure::persistence
