#include "perdure/persistence/sql_store.hpp"

#include <algorithm>
#include <tuple>

#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/queue_choice.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/detail/sql/claim_sql.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/run_events.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

namespace {

/// PENDING work of executor $1 that should be in memory at $2 (the
/// runs_pending index: executor, status PENDING).
constexpr const char* awake_pending_where
  = "runs WHERE executor = $1 AND status = 'PENDING' AND (wake_at IS NULL "
    "OR wake_at <= $2)";

} // namespace

int sql_store::schema_version() {
  static const sql_query q{
    "schema_version",
    "SELECT COALESCE(MAX(version), 0) FROM {s}schema_migrations"};
  int version = 0;
  read([&](sql_tx& tx) {
    version = static_cast<int>(
      tx.first(q, {}, [](const sql_row& r) { return r.int64(0); })
        .value_or(0));
  });
  return version;
}

namespace {

using detail::claimable;

/// `q` for PostgreSQL and for SQLite, built by `text(dialect)`.
struct per_dialect {
  sql_query pg, lite;
  const sql_query& of(detail::sql_dialect d) const {
    return d == detail::sql_dialect::postgresql ? pg : lite;
  }
};

template <class Text>
per_dialect both_dialects(const std::string& name, Text text) {
  return {{name, text(detail::sql_dialect::postgresql)},
          {name, text(detail::sql_dialect::sqlite)}};
}

} // namespace

std::vector<run_record>
sql_store::claim_pending_runs(std::string_view executor,
                              const claim_filter& filter,
                              std::int64_t now_ms) {
  // A run that runs now counts a recovery; one passivated across restarts
  // does not.
  static const auto q = both_dialects("claim_runs", [](auto d) {
    return "UPDATE {s}runs SET epoch = epoch + 1, recovery_attempts = "
           "recovery_attempts + CASE WHEN wake_at > $2 THEN 0 ELSE 1 END "
           "WHERE executor = $1 AND status = 'PENDING' AND "
           + claimable(d, "$3", "$4") + " AND "
           + detail::holds_lease("{s}", "$1", "$5") + " RETURNING "
           + detail::run_columns;
  });
  std::vector<run_record> runs;
  write([&](sql_tx& tx) {
    runs.clear();
    auto names = detail::claim_names(filter, tx.dialect());
    tx.run(q.of(tx.dialect()),
           {executor, now_ms, std::string_view{names},
            std::string_view{filter.app_version}, lease_epoch()},
           [&](const sql_row& r) { runs.push_back(detail::read_run(r)); });
  });
  std::sort(runs.begin(), runs.end(), [](auto& a, auto& b) {
    return std::tie(a.created_at_ms, a.id) < std::tie(b.created_at_ms, b.id);
  });
  return runs;
}

