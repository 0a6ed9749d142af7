// The queue role of the PostgreSQL store (see queue_store.hpp).

#include <pqxx/pqxx>

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/sql/pg_sql.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/queue_choice.hpp"
#include "perdure/persistence/detail/postgres/postgres_internal.hpp"
#include "perdure/persistence/postgres_store.hpp"

namespace perdure::persistence {

using detail::opt_param;

namespace {

/// The database's clock in ms since the epoch, as SQL.
constexpr const char* db_clock_ms = detail::postgres_clock_ms;

/// A timeout or delay past which it means "never" (10 000 years, as the
/// queues library clamps them; a start time plus it fits in 64 bits).
constexpr const char* never_ms = "315360000000000";

} // namespace

create_result postgres_store::enqueue(const run_record& item) {
  create_result result;
  opt_param deadline{item.deadline_ms}, not_before{item.not_before_ms},
    timeout{item.timeout_ms};
  in_autocommit([&](pqxx::transaction_base& w) {
    auto s = w.quote_name(schema_) + ".";
    auto cols = detail::run_columns;
    // The notice goes out on commit, with the row.
    auto ins = w.exec_params(
      "WITH ins AS (INSERT INTO " + s
        + "runs (id, name, status, inputs, executor, epoch, app_version, "
          "created_at, updated_at, parent_id, deadline, queue_name, priority, "
          "partition_key, dedup_id, not_before, inbox_seq, timeout_ms, "
          "traceparent) VALUES ($1, $2, 'ENQUEUED', $3, '', 0, $4, $5, $5, $6, "
          "$7, $8, $9, $10, $11, $12, nextval('"
        + s + "inbox_seq'), $14, $15) ON CONFLICT DO NOTHING RETURNING "
        + cols + ") SELECT " + cols
        + ", pg_notify($13, '" + notice::prefix(notice::kind::queue_has_items)
        + "' || queue_name) FROM ins",
      item.id, item.name,
      pqxx::binarystring{item.inputs.data(), item.inputs.size()},
      item.app_version, item.created_at_ms,
      item.parent_id ? item.parent_id->c_str() : nullptr, deadline.get(),
      item.queue_name, item.priority, item.partition_key,
      item.dedup_id.empty() ? nullptr : item.dedup_id.c_str(), not_before.get(),
      detail::delivery_channel(schema_), timeout.get(),
      item.traceparent.empty() ? nullptr : item.traceparent.c_str());
    if (!ins.empty()) {
      result.created = true;
      result.run = detail::read_run(ins[0]);
      return;
    }
    // Taken: by id, or by an item queued or running with its dedup id (an
    // insert in flight is waited for by ON CONFLICT, so it is seen here).
    auto found = w.exec_params("SELECT " + cols + " FROM " + s
                                 + "runs WHERE id = $1",
                               item.id);
    if (found.empty() && !item.dedup_id.empty())
      found = w.exec_params("SELECT " + cols + " FROM " + s
                              + "runs WHERE queue_name = $1 AND dedup_id = $2 "
                                "AND status IN ('ENQUEUED', 'PENDING')",
                            item.queue_name, item.dedup_id);
    if (found.empty()) // the holder ended meanwhile: try again
      throw pqxx::serialization_failure("dedup holder ended");
    result.run = detail::read_run(found[0]);
  });
  return result;
}

namespace {

/// What a claim sets: a timeout counts from the item's start. A row whose
/// counts are out of bounds (another process wrote them) must not fail the
/// claim of the whole queue: the arithmetic saturates.
std::string claim_set(const std::string& r, const std::string& me,
                      const std::string& now) {
  return "status = 'PENDING', executor = " + me + ", epoch = " + r
         + "epoch + 1, started_at = " + db_clock_ms + ", attempts = LEAST("
         + r + "attempts, 2147483646) + 1, wake_at = NULL, not_before = "
           "NULL, deadline = CASE WHEN "
         + r + "timeout_ms IS NULL THEN " + r + "deadline ELSE " + now
         + " + LEAST(" + r + "timeout_ms, " + never_ms + ") END, updated_at = "
         + now;
}

/// Items this process can run (its workflows, its app version, the
/// patches it declares: an item retried after it took a patch is left to
/// processes that know it), the runs table unaliased.
std::string runnable(const std::string& names, const std::string& version,
                     const std::string& s) {
  return " AND " + detail::claimable(names, version, "runs", s);
}

/// When the queue's next delayed item is due, if it has one.
std::optional<std::int64_t> next_ready(pqxx::transaction_base& w,
                                       const std::string& s,
                                       const queue_claim_request& req) {
  auto next = w.exec_params("SELECT min(not_before) FROM " + s
                              + "runs WHERE queue_name = $1 AND status = "
                                "'ENQUEUED' AND not_before > $2",
                            req.queue.name, req.now_ms);
  if (next[0][0].is_null())
    return std::nullopt;
  return next[0][0].as<std::int64_t>();
}

/// A queue whose limits are this process's own: nothing to count, one
/// statement, and claimers skip each other's rows.
queue_claim claim_alone(pqxx::transaction_base& w, const std::string& s,
                        const queue_claim_request& req,
                        const std::string& names, std::int64_t lease) {
  queue_claim out;
  auto rows = w.exec_params(
    "WITH pick AS (SELECT id, started_at IS NULL AS fresh FROM " + s
      + "runs WHERE queue_name = $1 AND status = 'ENQUEUED' AND "
        "(not_before IS NULL OR not_before <= $3)"
      + runnable("$5", "$6", s)
      + " ORDER BY priority, inbox_seq LIMIT $4 FOR UPDATE SKIP LOCKED), "
        "upd AS (UPDATE "
      + s + "runs r SET " + claim_set("r.", "$2", "$3")
      + " FROM pick p WHERE r.id = p.id AND " + detail::holds_lease(s, "$2", "$7")
      + " RETURNING " + detail::qualified_run_columns("r")
      + ", r.inbox_seq AS claim_seq, p.fresh) " + "SELECT "
      + detail::run_columns + ", fresh FROM upd ORDER BY priority, claim_seq",
    req.queue.name, req.executor, req.now_ms, std::int64_t{req.capacity},
    names, req.filter.app_version, lease);
  for (const auto& r : rows) {
    out.runs.push_back(detail::read_run(r));
    out.fresh.push_back(r[r.size() - 1].as<bool>());
  }
  if (rows.empty())
    out.next_ready_ms = next_ready(w, s, req);
  return out;
}

/// What counts against a shared limit now: running items, recent starts,
/// running items per partition (the queue's row locked: claimers of a
/// queue with a shared limit take turns, and what one counts, it spends).
detail::queue_load read_load(pqxx::transaction_base& w, const std::string& s,
                             const queue_claim_request& req,
                             const std::string& names) {
  auto& q = req.queue;
  detail::queue_load load;
  auto lock = "SELECT " + std::string{db_clock_ms} + " FROM " + s
              + "queues WHERE name = $1 FOR UPDATE";
  auto row = w.exec_params(lock, q.name);
  if (row.empty()) { // not defined yet (by another version, say)
    w.exec_params("INSERT INTO " + s
                    + "queues (name, rate_period_ms, updated_at) VALUES "
                      "($1, $2, 0) ON CONFLICT DO NOTHING",
                  q.name, q.rate_period_ms);
    row = w.exec_params(lock, q.name);
  }
  load.db_now_ms = row[0][0].as<std::int64_t>();
  // Running: PENDING items of live processes, and those of gone ones this
  // process takes over (it can run them). Items nobody live can run
  // (another app version, a workflow no process has) hold nothing.
  auto running = "queue_name = $1 AND status = 'PENDING' AND (executor IN "
                 "(SELECT id FROM " + s
                 + "executors WHERE state = 'live') OR (TRUE"
                 + runnable("$2", "$3", s) + "))";
  load.running = w.exec_params("SELECT count(*) FROM " + s + "runs WHERE "
                                 + running,
                               q.name, names, req.filter.app_version)[0][0]
                   .as<std::int64_t>();
  if (q.rate_limit) {
    auto since = load.db_now_ms - detail::rate_window_ms(req);
    auto starts = w.exec_params("SELECT count(*), min(started_at) FROM " + s
                                  + "queue_starts WHERE queue_name = $1 AND "
                                    "started_at > $2",
                                q.name, since);
    load.recent_starts = starts[0][0].as<std::int64_t>();
    if (!starts[0][1].is_null())
      load.oldest_recent_start = starts[0][1].as<std::int64_t>();
  }
  if (q.partition_concurrency)
    for (const auto& r : w.exec_params(
           "SELECT partition_key, count(*) FROM " + s + "runs WHERE "
             + running + " GROUP BY partition_key",
           q.name, names, req.filter.app_version))
      load.running_by_partition[r[0].as<std::string>()]
        = r[1].as<std::int64_t>();
  return load;
}

/// The SQL condition of an item ready to be claimed here.
std::string ready_sql(const std::string& s) {
  return "queue_name = $1 AND status = 'ENQUEUED' AND (not_before IS NULL "
         "OR not_before <= $2)"
         + runnable("$4", "$5", s);
}

/// A candidate from a row of id, name, app_version, partition_key, fresh,
/// priority, inbox_seq.
detail::queue_candidate read_candidate(const pqxx::row& r) {
  return {r[0].as<std::string>(), r[1].as<std::string>(),
          r[2].as<std::string>(), r[3].as<std::string>(), r[4].as<bool>(),
          r[5].as<std::int64_t>(),
          r[6].is_null() ? 0 : r[6].as<std::int64_t>()};
}

/// The queue's first `most` ready items, by priority then age.
std::vector<detail::queue_candidate>
read_first_ready(pqxx::transaction_base& w, const std::string& s,
                 const queue_claim_request& req, const std::string& names,
                 std::int64_t most) {
  std::vector<detail::queue_candidate> candidates;
  for (const auto& r : w.exec_params(
         "SELECT id, name, app_version, partition_key, started_at IS NULL, "
         "priority, inbox_seq FROM " + s + "runs WHERE " + ready_sql(s)
           + " ORDER BY priority, inbox_seq LIMIT $3",
         req.queue.name, req.now_ms, most, names, req.filter.app_version))
    candidates.push_back(read_candidate(r));
  return candidates;
}

/// Reads the heads of at most `most` partitions with items ready here, in
/// turn order: those after `from`, then from the first one, up to `stop`
/// (`from` < `stop`: only those between). A loose index scan, two index
/// probes a partition, so a busy partition cannot hide the others. Keys
/// compare in the column's collation, so the last one read comes from the
/// database, in the order it walked.
detail::heads_read read_heads(pqxx::transaction_base& w, const std::string& s,
                      const queue_claim_request& req, const std::string& names,
                      const std::string& from, const std::string& stop,
                      std::int64_t most,
                      std::vector<detail::queue_candidate>& candidates) {
  auto ready = ready_sql(s);
  auto walk = [&](const std::string& name, const std::string& first,
                  const std::string& until) {
    return name + "(k) AS ((SELECT partition_key FROM " + s + "runs WHERE "
           + ready + first + " ORDER BY partition_key LIMIT 1) UNION ALL "
           "SELECT (SELECT partition_key FROM " + s + "runs WHERE " + ready
           + " AND partition_key > p.k ORDER BY partition_key LIMIT 1) FROM "
           + name + " p WHERE p.k IS NOT NULL" + until + ")";
  };
  auto n = std::to_string(most);
  auto rows = w.exec_params(
    "WITH RECURSIVE "
      + walk("after", " AND partition_key > $6", " AND ($6 >= $7 OR p.k < $7)")
      + ", " + walk("wrapped", "", " AND p.k < $7")
      + ", keys AS ((SELECT k FROM after WHERE k IS NOT NULL AND ($6 >= $7 "
        "OR k <= $7) LIMIT " + n
      + ") UNION ALL (SELECT k FROM wrapped WHERE $6 >= $7 AND k IS NOT "
        "NULL AND k <= $7 LIMIT " + n
      + ")), picked AS (SELECT k, row_number() OVER () AS pos FROM (SELECT k "
        "FROM keys LIMIT " + n
      + ") x) SELECT c.id, c.name, c.app_version, c.partition_key, c.fresh, "
        "c.priority, c.inbox_seq, (SELECT count(*) FROM picked), (SELECT k "
        "FROM picked ORDER BY pos DESC LIMIT 1) FROM picked p CROSS JOIN "
        "LATERAL (SELECT id, name, app_version, partition_key, started_at "
        "IS NULL AS fresh, priority, inbox_seq FROM "
      + s + "runs WHERE " + ready
      + " AND partition_key = p.k ORDER BY priority, inbox_seq LIMIT "
        "$3) c ORDER BY c.priority, c.inbox_seq",
    req.queue.name, req.now_ms, detail::heads_per_partition(req), names,
    req.filter.app_version, from, stop);
  detail::heads_read out;
  out.last = stop;
  for (const auto& r : rows) {
    candidates.push_back(read_candidate(r));
    out.partitions = r[7].as<std::int64_t>();
    out.last = r[8].as<std::string>();
  }
  out.ring_done = out.partitions < most || out.last == stop;
  return out;
}

/// Claims the chosen items (those still ENQUEUED), in the order chosen,
/// and counts their starts against the rate limit.
void claim_chosen(pqxx::transaction_base& w, const std::string& s,
                  const queue_claim_request& req,
                  const detail::queue_choice& choice,
                  const detail::queue_load& load, std::int64_t lease,
                  queue_claim& out) {
  auto& q = req.queue;
  detail::pg_array ids;
  for (auto& id : choice.ids)
    ids.add(id);
  auto claimed = w.exec_params(
    "UPDATE " + s + "runs SET " + claim_set("", "$2", "$3")
      + " WHERE id = ANY($1::text[]) AND status = 'ENQUEUED' AND "
      + detail::holds_lease(s, "$2", "$4") + " RETURNING "
      + detail::run_columns,
    ids.str(), req.executor, req.now_ms, lease);
  std::unordered_map<std::string, run_record> by_id;
  for (const auto& r : claimed) {
    auto run = detail::read_run(r);
    auto id = run.id;
    by_id.emplace(std::move(id), std::move(run));
  }
  for (std::size_t i = 0; i < choice.ids.size(); ++i) {
    auto found = by_id.find(choice.ids[i]);
    if (found == by_id.end())
      continue;
    out.runs.push_back(std::move(found->second));
    out.fresh.push_back(choice.fresh[i]);
  }
  if (!q.rate_limit || out.runs.empty())
    return;
  // Each start counts (a retry's too), on the database's clock; what left
  // every window goes.
  out.stamped_ms =
    w.exec_params("INSERT INTO " + s
                    + "queue_starts (queue_name, started_at) SELECT $1, "
                      "t.ms FROM (SELECT "
                    + db_clock_ms
                    + " AS ms) t, generate_series(1, $2) RETURNING "
                      "started_at",
                  q.name, static_cast<std::int64_t>(out.runs.size()))[0][0]
      .as<std::int64_t>();
  w.exec_params("DELETE FROM " + s
                  + "queue_starts WHERE queue_name = $1 AND started_at < "
                    "$2",
                q.name, load.db_now_ms - 2 * detail::rate_window_ms(req));
}

/// A queue with a limit shared with other processes: count, choose
/// (`choose_claims`), claim, in one transaction.
queue_claim claim_shared(pqxx::transaction_base& w, const std::string& s,
                         const queue_claim_request& req,
                         const std::string& names, std::int64_t lease) {
  queue_claim out;
  auto load = read_load(w, s, req, names);
  // The first ready items; the other partitions' heads when they are not
  // enough (`choose_in_turns`), in turn from the cursor.
  auto choice = detail::choose_in_turns(
    req, load,
    read_first_ready(w, s, req, names, detail::first_ready_to_read(req)),
    detail::walk_partitions(
      req, out.partition_cursor,
      [&](const std::string& from, std::int64_t most,
          std::vector<detail::queue_candidate>& heads) {
        return read_heads(w, s, req, names, from, req.partition_after, most,
                          heads);
      }));
  out.concurrency_bound = choice.concurrency_bound;
  out.rate_wait_ms = choice.rate_wait_ms;
  if (static_cast<std::int32_t>(choice.ids.size()) < req.capacity
      && !choice.concurrency_bound && !choice.rate_wait_ms)
    out.next_ready_ms = next_ready(w, s, req);
  if (!choice.ids.empty())
    claim_chosen(w, s, req, choice, load, lease, out);
  return out;
}

} // namespace

queue_claim postgres_store::claim_queued(const queue_claim_request& req) {
  queue_claim out;
  detail::pg_array names;
  for (auto& n : req.filter.names)
    names.add(n);
  auto name_list = names.str();
  auto claim = detail::shares_limits(req.queue) ? claim_shared : claim_alone;
  auto run = [&](pqxx::transaction_base& w) {
    out = claim(w, w.quote_name(schema_) + ".", req, name_list, lease());
  };
  if (detail::shares_limits(req.queue))
    in_work(run);
  else
    in_autocommit(run); // one statement
  return out;
}

} // namespace perdure::persistence
