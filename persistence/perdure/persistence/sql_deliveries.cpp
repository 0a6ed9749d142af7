// Deliveries and fenced journal writes, written once (see sql_store.hpp):
// resolving awakeables and promises, messages, and the checkpoints that
// carry a write of their own (a delivery made by a run, an event, a saga
// phase, a transactional step's SQL).

#include "perdure/error.hpp"
#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_bytes;
using detail::sql_dialect;
using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

namespace {

/// Returns the entry recorded at index `seq` of run `run_id`, if any.
std::optional<journal_entry> entry_at(sql_tx& tx, std::string_view run_id,
                                      std::int32_t seq) {
  static const sql_query q{"entry_at", std::string{"SELECT "}
                                         + detail::entry_columns
                                         + " FROM {s}journal WHERE run_id = "
                                           "$1 AND seq = $2"};
  return tx.first(q, {run_id, std::int64_t{seq}},
                  [](const sql_row& r) { return detail::read_entry(r); });
}

/// Appends `e` (a broken unique index if its index is taken).
void append_entry(sql_tx& tx, const journal_entry& e) {
  static const sql_query q{
    "append_entry",
    "INSERT INTO {s}journal (run_id, seq, kind, name, outcome, payload, "
    "error, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"};
  tx.run(q, {std::string_view{e.run_id}, std::int64_t{e.seq},
             std::string_view{to_string(e.kind)}, std::string_view{e.name},
             static_cast<std::int64_t>(e.outcome), sql_bytes{e.payload},
             std::string_view{e.error}, e.created_at_ms});
}

/// Returns whether `owner` holds run `run_id`. On PostgreSQL its row stays
/// locked FOR SHARE until the transaction ends (no takeover commits in
/// between), with the fence of the writer's batches; SQLite's write lock
/// keeps everyone out anyway.
bool owns(sql_tx& tx, const fence& owner, std::string_view run_id,
          std::int64_t lease) {
  static const sql_query pg{"fence_one", detail::fence_sql("{s}", 4)};
  static const sql_query lite{"fence_one",
                              "SELECT 1 FROM runs WHERE id = $1 AND executor "
                              "= $2 AND epoch = $3 AND status = 'PENDING'"};
  auto found = false;
  if (tx.dialect() == sql_dialect::postgresql) {
    detail::pg_array ids, execs, epochs;
    ids.add(run_id);
    execs.add(owner.executor);
    epochs.add(owner.epoch);
    auto i = ids.str(), x = execs.str(), e = epochs.str();
    tx.run(pg, {std::string_view{i}, std::string_view{x}, std::string_view{e},
                lease},
           [&](const sql_row&) { found = true; });
  } else {
    tx.run(lite, {run_id, std::string_view{owner.executor}, owner.epoch},
           [&](const sql_row&) { found = true; });
  }
  return found;
}

/// Marks run `run_id` delivered to at `at_ms` (if it is passivated, the
/// sweep of its executor brings it back); false if there is no such run.
bool mark_delivered(sql_tx& tx, std::string_view run_id, std::int64_t at_ms) {
  static const sql_query q{"wake_run",
                           "UPDATE {s}runs SET wake_at = CASE WHEN wake_at > "
                           "$2 THEN 0 ELSE wake_at END WHERE id = $1 AND "
                           "collected_at IS NULL"};
  return tx.run(q, {run_id, at_ms}) == 1;
}

/// Stores resolution `r` in `tx`; `run_locked`: the transaction already
/// holds the run's row (a delivery locks both its runs).
resolve_result resolve_in(sql_tx& tx, const resolution& r, bool run_locked) {
  static const sql_query run_exists{
    "run_exists",
    "SELECT 1 FROM {s}runs WHERE id = $1 AND collected_at IS NULL"};
  static const sql_query awakeable_exists{
    "awakeable_exists", "SELECT 1 FROM {s}journal WHERE run_id = $1 AND seq "
                        "= $2 AND kind = 'awakeable' AND name = $3"};
  static const sql_query insert{
    "insert_resolution",
    "INSERT INTO {s}resolutions (id, run_id, seq, outcome, payload, error, "
    "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO "
    "NOTHING"};
  // PostgreSQL: the run's row held first, so retention cannot collect it
  // between the checks and the insert (which would leave the outcome
  // behind, for a later run of the id to find). KEY SHARE: it conflicts
  // with the collector's FOR UPDATE, not with this transaction's own
  // UPDATE of the row, nor another resolve's or the run's own writes.
  static const sql_query hold{
    "resolve_hold_run",
    "SELECT 1 FROM {s}runs WHERE id = $1 AND collected_at IS NULL FOR KEY "
    "SHARE"};
  auto known = false;
  auto found = [&](const sql_row&) { known = true; };
  if (tx.dialect() == sql_dialect::postgresql && !run_locked) {
    tx.run(hold, {std::string_view{r.run_id}}, found);
    if (!known)
      return resolve_result::unknown_id;
    known = false;
  }
  if (r.seq < 0)
    tx.run(run_exists, {std::string_view{r.run_id}}, found);
  else
    tx.run(awakeable_exists, {std::string_view{r.run_id}, std::int64_t{r.seq},
                              std::string_view{r.id}},
           found);
  if (!known)
    return resolve_result::unknown_id;
  auto inserted
    = tx.run(insert, {std::string_view{r.id}, std::string_view{r.run_id},
                      std::int64_t{r.seq}, static_cast<std::int64_t>(r.result),
                      sql_bytes{r.payload}, std::string_view{r.error},
                      r.at_ms});
  if (inserted == 0)
    return resolve_result::already_resolved;
  mark_delivered(tx, r.run_id, r.at_ms);
  return resolve_result::resolved;
}

/// Queues `m` in `tx`; false if there is no such run.
bool send_in(sql_tx& tx, const outgoing_message& m) {
  // One statement where data-modifying CTEs exist.
  static const sql_query pg{
    "send_message",
    "WITH woken AS (UPDATE {s}runs SET wake_at = CASE WHEN wake_at > $4 THEN "
    "0 ELSE wake_at END WHERE id = $1 AND collected_at IS NULL RETURNING id) "
    "INSERT INTO {s}messages "
    "(run_id, topic, payload, created_at) SELECT id, $2, $3, $4 FROM woken"};
  static const sql_query insert{
    "insert_message", "INSERT INTO messages (run_id, topic, payload, "
                      "created_at) VALUES ($1, $2, $3, $4)"};
  std::initializer_list<detail::sql_value> params{
    std::string_view{m.run_id}, std::string_view{m.topic},
    sql_bytes{m.payload}, m.at_ms};
  if (tx.dialect() == sql_dialect::postgresql)
    return tx.run(pg, params) == 1;
  if (!mark_delivered(tx, m.run_id, m.at_ms))
    return false;
  tx.run(insert, params);
  return true;
}

} // namespace