run_store::resume_outcome
sql_store::resume_run(std::string_view run_id,
                      std::optional<std::string_view> app_version,
                      std::int64_t at_ms, std::string_view reason) {
  // A deadline that passed is dropped (it would cancel the run at once);
  // a cancelled run's request and deadline are spent.
  static const sql_query resume{
    "resume_run",
    "UPDATE {s}runs SET status = 'PENDING', executor = '', epoch = epoch + "
    "1, error = NULL, output = NULL, recovery_attempts = 0, wake_at = NULL, "
    "cancel_requested_at = CASE WHEN status = 'CANCELLED' THEN NULL ELSE "
    "cancel_requested_at END, deadline = CASE WHEN status = 'CANCELLED' OR "
    "deadline <= $2 THEN NULL ELSE deadline END, blocked_code_since = NULL, "
    "app_version = COALESCE($3, app_version), updated_at = $2 WHERE id = $1 "
    "AND status = $4 AND status IN ('ERROR', 'CANCELLED', "
    "'RETRIES_EXCEEDED', 'BLOCKED') AND queue_name IS NULL AND object_type "
    "IS NULL AND collected_at IS NULL"};
  // What failed it: the last step or transaction that failed, unless a
  // saga phase came after it (a compensated saga ends as it did).
  static const sql_query failed_at{
    "resume_cut",
    "SELECT max(seq) FROM {s}journal WHERE run_id = $1 AND kind IN ('step', "
    "'transaction') AND outcome IN (1, 2) AND seq > (SELECT COALESCE(max(seq), "
    "-1) FROM {s}journal WHERE run_id = $1 AND kind = 'phase' AND name <> "
    "'attempt')"};
  // From there on the run forgets, as a queue item's new attempt does
  // (committed transactions are kept and taken by name, not run again).
  static const sql_query marker_pg{
    "resume_marker",
    detail::new_attempt_marker("{s}journal", "$1::text", "$2", true, "$3")};
  static const sql_query marker_lite{
    "resume_marker",
    detail::new_attempt_marker("{s}journal", "$1", "$2", false, "$3")};
  static const sql_query forget{
    "resume_forget",
    detail::forgotten_by_new_attempt("{s}journal", "$1::text", "$2")};
  static const sql_query status{"run_status",
                                "SELECT status FROM {s}runs WHERE id = $1"};
  resume_outcome out;
  write([&](sql_tx& tx) {
    out = resume_outcome{};
    std::optional<std::string> version;
    if (app_version)
      version = std::string{*app_version};
    // The cut depends on the status it had: it must be the one changed (a
    // BLOCKED run claimed and ended ERROR meanwhile is read again).
    std::optional<std::string> tried;
    for (int tries = 0;; ++tries) {
      auto was = tx.first(status, {run_id},
                          [](const sql_row& r) { return r.text(0); });
      if (!was)
        return;
      out.was = parse_run_status(*was);
      if (was == tried || tries == 3) // not resumable as it is
        return;
      if (tx.run(resume, {run_id, at_ms, detail::or_null(version),
                          std::string_view{*was}})
          == 1)
        break;
      tried = std::move(was);
    }
    out.resumed = true;
    // Only an ERROR was a failure escaping; any other end keeps its
    // journal whole (a failure caught before a cancel stays caught).
    std::optional<std::int64_t> cut;
    if (out.was == run_status::error)
      tx.run(failed_at, {run_id}, [&](const sql_row& r) {
        if (!r.is_null(0))
          cut = r.int64(0);
      });
    if (cut) {
      tx.run(tx.dialect() == detail::sql_dialect::postgresql ? marker_pg
                                                             : marker_lite,
             {run_id, at_ms, *cut});
      out.dropped = tx.run(forget, {run_id, *cut});
    }
    auto what = "from " + std::string{to_string(*out.was)};
    if (cut)
      what += ", forgetting " + std::to_string(out.dropped)
              + " journal entries from index " + std::to_string(*cut);
    if (version)
      what += ", as app version '" + *version + "'";
    detail::record_run_event(tx, run_id, at_ms, "resume", what, reason, cut);
    tx.notify(notice::created(std::string{run_id}).encode());
  });
  return out;
}

bool sql_store::release_run(const fence& owner, std::string_view run_id) {
  static const sql_query q{
    "release_run",
    "UPDATE {s}runs SET executor = '', epoch = epoch + 1, wake_at = NULL "
    "WHERE id = $1 AND executor = $2 AND epoch = $3 AND status = 'PENDING'"};
  bool released = false;
  write([&](sql_tx& tx) {
    released = tx.run(q, {run_id, std::string_view{owner.executor},
                          owner.epoch}) == 1;
    if (released)
      tx.notify(notice::created(std::string{run_id}).encode());
  });
  return released;
}

bool sql_store::block_run(const fence& owner, std::string_view run_id,
                          std::string_view why, std::int64_t code_since_ms,
                          std::int64_t at_ms) {
  // It stays with its owner's name (who met it), out of memory, its epoch
  // moved on: a copy still running anywhere is fenced.
  static const sql_query q{
    "block_run",
    "UPDATE {s}runs SET status = 'BLOCKED', error = $4, blocked_code_since "
    "= $5, updated_at = $6, wake_at = NULL, epoch = epoch + 1 WHERE id = $1 "
    "AND executor = $2 AND epoch = $3 AND status = 'PENDING'"};
  std::int64_t changed = 0;
  autocommit([&](sql_tx& tx) {
    changed = tx.run(q, {run_id, std::string_view{owner.executor},
                         owner.epoch, why, code_since_ms, at_ms});
  });
  return changed == 1;
}

