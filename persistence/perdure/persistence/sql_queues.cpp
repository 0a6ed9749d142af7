// The queue operations that are the same SQL on both stores (see
// sql_store.hpp); enqueueing and claiming stay with each store.

#include "perdure/error.hpp"
#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/queue_choice.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/run_events.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_dialect;
using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

namespace {

std::optional<std::int64_t> widen(const std::optional<std::int32_t>& x) {
  if (!x)
    return std::nullopt;
  return *x;
}

std::optional<std::int32_t> narrow(const std::optional<std::int64_t>& x) {
  if (!x)
    return std::nullopt;
  return static_cast<std::int32_t>(*x);
}

/// What sends item `id` back to queue `queue` ends with: a new attempt in
/// its journal (the entries from its first failed step on forgotten), the
/// processes told (on commit).
void back_in_queue(sql_tx& tx, std::string_view id, std::string_view queue,
                   std::int64_t at_ms) {
  static const sql_query marker_pg{
    "new_attempt", detail::new_attempt_marker("{s}journal", "$1::text", "$2",
                                              true)};
  static const sql_query marker_lite{
    "new_attempt", detail::new_attempt_marker("{s}journal", "$1", "$2", false)};
  static const sql_query forget{
    "forget_attempt", detail::forgotten_by_new_attempt("{s}journal", "$1::text")};
  tx.run(tx.dialect() == sql_dialect::postgresql ? marker_pg : marker_lite,
         {id, at_ms});
  tx.run(forget, {id});
  tx.notify(notice::queued(std::string{queue}).encode());
}

} // namespace

void sql_store::define_queue(const queue_definition& q) {
  static const sql_query define{
    "define_queue",
    "INSERT INTO {s}queues (name, concurrency, partition_concurrency, "
    "rate_limit, rate_period_ms, updated_at) VALUES ($1, $2, $3, $4, $5, "
    "{now}) ON CONFLICT (name) DO UPDATE SET concurrency = "
    "EXCLUDED.concurrency, partition_concurrency = "
    "EXCLUDED.partition_concurrency, rate_limit = EXCLUDED.rate_limit, "
    "rate_period_ms = EXCLUDED.rate_period_ms, updated_at = "
    "EXCLUDED.updated_at"};
  using detail::or_null;
  write([&](sql_tx& tx) {
    tx.run(define, {std::string_view{q.name}, or_null(widen(q.concurrency)),
                    or_null(widen(q.partition_concurrency)),
                    or_null(widen(q.rate_limit)), q.rate_period_ms});
  });
}

void sql_store::record_queue_starts(const std::vector<std::string>& queues) {
  // Each start of a queue with a rate limit, on the database's clock.
  static const sql_query all{
    "record_queue_starts",
    "INSERT INTO {s}queue_starts (queue_name, started_at) SELECT n.name, "
    "{now} FROM unnest($1::text[]) AS n(name) JOIN {s}queues q ON q.name = "
    "n.name WHERE q.rate_limit IS NOT NULL"};
  static const sql_query one{
    "record_queue_start",
    "INSERT INTO {s}queue_starts (queue_name, started_at) SELECT name, {now} "
    "FROM {s}queues WHERE name = $1 AND rate_limit IS NOT NULL"};
  write([&](sql_tx& tx) {
    if (tx.dialect() == sql_dialect::postgresql) {
      detail::pg_array names;
      for (auto& q : queues)
        names.add(q);
      auto literal = names.str();
      tx.run(all, {std::string_view{literal}});
    } else {
      for (auto& q : queues)
        tx.run(one, {std::string_view{q}});
    }
  });
}

void sql_store::restamp_queue_starts(std::string_view queue,
                                     std::int64_t stamped_ms,
                                     std::int64_t count) {
  static const sql_query pg{
    "restamp_queue_starts",
    "UPDATE {s}queue_starts SET started_at = {now} WHERE ctid IN (SELECT "
    "ctid FROM {s}queue_starts WHERE queue_name = $1 AND started_at = $2 "
    "LIMIT $3)"};
  static const sql_query lite{
    "restamp_queue_starts",
    "UPDATE queue_starts SET started_at = {now} WHERE rowid IN (SELECT rowid "
    "FROM queue_starts WHERE queue_name = $1 AND started_at = $2 LIMIT $3)"};
  write([&](sql_tx& tx) {
    tx.run(tx.dialect() == sql_dialect::postgresql ? pg : lite,
           {queue, stamped_ms, count});
  });
}

std::vector<std::pair<std::string, std::int64_t>>
sql_store::queued_heads(const std::vector<std::string>& queues) {
  static const sql_query all{
    "queued_heads",
    "SELECT queue_name, min(COALESCE(not_before, 0)) FROM {s}runs WHERE "
    "status = 'ENQUEUED' AND queue_name = ANY($1::text[]) GROUP BY "
    "queue_name"};
  static const sql_query one{
    "queued_head",
    "SELECT queue_name, min(COALESCE(not_before, 0)) FROM {s}runs WHERE "
    "status = 'ENQUEUED' AND queue_name = $1 GROUP BY queue_name"};
  std::vector<std::pair<std::string, std::int64_t>> out;
  if (queues.empty())
    return out;
  autocommit([&](sql_tx& tx) {
    out.clear();
    auto add = [&](const sql_row& r) {
      out.emplace_back(r.text(0), r.int64(1));
    };
    if (tx.dialect() == sql_dialect::postgresql) {
      detail::pg_array names;
      for (auto& n : queues)
        names.add(n);
      auto literal = names.str();
      tx.run(all, {std::string_view{literal}}, add);
    } else {
      for (auto& q : queues)
        tx.run(one, {std::string_view{q}}, add);
    }
  });
  return out;
}