std::optional<journal_entry>
sql_store::fenced(const fence& owner, journal_entry checkpoint,
                  const std::function<void(sql_tx&, journal_entry&)>& body,
                  const std::function<void(sql_tx&)>& first) {
  std::optional<journal_entry> out;
  try {
    write([&](sql_tx& tx) {
      out.reset();
      if (first)
        first(tx);
      if (!owns(tx, owner, checkpoint.run_id, lease_epoch()))
        return; // nothing written
      // Every attempt first looks at its index: an outcome there, from an
      // attempt whose commit was in doubt, stands and the body does not
      // run (never a second delivery).
      if ((out = entry_at(tx, checkpoint.run_id, checkpoint.seq)))
        return;
      auto e = checkpoint;
      body(tx, e);
      append_entry(tx, e);
      out = std::move(e);
    });
  } catch (const detail::unique_violation&) {
    // Two copies of one run wrote this index at once (two processes with
    // one executor id): the first commit stands, for both.
    std::optional<journal_entry> stored;
    read([&](sql_tx& tx) {
      stored = entry_at(tx, checkpoint.run_id, checkpoint.seq);
    });
    if (!stored)
      throw perdure::error(errc::store_error,
                           "run " + checkpoint.run_id + " index "
                             + std::to_string(checkpoint.seq)
                             + " was taken, and nothing is recorded there");
    return stored;
  }
  return out;
}