std::vector<run_record> sql_store::claim_blocked(std::string_view executor,
                                                 const claim_filter& filter,
                                                 std::int64_t code_since_ms,
                                                 std::int64_t limit) {
  // Counted as a recovery: code that blocks it again and again ends it
  // RETRIES_EXCEEDED in the end, as any run that cannot get through.
  static const auto q = both_dialects("claim_blocked", [](auto d) {
    return "UPDATE {s}runs SET status = 'PENDING', executor = $1, epoch = "
           "epoch + 1, error = NULL, recovery_attempts = recovery_attempts + "
           "1 WHERE id IN (SELECT id FROM {s}runs WHERE status = 'BLOCKED' "
           "AND blocked_code_since < $2 AND "
           + claimable(d, "$3", "$4") + " LIMIT $5) AND status = 'BLOCKED' "
           // Re-checked on the row itself (PostgreSQL re-reads only it):
           // move_runs may have re-stamped it since the subquery read it.
           "AND (app_version = '' OR app_version = $4) AND "
           + detail::holds_lease("{s}", "$1", "$6") + " RETURNING "
           + detail::run_columns;
  });
  std::vector<run_record> runs;
  write([&](sql_tx& tx) {
    runs.clear();
    auto names = detail::claim_names(filter, tx.dialect());
    tx.run(q.of(tx.dialect()),
           {executor, code_since_ms, std::string_view{names},
            std::string_view{filter.app_version}, limit, lease_epoch()},
           [&](const sql_row& r) { runs.push_back(detail::read_run(r)); });
  });
  return runs;
}

std::int64_t sql_store::release_unclaimable(std::string_view executor,
                                            const claim_filter& filter) {
  // Its own PENDING runs this process cannot run go to whoever can.
  static const auto q = both_dialects("release_unclaimable", [](auto d) {
    return "UPDATE {s}runs SET executor = '', epoch = epoch + 1 WHERE "
           "executor = $1 AND status = 'PENDING' AND object_type IS NULL AND "
           "NOT ("
           + claimable(d) + ") AND " + detail::holds_lease("{s}", "$1", "$4");
  });
  std::int64_t released = 0;
  autocommit([&](sql_tx& tx) {
    auto names = detail::claim_names(filter, tx.dialect());
    released = tx.run(q.of(tx.dialect()),
                      {executor, std::string_view{names},
                       std::string_view{filter.app_version}, lease_epoch()});
  });
  return released;
}

std::int64_t sql_store::count_unclaimable(std::string_view executor,
                                          const claim_filter& filter) {
  static const auto q = both_dialects("count_unclaimable", [](auto d) {
    return "SELECT count(*) FROM {s}runs WHERE status = 'PENDING' AND "
           "(executor = $1 OR executor = '' OR executor IN (SELECT id FROM "
           "{s}executors WHERE state <> 'live')) AND object_type IS NULL AND "
           "NOT ("
           + claimable(d) + ")";
  });
  std::int64_t n = 0;
  read([&](sql_tx& tx) {
    auto names = detail::claim_names(filter, tx.dialect());
    n = tx.first(q.of(tx.dialect()),
                 {executor, std::string_view{names},
                  std::string_view{filter.app_version}},
                 [](const sql_row& r) { return r.int64(0); })
          .value_or(0);
  });
  return n;
}

bool sql_store::set_wake_at(const fence& owner, std::string_view run_id,
                            std::optional<std::int64_t> wake_at_ms) {
  // A saga with a cancellation to observe does not sleep: due at once.
  static const sql_query q{
    "set_wake_at",
    "UPDATE {s}runs SET wake_at = CASE WHEN $4::bigint IS NOT NULL AND "
    "cancel_requested_at IS NOT NULL AND saga_phase IN ('FORWARD', 'DONE') "
    "THEN 0 ELSE "
    "$4::bigint END WHERE id = $1 AND executor = $2 AND epoch = $3 AND "
    "status = 'PENDING'"};
  std::int64_t changed = 0;
  autocommit([&](sql_tx& tx) {
    changed = tx.run(q, {run_id, std::string_view{owner.executor},
                         owner.epoch, detail::or_null(wake_at_ms)});
  });
  return changed == 1;
}