bool sql_store::retry_item(const fence& owner, std::string_view id,
                           std::int64_t not_before_ms,
                           const std::string& error, std::int64_t at_ms) {
  static const sql_query retry{
    "retry_item",
    "UPDATE {s}runs SET status = 'ENQUEUED', executor = '', not_before = $4, "
    "error = $5, wake_at = NULL, updated_at = $6 WHERE id = $1 AND executor "
    "= $2 AND epoch = $3 AND status = 'PENDING' AND ($7::bigint = 0 OR "
    "EXISTS (SELECT 1 FROM {s}executors e WHERE e.id = $2 AND e.epoch = "
    "$7::bigint AND e.state = 'live')) RETURNING queue_name"};
  auto done = false;
  write([&](sql_tx& tx) {
    auto queue = tx.first(retry,
                          {id, std::string_view{owner.executor}, owner.epoch,
                           not_before_ms, std::string_view{error}, at_ms,
                           lease_epoch()},
                          [](const sql_row& r) { return r.text(0); });
    done = queue.has_value();
    if (done)
      back_in_queue(tx, id, *queue, at_ms);
  });
  return done;
}

std::optional<run_record> sql_store::requeue(std::string_view id,
                                             std::int64_t at_ms,
                                             std::string_view reason) {
  static const sql_query requeue{
    "requeue",
    "UPDATE {s}runs SET status = 'ENQUEUED', executor = '', attempts = 0, "
    "error = NULL, output = NULL, not_before = NULL, wake_at = NULL, "
    "updated_at = $2 WHERE id = $1 AND status = 'DEAD_LETTER' AND "
    "collected_at IS NULL RETURNING "
      + detail::run_columns};
  std::optional<run_record> out;
  try {
    write([&](sql_tx& tx) {
      out = tx.first(requeue, {id, at_ms},
                     [](const sql_row& r) { return detail::read_run(r); });
      if (!out)
        return;
      back_in_queue(tx, out->id, out->queue_name, at_ms);
      detail::record_run_event(tx, id, at_ms, "resume",
                               "from DEAD_LETTER, back in queue '"
                                 + out->queue_name + "'",
                               reason);
    });
  } catch (const detail::unique_violation&) {
    throw perdure::error(errc::conflicting_id,
                         "queue item '" + std::string{id}
                           + "' cannot be requeued: another item with its "
                             "dedup id is queued or running");
  }
  return out;
}

queue_stats sql_store::count_queue(std::string_view queue,
                                   std::int64_t now_ms) {
  static const sql_query definition{
    "queue_definition",
    "SELECT concurrency, partition_concurrency, rate_limit, rate_period_ms, "
    "{now} FROM {s}queues WHERE name = $1"};
  // Each half by its partial index.
  static const sql_query partitions{
    "queue_partitions",
    "SELECT partition_key, count(*) FILTER (WHERE status = 'ENQUEUED' AND "
    "(not_before IS NULL OR not_before <= $2)), count(*) FILTER (WHERE "
    "status = 'ENQUEUED' AND not_before > $2), count(*) FILTER (WHERE status "
    "= 'PENDING') FROM (SELECT partition_key, status, not_before FROM "
    "{s}runs WHERE queue_name = $1 AND status = 'ENQUEUED' UNION ALL SELECT "
    "partition_key, status, not_before FROM {s}runs WHERE queue_name = $1 "
    "AND status = 'PENDING') q GROUP BY partition_key ORDER BY "
    "partition_key"};
  static const sql_query more{
    "queue_counts",
    "SELECT (SELECT count(*) FROM {s}runs WHERE queue_name = $1 AND status "
    "= 'DEAD_LETTER' AND collected_at IS NULL), (SELECT count(*) FROM {s}queue_starts WHERE "
    "queue_name = $1 AND started_at > $2)"};
  queue_stats c;
  autocommit([&](sql_tx& tx) {
    c = {};
    c.name = std::string{queue};
    auto db_now = now_ms;
    tx.run(definition, {queue}, [&](const sql_row& r) {
      c.limits.concurrency = narrow(r.opt_int64(0));
      c.limits.partition_concurrency = narrow(r.opt_int64(1));
      c.limits.rate_limit = narrow(r.opt_int64(2));
      c.limits.rate_period_ms = r.int64(3);
      db_now = r.int64(4);
    });
    tx.run(partitions, {queue, now_ms}, [&](const sql_row& r) {
      partition_stats p;
      p.partition_key = r.text(0);
      p.ready = r.int64(1);
      p.delayed = r.int64(2);
      p.running = r.int64(3);
      c.total.ready += p.ready;
      c.total.delayed += p.delayed;
      c.total.running += p.running;
      c.partitions.push_back(std::move(p));
    });
    tx.run(more, {queue, db_now - c.limits.rate_period_ms},
           [&](const sql_row& r) {
             c.dead_letters = r.int64(0);
             c.recent_starts = r.int64(1);
           });
  });
  detail::count_throttled(c);
  return c;
}

} // namespace perdure::persistence
