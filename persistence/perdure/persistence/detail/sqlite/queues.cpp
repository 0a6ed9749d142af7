// The queue role of the SQLite store (see queue_store.hpp). One runtime
// uses a file: a write transaction is all the locking a claim needs.

#include <unordered_map>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/queue_choice.hpp"
#include "perdure/persistence/detail/sql/claim_sql.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/sqlite/statement.hpp"
#include "perdure/persistence/sqlite_store.hpp"

namespace perdure::persistence {

namespace {

/// The clock of the database's host in ms since the epoch, as SQL.
constexpr const char* db_clock_ms = detail::sqlite_clock_ms;

} // namespace

create_result sqlite_store::enqueue(const run_record& item) {
  create_result result;
  in_write([&] {
    prepare("INSERT INTO runs (id, name, status, inputs, executor, epoch, "
            "app_version, created_at, updated_at, parent_id, deadline, "
            "queue_name, priority, partition_key, dedup_id, not_before, "
            "timeout_ms, traceparent) VALUES (?1, ?2, 'ENQUEUED', ?3, '', 0, "
            "?4, ?5, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT "
            "DO NOTHING")
      .bind(1, item.id)
      .bind(2, item.name)
      .bind_blob(3, item.inputs)
      .bind(4, item.app_version)
      .bind(5, item.created_at_ms)
      .bind_opt(6, item.parent_id)
      .bind_opt_int(7, item.deadline_ms)
      .bind(8, item.queue_name)
      .bind(9, std::int64_t{item.priority})
      .bind(10, item.partition_key)
      .bind_opt(11, item.dedup_id.empty() ? std::nullopt
                                          : std::optional{item.dedup_id})
      .bind_opt_int(12, item.not_before_ms)
      .bind_opt_int(13, item.timeout_ms)
      .bind_opt(14, item.traceparent.empty()
                      ? std::nullopt
                      : std::optional{item.traceparent})
      .run();
    result.created = sqlite3_changes(db_) == 1;
    if (result.created) {
      notice_in(notice::queued(item.queue_name).encode());
      result.run = read_run_row(item.id);
      return;
    }
    auto& by_id = prepare("SELECT 1 FROM runs WHERE id = ?1");
    by_id.bind(1, item.id);
    auto exists = by_id.step();
    by_id.reset();
    if (exists) {
      result.run = read_run_row(item.id);
      return;
    }
    auto& holder = prepare("SELECT id FROM runs WHERE queue_name = ?1 AND "
                           "dedup_id = ?2 AND status IN ('ENQUEUED', "
                           "'PENDING')");
    holder.bind(1, item.queue_name).bind(2, item.dedup_id);
    if (!holder.step())
      throw perdure::error(errc::store_error,
                           "enqueue of '" + item.id + "' conflicted with "
                             "nothing");
    auto id = holder.text(0);
    holder.reset();
    result.run = read_run_row(id);
  });
  return result;
}

namespace {

/// The claim's filter of what this process can run (the claim filter's
/// rule: its version ?5, its workflows and patches ?6).
std::string runnable_sql(const queue_claim_request&) {
  return detail::claimable(detail::sql_dialect::sqlite, "?6", "?5");
}

/// Binds what `runnable_sql` names (of a statement of the store).
template <class Statement>
void bind_runnable(Statement& st, const queue_claim_request& req) {
  st.bind(5, req.filter.app_version);
  st.bind(6, detail::claim_names(req.filter, detail::sql_dialect::sqlite));
}

} // namespace

std::int64_t sqlite_store::db_now_ms() {
  auto& now = prepare(std::string{"SELECT "} + db_clock_ms);
  now.step();
  auto ms = now.int64(0);
  now.reset();
  return ms;
}

detail::queue_load sqlite_store::queue_load_of(const queue_claim_request& req) {
  auto& q = req.queue;
  detail::queue_load load;
  load.db_now_ms = db_now_ms();
  // Running: PENDING items of live processes, and those of gone ones this
  // process takes over (it can run them). Items nobody live can run
  // (another app version, a workflow no process has) hold nothing.
  auto running = "queue_name = ?1 AND status = 'PENDING' AND (executor IN "
                 "(SELECT id FROM executors WHERE state = 'live') OR ("
                 + runnable_sql(req) + "))";
  auto& counts = prepare("SELECT count(*) FROM runs WHERE " + running);
  counts.bind(1, q.name);
  bind_runnable(counts, req);
  counts.step();
  load.running = counts.int64(0);
  counts.reset();
  if (q.rate_limit) {
    auto& starts = prepare("SELECT count(*), min(started_at) FROM "
                           "queue_starts WHERE queue_name = ?1 AND "
                           "started_at > ?2");
    starts.bind(1, q.name).bind(2,
                                load.db_now_ms - detail::rate_window_ms(req));
    starts.step();
    load.recent_starts = starts.int64(0);
    if (!starts.is_null(1))
      load.oldest_recent_start = starts.int64(1);
    starts.reset();
  }
  if (q.partition_concurrency) {
    auto& parts = prepare("SELECT partition_key, count(*) FROM runs WHERE "
                          + running + " GROUP BY partition_key");
    parts.bind(1, q.name);
    bind_runnable(parts, req);
    while (parts.step())
      load.running_by_partition[parts.text(0)] = parts.int64(1);
    parts.reset();
  }
  return load;
}

namespace {

/// The SQL condition of an item ready to be claimed here.
std::string ready_sql(const std::string& runnable) {
  return "queue_name = ?1 AND status = 'ENQUEUED' AND (not_before IS NULL "
         "OR not_before <= ?2) AND " + runnable;
}

} // namespace

std::vector<detail::queue_candidate>
sqlite_store::read_candidates(const queue_claim_request& req,
                              const std::string& sql, std::int64_t limit,
                              const std::optional<std::string>& partition) {
  auto& rows = prepare(sql);
  rows.bind(1, req.queue.name).bind(2, req.now_ms).bind(3, limit);
  if (partition)
    rows.bind(4, *partition);
  bind_runnable(rows, req);
  std::vector<detail::queue_candidate> candidates;
  while (rows.step())
    candidates.push_back({rows.text(0), rows.text(1), rows.text(2),
                          rows.text(3), rows.int64(4) != 0, rows.int64(5),
                          rows.int64(6)});
  rows.reset();
  return candidates;
}

std::vector<detail::queue_candidate>
sqlite_store::first_ready(const queue_claim_request& req) {
  return read_candidates(
    req,
    "SELECT id, name, app_version, partition_key, started_at IS NULL, "
    "priority, rowid FROM runs WHERE " + ready_sql(runnable_sql(req))
      + " ORDER BY priority, rowid LIMIT ?3",
    detail::first_ready_to_read(req));
}

detail::heads_read
sqlite_store::partition_heads(const queue_claim_request& req,
                              const std::string& from, std::int64_t most,
                              std::vector<detail::queue_candidate>& heads) {
  // A loose index scan, as on PostgreSQL: one seek to each next partition
  // with items ready, then its heads; a busy partition's ready items cost
  // one seek (its delayed ones, or ones this process cannot run, are
  // stepped over row by row). At most 1 000 partitions a claim: about
  // 2 000 statements of microseconds under the write lock, against one
  // read of every ready item before (225 ms with 100 000 of them).
  auto ready = ready_sql(runnable_sql(req));
  auto first_key = "SELECT partition_key FROM runs WHERE " + ready
                   + " ORDER BY partition_key LIMIT 1";
  auto key_after = "SELECT partition_key FROM runs WHERE " + ready
                   + " AND partition_key > ?3 ORDER BY partition_key LIMIT 1";
  auto heads_of = "SELECT id, name, app_version, partition_key, started_at "
                  "IS NULL, priority, rowid FROM runs WHERE " + ready
                  + " AND partition_key = ?4 ORDER BY priority, rowid LIMIT ?3";
  auto next_after = [&](const std::string* after) {
    auto& next = prepare(after ? key_after : first_key);
    next.bind(1, req.queue.name).bind(2, req.now_ms);
    if (after)
      next.bind(3, *after);
    bind_runnable(next, req);
    std::optional<std::string> key;
    if (next.step())
      key = next.text(0);
    next.reset();
    return key;
  };
  // Keys compare bytewise, as SQLite's default collation.
  auto& stop = req.partition_after;
  detail::heads_read out;
  out.last = stop;
  auto walk = [&](const std::string* after, bool up_to_stop) {
    for (; out.partitions < most; ++out.partitions) {
      auto key = next_after(after);
      if (!key || (up_to_stop && *key > stop))
        return;
      auto read = read_candidates(req, heads_of,
                                  detail::heads_per_partition(req), *key);
      heads.insert(heads.end(), read.begin(), read.end());
      out.last = std::move(*key);
      after = &out.last;
    }
  };
  if (from < stop) {
    walk(&from, true);
  } else {
    walk(&from, false);
    walk(nullptr, true);
  }
  out.ring_done = out.partitions < most || out.last == stop;
  return out;
}

void sqlite_store::claim_chosen(const queue_claim_request& req,
                                const detail::queue_choice& choice,
                                const detail::queue_load& load,
                                queue_claim& out) {
  auto& q = req.queue;
  for (std::size_t i = 0; i < choice.ids.size(); ++i) {
    prepare(std::string{"UPDATE runs SET status = 'PENDING', executor = "
                        "?2, epoch = epoch + 1, started_at = "}
            + db_clock_ms
            // Saturating, as PostgreSQL's claim: counts out of bounds
            // (another process wrote them) turn into no REAL values.
            + ", attempts = MIN(attempts, 2147483646) + 1, wake_at = NULL, "
              "not_before = NULL, deadline = CASE WHEN timeout_ms IS NULL "
              "THEN deadline ELSE ?3 + MIN(timeout_ms, 315360000000000) END, "
              "updated_at = ?3 WHERE id = ?1 AND "
              "status = 'ENQUEUED'")
      .bind(1, choice.ids[i])
      .bind(2, req.executor)
      .bind(3, req.now_ms)
      .run();
    if (sqlite3_changes(db_) != 1)
      continue;
    out.runs.push_back(read_run_row(choice.ids[i]));
    out.fresh.push_back(choice.fresh[i]);
    if (q.rate_limit) {
      if (out.stamped_ms == 0) // one stamp for the claim's starts
        out.stamped_ms = db_now_ms();
      prepare("INSERT INTO queue_starts (queue_name, started_at) VALUES "
              "(?1, ?2)")
        .bind(1, q.name)
        .bind(2, out.stamped_ms)
        .run();
    }
  }
  if (q.rate_limit && !out.runs.empty())
    prepare("DELETE FROM queue_starts WHERE queue_name = ?1 AND started_at "
            "< ?2")
      .bind(1, q.name)
      .bind(2, load.db_now_ms - 2 * detail::rate_window_ms(req))
      .run();
}

queue_claim sqlite_store::claim_queued(const queue_claim_request& req) {
  queue_claim out;
  in_write([&] {
    out = {};
    auto load = queue_load_of(req);
    auto choice = detail::choose_in_turns(
      req, load, first_ready(req),
      detail::walk_partitions(
        req, out.partition_cursor,
        [&](const std::string& from, std::int64_t most,
            std::vector<detail::queue_candidate>& heads) {
          return partition_heads(req, from, most, heads);
        }));
    out.concurrency_bound = choice.concurrency_bound;
    out.rate_wait_ms = choice.rate_wait_ms;
    if (static_cast<std::int32_t>(choice.ids.size()) < req.capacity
        && !choice.concurrency_bound && !choice.rate_wait_ms) {
      auto& next = prepare("SELECT min(not_before) FROM runs WHERE queue_name "
                           "= ?1 AND status = 'ENQUEUED' AND not_before > ?2");
      next.bind(1, req.queue.name).bind(2, req.now_ms);
      next.step();
      if (!next.is_null(0))
        out.next_ready_ms = next.int64(0);
      next.reset();
    }
    claim_chosen(req, choice, load, out);
  });
  return out;
}

} // namespace perdure::persistence