std::optional<run_record> sql_store::get_run(std::string_view id) {
  static const sql_query q{"get_run", "SELECT " + detail::run_columns
                                        + " FROM {s}runs WHERE id = $1"};
  std::optional<run_record> run;
  read([&](sql_tx& tx) {
    run = tx.first(q, {id}, [](const sql_row& r) { return detail::read_run(r); });
  });
  return run;
}

namespace {

/// Runs `all` once with `ids` as an array on PostgreSQL; `one` per id on
/// SQLite, which has no arrays (a statement per id costs it no round
/// trip). Calls `each` for every row.
void run_for_ids(sql_tx& tx, const sql_query& all, const sql_query& one,
                 const std::vector<std::string>& ids,
                 const sql_tx::row_fn& each) {
  if (tx.dialect() == detail::sql_dialect::postgresql) {
    detail::pg_array list;
    for (auto& id : ids)
      list.add(id);
    auto literal = list.str();
    tx.run(all, {std::string_view{literal}}, each);
    return;
  }
  for (auto& id : ids)
    tx.run(one, {std::string_view{id}}, each);
}

} // namespace

std::vector<run_record>
sql_store::get_runs(const std::vector<std::string>& ids) {
  static const sql_query all{"get_runs", "SELECT " + detail::run_columns
                                           + " FROM {s}runs WHERE id = "
                                             "ANY($1::text[])"};
  static const sql_query one{"get_run", "SELECT " + detail::run_columns
                                          + " FROM {s}runs WHERE id = $1"};
  std::vector<run_record> result;
  read([&](sql_tx& tx) {
    result.clear();
    run_for_ids(tx, all, one, ids, [&](const sql_row& r) {
      result.push_back(detail::read_run(r));
    });
  });
  return result;
}

std::optional<resolution> sql_store::get_resolution(std::string_view id) {
  static const sql_query q{
    "get_resolution", "SELECT id, run_id, seq, outcome, payload, error, "
                      "created_at FROM {s}resolutions WHERE id = $1"};
  std::optional<resolution> out;
  read([&](sql_tx& tx) {
    out = tx.first(q, {id}, [](const sql_row& r) {
      return detail::read_resolution(r);
    });
  });
  return out;
}

namespace {

/// Runs `q` with `params` and collects column 0 of every row as text.
std::vector<std::string> ids_of(sql_tx& tx, const sql_query& q,
                                std::initializer_list<detail::sql_value> params) {
  std::vector<std::string> ids;
  tx.run(q, params, [&](const sql_row& r) { ids.push_back(r.text(0)); });
  return ids;
}

} // namespace

std::vector<std::string> sql_store::awake_runs(std::string_view executor) {
  static const sql_query q{"awake_runs",
                           "SELECT id FROM {s}runs WHERE executor = $1 AND "
                           "status = 'PENDING' AND wake_at = 0"};
  std::vector<std::string> ids;
  read([&](sql_tx& tx) { ids = ids_of(tx, q, {executor}); });
  return ids;
}

std::int64_t sql_store::count_awake_pending(std::string_view executor,
                                            std::int64_t now_ms) {
  static const sql_query q{"count_awake_pending",
                           std::string{"SELECT count(*) FROM {s}"}
                             + awake_pending_where};
  std::int64_t n = 0;
  read([&](sql_tx& tx) {
    n = tx.first(q, {executor, now_ms}, [](const sql_row& r) {
            return r.int64(0);
          }).value_or(0);
  });
  return n;
}

std::vector<awake_pending>
sql_store::list_awake_pending(std::string_view executor, std::int64_t now_ms) {
  static const sql_query q{
    "list_awake_pending",
    std::string{"SELECT id, epoch, COALESCE(object_type, ''), "
                "COALESCE(object_key, '') FROM {s}"}
      + awake_pending_where};
  std::vector<awake_pending> out;
  read([&](sql_tx& tx) {
    out.clear();
    tx.run(q, {executor, now_ms}, [&](const sql_row& r) {
      out.push_back({r.text(0), r.int64(1), r.text(2), r.text(3)});
    });
  });
  return out;
}

std::vector<std::string>
sql_store::signalled_sagas(std::string_view executor) {
  static const sql_query q{
    "signalled_sagas",
    "SELECT id FROM {s}runs WHERE executor = $1 AND status = 'PENDING' AND "
    "saga_phase IN ('FORWARD', 'DONE') AND cancel_requested_at IS NOT "
    "NULL"};
  std::vector<std::string> ids;
  read([&](sql_tx& tx) { ids = ids_of(tx, q, {executor}); });
  return ids;
}