resolve_result sql_store::resolve(const resolution& r) {
  auto result = resolve_result::unknown_id;
  write([&](sql_tx& tx) { result = resolve_in(tx, r, false); });
  return result;
}

bool sql_store::send_message(std::string_view run_id, std::string_view topic,
                             std::string_view payload, std::int64_t at_ms) {
  auto sent = false;
  outgoing_message m{std::string{run_id}, std::string{topic},
                     std::string{payload}, at_ms};
  auto send = [&](sql_tx& tx) { sent = send_in(tx, m); };
  // One statement on PostgreSQL (atomic on its own: one round trip).
  if (std::string_view{dialect()} == "postgresql")
    autocommit(send);
  else
    write(send);
  return sent;
}

std::optional<journal_entry>
sql_store::deliver(const fence& owner, journal_entry checkpoint,
                   const delivery& d) {
  // Both runs a delivery touches, locked in one order on PostgreSQL: two
  // runs delivering to each other at once would otherwise deadlock (the
  // fence FOR SHARE on its own row, then the UPDATE of the other's).
  static const sql_query lock_runs{
    "lock_runs", "SELECT id FROM {s}runs WHERE id = ANY($1::text[]) ORDER BY "
                 "id FOR UPDATE"};
  detail::pg_array both;
  both.add(checkpoint.run_id);
  both.add(d.run_id());
  auto both_text = both.str();
  return fenced(
    owner, std::move(checkpoint),
    [&](sql_tx& tx, journal_entry& e) {
      auto* m = std::get_if<outgoing_message>(&d.what);
      auto stored = m ? (send_in(tx, *m) ? resolve_result::resolved
                                         : resolve_result::unknown_id)
                      : resolve_in(tx, std::get<resolution>(d.what), true);
      d.settle(e, stored);
    },
    [&](sql_tx& tx) {
      if (tx.dialect() == sql_dialect::postgresql)
        tx.run(lock_runs, {std::string_view{both_text}});
    });
}

std::optional<journal_entry>
sql_store::record_event(const fence& owner, journal_entry checkpoint,
                        const std::string& key, const std::string& value) {
  static const sql_query upsert{
    "upsert_event",
    "INSERT INTO {s}events (run_id, key, value, updated_at) VALUES ($1, $2, "
    "$3, $4) ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, "
    "updated_at = excluded.updated_at"};
  // The value is the checkpoint's payload too: the journal shows what was
  // published.
  return fenced(owner, std::move(checkpoint),
                [&](sql_tx& tx, journal_entry& e) {
                  e.payload = value;
                  tx.run(upsert, {std::string_view{e.run_id},
                                  std::string_view{key}, sql_bytes{value},
                                  e.created_at_ms});
                });
}

std::optional<journal_entry>
sql_store::record_phase(const fence& owner, journal_entry checkpoint,
                        const std::string& phase) {
  static const sql_query set_phase{
    "set_saga_phase", "UPDATE {s}runs SET saga_phase = $2 WHERE id = $1"};
  return fenced(owner, std::move(checkpoint),
                [&](sql_tx& tx, journal_entry& e) {
                  e.payload = phase;
                  tx.run(set_phase,
                         {std::string_view{e.run_id}, std::string_view{phase}});
                });
}

std::optional<journal_entry> sql_store::run_transaction(
  const fence& owner, journal_entry checkpoint,
  const std::function<std::string(sql_session&)>& body) {
  return fenced(owner, std::move(checkpoint),
                [&](sql_tx& tx, journal_entry& e) {
                  e.payload = body(tx.user_session());
                });
}

} // namespace perdure::persistence