std::optional<message> sql_store::next_message(std::string_view run_id,
                                               std::string_view topic,
                                               std::int64_t after) {
  static const sql_query q{
    "next_message", "SELECT id, payload FROM {s}messages WHERE run_id = $1 "
                    "AND topic = $2 AND id > $3 ORDER BY id LIMIT 1"};
  std::optional<message> out;
  read([&](sql_tx& tx) {
    out = tx.first(q, {run_id, topic, after}, [](const sql_row& r) {
      return message{r.int64(0), r.bytes(1)};
    });
  });
  return out;
}

std::optional<std::string> sql_store::get_event(std::string_view run_id,
                                                std::string_view key) {
  static const sql_query q{
    "get_event", "SELECT value FROM {s}events WHERE run_id = $1 AND key = $2"};
  std::optional<std::string> out;
  read([&](sql_tx& tx) {
    out = tx.first(q, {run_id, key},
                   [](const sql_row& r) { return r.bytes(0); });
  });
  return out;
}

std::vector<journal_entry>
sql_store::load_journals(const std::vector<std::string>& run_ids) {
  static const sql_query all{
    "load_journals", std::string{"SELECT "} + detail::entry_columns
                       + " FROM {s}journal WHERE run_id = ANY($1::text[]) "
                         "ORDER BY run_id, seq"};
  static const sql_query one{
    "load_journal", std::string{"SELECT "} + detail::entry_columns
                      + " FROM {s}journal WHERE run_id = $1 ORDER BY seq"};
  std::vector<journal_entry> result;
  read([&](sql_tx& tx) {
    result.clear();
    run_for_ids(tx, all, one, run_ids, [&](const sql_row& r) {
      result.push_back(detail::read_entry(r));
    });
  });
  return result;
}

namespace {

/// The listing's statement for the filters `l` sets: each set filter is a
/// plain condition an index can serve (a generic plan keeps it), each
/// unset one `$n IS NULL` (so every parameter has a place and a type).
/// One prepared statement per combination of filters.
sql_query listing_statement(const listing_query& l) {
  struct condition {
    bool set;
    const char* when_set;
    const char* when_unset;
  };
  std::string ended = std::string{"status IN "} + detail::ended_statuses;
  std::string ended_after = std::string{ended} + " AND updated_at >= $16";
  std::string ended_before = std::string{ended} + " AND updated_at < $17";
  // A rare status is named as a literal beside runs_failed's condition,
  // which an index can then serve (a parameter it could not prove is in
  // the partial index); its parameters stay, checked too.
  bool failed = l.stored_status && *l.stored_status != "PENDING"
                && *l.stored_status != "ENQUEUED"
                && *l.stored_status != "SUCCESS";
  std::string status
    = failed ? std::string{detail::failed_statuses_condition} + " AND status = '"
                 + *l.stored_status + "' AND status = $2::text"
             : std::string{"status = $2::text AND "} + detail::reported_status
                 + " = $1::text";
  if (failed)
    status += " AND $1::text IS NOT NULL";
  const condition conditions[] = {
    {l.status.has_value(), status.c_str(),
     "$1::text IS NULL AND $2::text IS NULL"},
    {l.name.has_value(), "name = $3", "$3::text IS NULL"},
    {l.after.has_value(), "created_at >= $4", "$4::bigint IS NULL"},
    {l.before.has_value(), "created_at < $5", "$5::bigint IS NULL"},
    {l.cursor_at.has_value(), "(created_at, id) < ($6::bigint, $7::text)",
     "$6::bigint IS NULL AND $7::text IS NULL"},
    {l.app_version.has_value(), "app_version = $9", "$9::text IS NULL"},
    {l.executor.has_value(), "executor = $10", "$10::text IS NULL"},
    {l.parent_id.has_value(), "parent_id = $11", "$11::text IS NULL"},
    {l.queue.has_value(), "queue_name = $12", "$12::text IS NULL"},
    {l.object_type.has_value(), "object_type = $13", "$13::text IS NULL"},
    {l.object_key.has_value(), "object_key = $14", "$14::text IS NULL"},
    {l.id_prefix.has_value(),
     "substr(id, 1, length($15::text)) = $15::text", "$15::text IS NULL"},
    {l.ended_after.has_value(), ended_after.c_str(), "$16::bigint IS NULL"},
    {l.ended_before.has_value(), ended_before.c_str(),
     "$17::bigint IS NULL"},
    {l.unended, "status IN ('ENQUEUED', 'PENDING', 'BLOCKED') AND "
                "$18::bigint IS NOT NULL",
     "$18::bigint IS NULL"},
  };
  std::string name = "list_runs";
  std::string text = std::string{"SELECT id, name, "} + detail::reported_status
                     + ", executor, created_at, updated_at, error, parent_id, "
                       "app_version, queue_name, object_type, object_key, "
                       "collected_at FROM {s}runs WHERE ";
  std::uint32_t mask = 0, bit = 1;
  bool first = true;
  for (auto& c : conditions) {
    if (c.set)
      mask |= bit;
    bit <<= 1;
    text += first ? "(" : " AND (";
    text += c.set ? c.when_set : c.when_unset;
    text += ")";
    first = false;
  }
  text += " ORDER BY created_at DESC, id DESC LIMIT $8";
  name += "_" + std::to_string(mask);
  if (failed)
    name += "_" + *l.stored_status;
  return {std::move(name), std::move(text)};
}

} // namespace

run_page sql_store::list_runs(const run_filter& f) {
  auto l = listing_query::from(f);
  auto q = listing_statement(l);
  std::optional<std::int64_t> unended;
  if (l.unended)
    unended = 1;
  run_page page;
  read([&](sql_tx& tx) {
    page = {};
    using detail::or_null;
    tx.run(q,
           {or_null(l.status), or_null(l.stored_status), or_null(l.name),
            or_null(l.after), or_null(l.before), or_null(l.cursor_at),
            or_null(l.cursor_id), l.limit, or_null(l.app_version),
            or_null(l.executor), or_null(l.parent_id), or_null(l.queue),
            or_null(l.object_type), or_null(l.object_key),
            or_null(l.id_prefix), or_null(l.ended_after),
            or_null(l.ended_before), or_null(unended)},
           [&](const sql_row& r) {
             run_info info;
             info.id = r.text(0);
             info.name = r.text(1);
             info.status = parse_run_status(r.text(2)).value_or(
               run_status::error);
             info.executor = r.text(3);
             info.created_at = from_ms(r.int64(4));
             info.updated_at = from_ms(r.int64(5));
             info.error = r.opt_text(6);
             info.parent_id = r.opt_text(7);
             info.app_version = r.text(8);
             info.queue = r.opt_text(9);
             info.object_type = r.opt_text(10);
             info.object_key = r.opt_text(11);
             if (auto at = r.opt_int64(12))
               info.collected_at = from_ms(*at);
             page.runs.push_back(std::move(info));
           });
  });
  l.finish(page);
  return page;
}

std::optional<object_record> sql_store::get_object(std::string_view type,
                                                   std::string_view key) {
  static const sql_query q{"get_object",
                           "SELECT state, version, executor, epoch, "
                           "updated_at FROM {s}objects WHERE type = $1 AND "
                           "key = $2"};
  std::optional<object_record> out;
  autocommit([&](sql_tx& tx) { // one statement: no transaction around it
    out = tx.first(q, {type, key}, [&](const sql_row& r) {
      object_record o;
      o.type = type;
      o.key = key;
      o.state = r.opt_bytes(0).value_or(std::string{});
      o.version = r.int64(1);
      o.owner.executor = r.text(2);
      o.owner.epoch = r.int64(3);
      o.updated_at_ms = r.int64(4);
      return o;
    });
  });
  return out;
}

std::vector<std::string> sql_store::list_object_keys(std::string_view type,
                                                     std::string_view after,
                                                     std::int64_t limit) {
  static const sql_query q{"list_object_keys",
                           "SELECT key FROM {s}objects WHERE type = $1 AND "
                           "key > $2 ORDER BY key LIMIT $3"};
  std::vector<std::string> keys;
  autocommit([&](sql_tx& tx) { keys = ids_of(tx, q, {type, after, limit}); });
  return keys;
}

} // namespace perdure::persistence
