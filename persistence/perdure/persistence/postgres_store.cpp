#include "perdure/persistence/postgres_store.hpp"

#include <pqxx/pqxx>

#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "perdure/pqxx_session.hpp"
#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/detail/migrations.hpp"
#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/sql/pg_sql.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/detail/retry.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"

namespace perdure::persistence {

using detail::holds_lease;
using detail::qualified_run_columns;
using detail::read_entry;
using detail::read_run;
using detail::run_column_count;
using detail::run_columns;

namespace {

detail::failure_kind classify(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const pqxx::broken_connection&) {
    return detail::failure_kind::reconnect;
  } catch (const pqxx::in_doubt_error&) {
    // Callers make their writes idempotent under the fence, so re-running
    // after re-checking on a fresh connection is safe.
    return detail::failure_kind::reconnect;
  } catch (const pqxx::transaction_rollback&) {
    return detail::failure_kind::retry; // serialization failure, deadlock
  } catch (const pqxx::sql_error& ex) {
    auto& state = ex.sqlstate();
    // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
    // 08xxx connection exceptions.
    if (state.rfind("57P0", 0) == 0 || state.rfind("08", 0) == 0)
      return detail::failure_kind::reconnect;
  } catch (...) {
  }
  return detail::failure_kind::permanent;
}

bool owns(pqxx::transaction_base& w, const fence& owner,
          const std::string& run_id, std::int64_t lease);

/// Fills `out`'s creation flags: for each of `runs`, whether its id is in
/// `inserted`, whether it was stored ENQUEUED though asked PENDING, and
/// its inbox place.
void creation_flags(const std::vector<run_record>& runs,
                    std::unordered_map<std::string, inserted_run>& inserted,
                    batch_result& out) {
  // A re-sent batch (in-doubt commit) finds its own runs: not "inserted"
  // by this call, which callers resolve by reading the run.
  out.created.reserve(runs.size());
  out.enqueued.reserve(runs.size());
  out.inbox_seqs.reserve(runs.size());
  for (auto& run : runs) {
    auto i = inserted.find(run.id);
    auto found = i != inserted.end();
    out.created.push_back(found);
    out.enqueued.push_back(found && i->second.enqueued
                           && run.status == run_status::pending);
    out.inbox_seqs.push_back(found ? i->second.inbox_seq : 0);
    if (found)
      inserted.erase(i);
  }
}

/// Reads a created run's tag row value, `<inbox_seq>:<id>`.
std::pair<std::string, std::int64_t> read_created(const std::string& value) {
  auto colon = value.find(':');
  return {value.substr(colon + 1), std::stoll(value.substr(0, colon))};
}


std::string bytes(const pqxx::field& f) {
  return pqxx::binarystring{f}.str();
}




/// Returns the UPDATE that records final statuses, fenced, its seven array
/// parameters numbered from `first`. Runs are found by primary key
/// (`= ANY`): a join alone lets the planner scan the whole runs table.
std::string complete_sql(const std::string& s, int first) {
  auto p = [&](int i, const char* type) {
    return "$" + std::to_string(first + i) + "::" + type + "[]";
  };
  return "UPDATE " + s
         + "runs r SET status = u.status, output = decode(u.output, 'hex'), "
           "error = u.error, updated_at = u.at FROM unnest("
         + p(0, "text") + ", " + p(1, "text") + ", " + p(2, "bigint") + ", "
         + p(3, "text") + ", " + p(4, "text") + ", " + p(5, "text") + ", "
         + p(6, "bigint")
         + ") AS u(id, executor, epoch, status, output, error, at) WHERE r.id "
           "= ANY("
         + p(0, "text")
         + ") AND r.id = u.id AND r.executor = u.executor AND r.epoch = "
           "u.epoch AND (r.status = 'PENDING' OR r.status = u.status) "
           "RETURNING r.id, r.parent_id, u.at";
}

/// Returns how a batch's fence names a run it let through: `<epoch>:<id>`.
std::string owned_key(std::int64_t epoch, const std::string& id) {
  return std::to_string(epoch) + ":" + id;
}

/// Returns the INSERT of many runs (ten array parameters numbered from
/// `first`): new ids inserted, taken ones left alone; the inserted ids come
/// back.
std::string create_runs_sql(const std::string& s, int first) {
  auto p = [&](int i, const char* type) {
    return "$" + std::to_string(first + i) + "::" + type + "[]";
  };
  // An invocation takes the next inbox number, in the order unnest gives
  // the rows (a function scan: a batch keeps its order). One to hand to
  // its key's actor (PENDING under the key's epoch) is stored ENQUEUED if
  // older calls of the key wait that the actor has not taken: it follows
  // them through the inbox (per-key order across processes).
  return "INSERT INTO " + s
         + "runs (id, name, status, inputs, executor, epoch, app_version, "
           "created_at, updated_at, parent_id, deadline, object_type, "
           "object_key, inbox_seq) SELECT i.id, i.name, CASE WHEN i.otype IS "
           "NOT NULL AND i.status = 'PENDING' AND EXISTS (SELECT 1 FROM "
         + s
         + "runs h WHERE h.object_type = i.otype AND h.object_key = i.okey "
           "AND h.status IN ('ENQUEUED', 'PENDING') AND (h.status = "
           "'ENQUEUED' OR h.executor <> i.executor OR h.epoch <> i.epoch)) "
           "THEN 'ENQUEUED' ELSE i.status END, "
           "decode(i.inputs, 'hex'), i.executor, i.epoch, i.app_version, "
           "i.created_at, i.created_at, i.parent, i.deadline, i.otype, i.okey, "
           "CASE WHEN i.otype IS NULL THEN NULL ELSE nextval('"
         + s + "inbox_seq') END FROM unnest("
         + p(0, "text") + ", " + p(1, "text") + ", " + p(2, "text") + ", "
         + p(3, "text") + ", " + p(4, "text") + ", " + p(5, "bigint") + ", "
         + p(6, "text") + ", " + p(7, "bigint") + ", " + p(8, "text") + ", "
         + p(9, "bigint") + ", " + p(10, "text") + ", " + p(11, "text")
         + ") AS i(id, name, status, inputs, executor, epoch, app_version, "
           "created_at, parent, deadline, otype, okey) ON CONFLICT (id) DO "
           "NOTHING RETURNING id, status, COALESCE(inbox_seq, 0) AS seq";
}

/// Adds `c` to the seven arrays a completion is written from.
void add_completion(const completion_write& c, detail::pg_array& ids,
                    detail::pg_array& execs, detail::pg_array& epochs,
                    detail::pg_array& statuses, detail::pg_array& outputs,
                    detail::pg_array& errors, detail::pg_array& ats) {
  ids.add(c.run_id);
  execs.add(c.owner.executor);
  epochs.add(c.owner.epoch);
  statuses.add(to_string(c.status));
  outputs.add_opt(c.output ? std::optional{detail::to_hex(*c.output)}
                           : std::nullopt);
  errors.add_opt(c.error);
  ats.add(c.at_ms);
}

/// Returns the condition that a run's workflow is one of `names` (a text[]
/// parameter) and its app version none or `version` (see `claim_filter`).
std::string claimable(const std::string& names, const std::string& version) {
  return "name = ANY(" + names + "::text[]) AND (app_version = '' OR "
         "app_version = " + version + ") AND object_type IS NULL";
}

} // namespace

/// A batch's run creations as the twelve arrays of `create_runs_sql`.
struct postgres_store::creation_arrays {
  detail::pg_array ids, names, statuses, inputs, execs, epochs, versions, ats,
    parents, deadlines, object_types, object_keys;

  explicit creation_arrays(const std::vector<run_record>& runs) {
    for (auto& run : runs) {
      parents.add_opt(run.parent_id);
      deadlines.add_opt(run.deadline_ms ? std::optional{std::to_string(
                                            *run.deadline_ms)}
                                        : std::nullopt);
      ids.add(run.id);
      names.add(run.name);
      statuses.add(to_string(run.status));
      inputs.add(detail::to_hex(run.inputs));
      execs.add(run.owner.executor);
      epochs.add(run.owner.epoch);
      versions.add(run.app_version);
      ats.add(run.created_at_ms);
      object_types.add_opt(run.object_type.empty()
                             ? std::nullopt
                             : std::optional{run.object_type});
      object_keys.add_opt(run.object_type.empty()
                            ? std::nullopt
                            : std::optional{run.object_key});
    }
  }

  /// Inserts them (`create_runs`), noting the ids inserted in `out`.
  void insert(pqxx::transaction_base& w, batch_outcome& out) const {
    for (const auto& row : w.exec_prepared(
           "create_runs", ids.str(), names.str(), statuses.str(), inputs.str(),
           execs.str(), epochs.str(), versions.str(), ats.str(), parents.str(),
           deadlines.str(), object_types.str(), object_keys.str()))
      out.inserted.emplace(row[0].as<std::string>(),
                           inserted_run{row[1].as<std::string>() == "ENQUEUED",
                                        row[2].as<std::int64_t>()});
  }
};

namespace {


/// Returns the CTE that marks the passivated parents of the runs in CTE
/// `completed` as delivered to (a parent in memory is woken in-process and
/// is not locked here: its appends may be in another batch).
std::string wake_parents_sql(const std::string& s) {
  return "woken AS (UPDATE " + s
         + "runs p SET wake_at = 0 FROM completed c WHERE p.id = c.parent_id "
           "AND p.wake_at > c.at AND p.id NOT IN (SELECT id FROM completed))";
}

} // namespace

/// Wraps the libpqxx connection so the header needs no libpqxx.
struct postgres_store::connection : pqxx::connection {
  using pqxx::connection::connection;
};

template <class F>
auto postgres_store::with_retry(F&& attempt) {
  try {
    return detail::with_retry(
      retry_budget_,
      [&] {
        if (!conn_)
          connect(); // the first connection (the constructor's)
        return attempt();
      },
      classify, [this] { connect(); });
  } catch (const pqxx::failure& ex) {
    throw perdure::error(errc::store_error, ex.what());
  }
}

postgres_store::postgres_store(const store_options& opts)
  : url_(opts.url), schema_(opts.schema), retry_budget_(opts.retry_budget),
    lease_epoch_(opts.lease_epoch),
    idle_transaction_timeout_(opts.idle_transaction_timeout) {
  // A server starting up or shutting down refuses connections for a
  // while: retried within the budget like any lost connection.
  try {
    with_retry([] { return 0; }); // connects (see with_retry)
  } catch (const perdure::error& ex) {
    throw perdure::error(ex.code() == errc::store_error
                           ? errc::store_unavailable
                           : ex.code(),
                         std::string{"cannot connect to PostgreSQL: "}
                           + ex.what());
  }
}

postgres_store::~postgres_store() = default;

void postgres_store::connect() {
  // The old connection stays until a new one is ready: a store whose
  // retries ran out keeps a (broken) connection, never a null one, and its
  // next call reconnects.
  auto c = std::make_unique<connection>(url_);
  lease_locked_ = false; // a session lock dies with its connection
  if (idle_transaction_timeout_.count() > 0) {
    pqxx::nontransaction n{*c};
    n.exec("SET idle_in_transaction_session_timeout = "
           + std::to_string(idle_transaction_timeout_.count()));
  }
  auto s = c->quote_name(schema_) + ".";
  schema_prefix_ = s;
  prepared_.clear(); // a new connection has none
  // Insert-or-read in one statement (one round trip, autocommit). A row
  // inserted by a transaction still in flight is not visible to the read
  // half: the caller retries.
  c->prepare("create_run",
             "WITH ins AS (INSERT INTO " + s
               + "runs (id, name, status, inputs, executor, epoch, "
                 "app_version, created_at, updated_at, parent_id, deadline, "
                 "object_type, object_key, inbox_seq, call_chain) VALUES ($1, "
                 "$2, CASE WHEN $11::text IS NOT NULL AND $3 = 'PENDING' AND "
                 "EXISTS (SELECT 1 FROM " + s
               + "runs h WHERE h.object_type = $11 AND h.object_key = $12 AND "
                 "h.status IN ('ENQUEUED', 'PENDING') AND (h.status = "
                 "'ENQUEUED' OR h.executor <> $5 OR h.epoch <> $6)) THEN "
                 "'ENQUEUED' ELSE $3 END, $4, $5, $6, $7, $8, $8, $9, $10, $11, "
                 "$12, CASE WHEN $11::text IS NULL THEN NULL ELSE nextval('"
               + s + "inbox_seq') END, $13) ON CONFLICT (id) DO NOTHING "
                     "RETURNING "
               + run_columns + ", inbox_seq) SELECT true, " + run_columns
               + ", inbox_seq FROM ins UNION ALL SELECT false, " + run_columns
               + ", inbox_seq FROM " + s
               + "runs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM ins)");
  // Many runs at once (the writer batches starts): new ids inserted, taken
  // ones left alone; the inserted ids come back.
  c->prepare("create_runs", create_runs_sql(s, 1));
  // The run and its PENDING descendants (none below a compensating saga:
  // those are its compensations' calls; below a saga going forward, only
  // child sagas: a plain child or call is what a step in flight waits
  // for, which finishes and is compensated): sagas going forward are
  // signalled (due at once if passivated), compensating ones left alone,
  // other runs end. One UPDATE whose CASEs PostgreSQL evaluates on the row
  // as it is once locked: a phase committed meanwhile is seen. The run's
  // own parent, if it is passivated (waiting for this end, maybe), is
  // marked delivered.
  auto ends = std::string{"(saga_phase IS NULL OR saga_phase = 'DONE')"};
  // A deadline timer ($3) cancels only the attempt it was armed for (also
  // re-checked on the locked row: a retry may have put the item back).
  auto at_deadline = std::string{
    "($3::bigint IS NULL OR (status = 'PENDING' AND deadline = $3))"};
  c->prepare("cancel_run",
             "WITH RECURSIVE tree(id, phase) AS (SELECT id, saga_phase FROM " + s
               + "runs WHERE id = $1 AND (status = 'PENDING' OR (status = "
                 "'ENQUEUED' AND (queue_name IS NOT NULL OR object_key IS NOT "
                 "NULL))) AND " + at_deadline
               + " UNION SELECT r.id, "
                 "r.saga_phase FROM "
               + s
               + "runs r JOIN tree t ON r.parent_id = t.id WHERE r.status = "
                 "'PENDING' AND t.phase IS DISTINCT FROM 'COMPENSATING' AND "
                 "(t.phase IS DISTINCT FROM 'FORWARD' OR r.saga_phase IS NOT "
                 "NULL)), "
                 "changed AS (UPDATE "
               + s + "runs SET status = CASE WHEN " + ends
               + " THEN 'CANCELLED' ELSE status END, error = CASE WHEN " + ends
               + " THEN 'cancelled' ELSE error END, wake_at = CASE WHEN " + ends
               + " THEN NULL WHEN wake_at > 0 THEN 0 ELSE wake_at END, "
                 "cancel_requested_at = CASE WHEN "
               + ends + " THEN cancel_requested_at ELSE COALESCE("
                 "cancel_requested_at, $2) END, updated_at = CASE WHEN " + ends
               + " THEN $2 ELSE updated_at END WHERE id IN (SELECT id FROM "
                 "tree) AND status IN ('PENDING', 'ENQUEUED') AND saga_phase "
                 "IS DISTINCT FROM 'COMPENSATING' AND (id <> $1 OR "
               + at_deadline + ") RETURNING id, parent_id, status), "
                 "woken AS (UPDATE "
               + s
               + "runs p SET wake_at = 0 FROM changed c WHERE c.id = $1 AND "
                 "c.status = 'CANCELLED' AND p.id = c.parent_id AND p.wake_at "
                 "> $2) SELECT id, status <> 'CANCELLED' FROM changed");
  c->prepare("notify", "SELECT pg_notify($1, $2)");
  // A completed saga's undo: its journal up to its DONE phase, its inputs,
  // and a cancellation to observe there.
  c->prepare("copy_journal_for_undo",
             "INSERT INTO " + s
               + "journal (run_id, seq, kind, name, outcome, payload, error, "
                 "created_at) SELECT $1, seq, kind, "
               + detail::undo_entry_name("$2::text", "$1::text")
               + ", outcome, payload, error, created_at FROM "
               + s + "journal WHERE run_id = $2 AND seq < COALESCE((SELECT "
                     "min(seq) FROM "
               + s
               + "journal WHERE run_id = $2 AND kind = 'phase' AND payload = "
                 "convert_to('DONE', 'UTF8')), 2147483647)");
  c->prepare("request_undo",
             "UPDATE " + s + "runs u SET inputs = o.inputs, saga_phase = "
               "'FORWARD', cancel_requested_at = $3 FROM " + s
               + "runs o WHERE u.id = $1 AND o.id = $2 RETURNING "
               + qualified_run_columns("u"));
  c->prepare("claim_runs",
             "UPDATE " + s
               + "runs SET epoch = epoch + 1, recovery_attempts = "
                 "recovery_attempts + CASE WHEN wake_at > $2 THEN 0 ELSE 1 "
                 "END WHERE executor = $1 AND status = 'PENDING' AND "
               + claimable("$3", "$4") + " AND " + holds_lease(s, "$1", "$5")
               + " RETURNING " + run_columns);
  c->prepare("release_unclaimable",
             "UPDATE " + s
               + "runs SET executor = '', epoch = epoch + 1 WHERE executor = "
                 "$1 AND status = 'PENDING' AND object_type IS NULL AND NOT ("
               + claimable("$2", "$3") + ") AND " + holds_lease(s, "$1", "$4"));
  // The fence: lock FOR SHARE the named runs still under the expected owner
  // and epoch, and keep those still PENDING. A row a takeover updates
  // meanwhile is re-checked against the new epoch before it is locked
  // (READ COMMITTED re-evaluation). The three-column `IN (SELECT unnest)`
  // is a hashed semi join on a small table and primary-key lookups on a
  // large one; `= ANY(..)` or a join against `unnest` as a nested loop made
  // the fence quadratic in the batch size (runs x ids comparisons, most of
  // the fence's cost under load). OFFSET 0 keeps the planner from pushing
  // `status = 'PENDING'` into the scan, where it would rather walk every
  // PENDING run through the partial index.
  // The epoch comes back too: two copies of one run in a batch (an actor
  // replaced by a newer claim in this process) are told apart by it.
  // The lease (parameter `lease`, 0: unchecked) is the executor's: once a
  // takeover declared it lapsed, nothing of its holder gets through.
  auto fence_sql = [&](int lease) { return detail::fence_sql(s, lease); };
  c->prepare("fence_check", fence_sql(4));
  // A small batch is one statement in autocommit: one round trip, one
  // commit (what a lone workflow's latency needs). The fence locks the owned run rows FOR SHARE, so a concurrent
  // takeover (which bumps the epoch) either waits for this commit or makes
  // this statement see its epoch.
  // Three shapes, so the hot statement carries nothing it does not use:
  // appends only (a lone workflow's steps), appends and completions, and
  // with creations too (starts sharing a batch with steps).
  auto batch_sql = [&](bool completing, bool creating) {
    auto lease = creating ? 31 : completing ? 19 : 12;
    return "WITH owned AS (" + fence_sql(lease) + "), "
           "appended AS (INSERT INTO "
           + s
           + "journal (run_id, seq, kind, name, outcome, payload, error, "
             "created_at) SELECT j.run_id, j.seq, j.kind, j.name, "
             "j.outcome, decode(j.payload, 'hex'), j.error, j.created_at "
             "FROM unnest($4::text[], $5::int[], $6::text[], $7::text[], "
             "$8::smallint[], $9::text[], $10::text[], $11::bigint[], "
             "$3::bigint[]) AS j(run_id, seq, kind, name, outcome, "
             "payload, error, created_at, epoch) WHERE (j.run_id, "
             "j.epoch) IN (SELECT id, epoch FROM owned) ON CONFLICT "
             "(run_id, seq) DO NOTHING RETURNING 1)"
           + (completing ? ", completed AS (" + complete_sql(s, 12) + "), "
                             + wake_parents_sql(s)
                         : std::string{})
           + (creating ? ", created AS (" + create_runs_sql(s, 19) + ")"
                       : std::string{})
           + " SELECT 'a', epoch::text || ':' || id FROM owned UNION ALL "
           + (completing ? "SELECT 'c', id FROM completed UNION ALL "
                         : std::string{})
           + (creating ? "SELECT CASE WHEN status = 'ENQUEUED' THEN 'e' "
                         "ELSE 'n' END, seq::text || ':' || id FROM created "
                         "UNION ALL "
                       : std::string{})
           + "SELECT 'i', count(*)::text FROM appended";
  };
  c->prepare("write_batch_appending", batch_sql(false, false));
  c->prepare("write_batch", batch_sql(true, false));
  c->prepare("write_batch_creating", batch_sql(true, true));
  c->prepare("complete_runs", "WITH completed AS (" + complete_sql(s, 1)
                                + "), " + wake_parents_sql(s)
                                + " SELECT id FROM completed");
  c->prepare("insert_entry",
             "INSERT INTO " + s
               + "journal (run_id, seq, kind, name, outcome, payload, error, "
                 "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)");
  c->prepare("get_entry",
             "SELECT run_id, seq, kind, name, outcome, payload, error, "
             "created_at FROM "
               + s + "journal WHERE run_id = $1 AND seq = $2");
  c->prepare("get_entries",
             "SELECT j.run_id, j.seq, j.kind, j.name, j.outcome, j.payload, "
             "j.error, j.created_at FROM "
               + s
               + "journal j WHERE (j.run_id, j.seq) IN (SELECT * FROM "
                 "unnest($1::text[], $2::int[]))");
  c->prepare("claim_run",
             "UPDATE " + s
               + "runs SET epoch = epoch + $7, wake_at = NULL, recovery_attempts "
                 "= recovery_attempts + $3 WHERE id = $1 AND executor = $2 AND "
                 "status = 'PENDING' AND ($7 = 1 OR wake_at IS NOT NULL) AND "
               + claimable("$4", "$5") + " AND " + holds_lease(s, "$2", "$6")
               + " RETURNING " + run_columns);
  prepare_executors(*c, s);
  prepare_objects(*c, s);
  conn_ = std::move(c);
}

void postgres_store::migrate() {
  with_retry([&] {
    auto schema = conn_->quote_name(schema_);
    pqxx::work w{*conn_};
    // Serialise concurrent start-ups of several processes.
    w.exec("SELECT pg_advisory_xact_lock(7302198253)");
    w.exec("CREATE SCHEMA IF NOT EXISTS " + schema);
    w.exec("CREATE TABLE IF NOT EXISTS " + schema
           + ".schema_migrations (version INT PRIMARY KEY, description TEXT "
             "NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    std::set<int> applied;
    for (const auto& row :
         w.exec("SELECT version FROM " + schema + ".schema_migrations"))
      applied.insert(row[0].as<int>());
    for (auto& m : detail::postgres_migrations(schema)) {
      if (applied.count(m.version))
        continue;
      for (auto& sql : m.statements)
        w.exec(sql);
      w.exec_params("INSERT INTO " + schema
                      + ".schema_migrations (version, description) VALUES "
                        "($1, $2)",
                    m.version, m.description);
    }
    w.commit();
    return 0;
  });
  // Prepared statements refer to tables that may only exist now.
  with_retry([&] {
    connect();
    return 0;
  });
}

create_result postgres_store::create_run(const run_record& run) {
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    // A null `const char*` is bound as SQL NULL (libpqxx 6 has no
    // std::optional parameters).
    auto deadline = run.deadline_ms ? std::to_string(*run.deadline_ms)
                                    : std::string{};
    auto res = w.exec_prepared(
      "create_run", run.id, run.name, std::string{to_string(run.status)},
      pqxx::binarystring{run.inputs.data(), run.inputs.size()},
      run.owner.executor, run.owner.epoch, run.app_version, run.created_at_ms,
      run.parent_id ? run.parent_id->c_str() : nullptr,
      run.deadline_ms ? deadline.c_str() : nullptr,
      run.object_type.empty() ? nullptr : run.object_type.c_str(),
      run.object_type.empty() ? nullptr : run.object_key.c_str(),
      run.call_chain.empty() ? nullptr : run.call_chain.c_str());
    if (res.empty()) {
      // Another transaction inserted it and has not committed yet: retry.
      throw pqxx::serialization_failure("run row not yet visible");
    }
    create_result result;
    result.created = res[0][0].as<bool>();
    result.run = read_run(res[0], 1);
    return result;
  });
}

std::optional<create_result>
postgres_store::create_child(const fence& parent, const run_record& child) {
  auto deadline = child.deadline_ms ? std::to_string(*child.deadline_ms)
                                    : std::string{};
  return with_retry([&]() -> std::optional<create_result> {
    pqxx::work w{*conn_};
    if (!child.parent_id || !owns(w, parent, *child.parent_id, lease()))
      return std::nullopt; // rolls back
    auto res = w.exec_prepared(
      "create_run", child.id, child.name, std::string{to_string(child.status)},
      pqxx::binarystring{child.inputs.data(), child.inputs.size()},
      child.owner.executor, child.owner.epoch, child.app_version,
      child.created_at_ms, child.parent_id->c_str(),
      child.deadline_ms ? deadline.c_str() : nullptr,
      child.object_type.empty() ? nullptr : child.object_type.c_str(),
      child.object_type.empty() ? nullptr : child.object_key.c_str(),
      child.call_chain.empty() ? nullptr : child.call_chain.c_str());
    if (res.empty())
      throw pqxx::serialization_failure("run row not yet visible");
    create_result result;
    result.created = res[0][0].as<bool>();
    if (result.created && !child.undo_of.empty()) {
      w.exec_prepared("copy_journal_for_undo", child.id, child.undo_of);
      auto set = w.exec_prepared("request_undo", child.id, child.undo_of,
                                 child.created_at_ms);
      if (set.empty())
        return std::nullopt; // no such saga: rolls back (never: fenced)
      result.run = read_run(set[0]);
    } else {
      result.run = read_run(res[0], 1);
      if (!res[0][1 + run_column_count].is_null())
        result.run.inbox_seq = res[0][1 + run_column_count].as<std::int64_t>();
    }
    w.commit();
    return result;
  });
}

std::optional<run_record> postgres_store::claim_run(std::string_view id,
                                                    std::string_view executor,
                                                    const claim_filter& filter,
                                                    bool count_attempt,
                                                    bool new_epoch) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  return with_retry([&]() -> std::optional<run_record> {
    pqxx::nontransaction w{*conn_};
    auto res = w.exec_prepared("claim_run", std::string{id},
                               std::string{executor}, count_attempt ? 1 : 0,
                               names.str(), filter.app_version, lease(),
                               new_epoch ? 1 : 0);
    if (res.empty())
      return std::nullopt;
    return read_run(res[0]);
  });
}

std::vector<cancelled_run>
postgres_store::cancel_run(std::string_view run_id, std::int64_t at_ms,
                           std::optional<std::int64_t> deadline_ms) {
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    std::vector<cancelled_run> runs;
    detail::opt_param deadline{deadline_ms};
    for (const auto& row : w.exec_prepared("cancel_run", std::string{run_id},
                                           at_ms, deadline.get()))
      runs.push_back({row[0].as<std::string>(), row[1].as<bool>()});
    return runs;
  });
}

namespace {

/// Returns whether `owner` holds run `run_id` (and locks its row FOR SHARE
/// until `w` ends, so no takeover commits in between).
bool owns(pqxx::transaction_base& w, const fence& owner,
          const std::string& run_id, std::int64_t lease) {
  detail::pg_array ids, execs, epochs;
  ids.add(run_id);
  execs.add(owner.executor);
  epochs.add(owner.epoch);
  return !w.exec_prepared("fence_check", ids.str(), execs.str(), epochs.str(),
                          lease)
            .empty();
}

} // namespace

void postgres_store::notify(std::string_view payload) {
  with_retry([&] {
    pqxx::nontransaction w{*conn_};
    w.exec_prepared("notify", detail::delivery_channel(schema_),
                    std::string{payload});
  });
}


std::vector<run_record>
postgres_store::claim_pending_runs(std::string_view executor,
                                   const claim_filter& filter,
                                   std::int64_t now_ms) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  return with_retry([&] {
    pqxx::work w{*conn_};
    std::vector<run_record> result;
    for (const auto& row :
         w.exec_prepared("claim_runs", std::string{executor}, now_ms,
                         names.str(), filter.app_version, lease()))
      result.push_back(read_run(row));
    w.commit();
    std::sort(result.begin(), result.end(), [](auto& a, auto& b) {
      return std::tie(a.created_at_ms, a.id) < std::tie(b.created_at_ms, b.id);
    });
    return result;
  });
}

namespace {

/// Fills `result.recorded` if some owned append of `batch` met an index
/// holding an outcome (fewer than the owned appends were inserted).
void read_recorded(pqxx::transaction_base& w,
                   const persistence::write_batch& batch,
                   std::uint64_t appended, batch_result& result) {
  std::size_t owned = 0;
  for (bool ok : result.appends)
    owned += ok ? 1 : 0;
  if (appended == owned)
    return; // every owned append inserted: nothing stood in the way
  // Some index held an outcome already. Whatever is stored now stands;
  // report it for every owned append (rare: in-doubt writes sent again, or
  // two copies of a run).
  detail::pg_array r_ids, r_seqs;
  for (std::size_t i = 0; i < batch.appends.size(); ++i)
    if (result.appends[i]) {
      r_ids.add(batch.appends[i].entry.run_id);
      r_seqs.add(batch.appends[i].entry.seq);
    }
  std::map<std::pair<std::string, std::int32_t>, journal_entry> stored;
  for (const auto& row :
       w.exec_prepared("get_entries", r_ids.str(), r_seqs.str())) {
    auto e = read_entry(row);
    auto key = std::make_pair(e.run_id, e.seq);
    stored.emplace(std::move(key), std::move(e));
  }
  result.recorded.resize(batch.appends.size());
  for (std::size_t i = 0; i < batch.appends.size(); ++i) {
    auto& e = batch.appends[i].entry;
    auto found = stored.find({e.run_id, e.seq});
    if (result.appends[i] && found != stored.end())
      result.recorded[i] = found->second;
  }
}

} // namespace

batch_result postgres_store::write_batch(const persistence::write_batch& batch) {
  auto result = batch.creates.empty() && batch.appends.empty()
                    && batch.completions.empty()
                  ? batch_result{}
                  : write_runs(batch);
  if (!batch.invocations.empty())
    result.invocations = commit_invocations(batch.invocations);
  return result;
}

batch_result postgres_store::write_runs(const persistence::write_batch& batch) {
  detail::pg_array f_ids, f_execs, f_epochs;
  detail::pg_array ids, seqs, kinds, names, outcomes, payloads, errors, ats;
  for (auto& a : batch.appends) {
    auto& e = a.entry;
    f_ids.add(e.run_id);
    f_execs.add(a.owner.executor);
    f_epochs.add(a.owner.epoch);
    ids.add(e.run_id);
    seqs.add(e.seq);
    kinds.add(to_string(e.kind));
    names.add(e.name);
    outcomes.add(static_cast<long long>(e.outcome));
    payloads.add(detail::to_hex(e.payload));
    errors.add(e.error);
    ats.add(e.created_at_ms);
  }
  detail::pg_array c_ids, c_execs, c_epochs, c_status, c_out, c_err, c_at;
  for (auto& c : batch.completions)
    add_completion(c, c_ids, c_execs, c_epochs, c_status, c_out, c_err, c_at);
  creation_arrays n{batch.creates};
  // Re-running after an in-doubt commit is safe: a journal index written
  // already is kept (and reported), a completion to the same status is
  // accepted, a run created already is reported as taken.
  return with_retry([&] {
    batch_outcome out;
    if (batch.appends.size() >= copy_threshold) {
      try {
        copy_batch(batch, n, f_ids.str(), f_execs.str(), f_epochs.str(),
                   {c_ids.str(), c_execs.str(), c_epochs.str(), c_status.str(),
                    c_out.str(), c_err.str(), c_at.str()},
                   out);
        return make_result(batch, out);
      } catch (const pqxx::unique_violation&) {
        // An index written before (an in-doubt batch sent again): the
        // statement below keeps (and reports) what is stored.
        out = batch_outcome{};
      }
    }
    pqxx::nontransaction w{*conn_};
    if (batch.appends.empty() && batch.completions.empty()) {
      // Creations alone (calls, starts): the lean statement.
      n.insert(w, out);
      return make_result(batch, out);
    }
    auto rows = batch.creates.empty() && batch.completions.empty()
                  ? w.exec_prepared("write_batch_appending", f_ids.str(),
                                    f_execs.str(), f_epochs.str(), ids.str(),
                                    seqs.str(), kinds.str(), names.str(),
                                    outcomes.str(), payloads.str(),
                                    errors.str(), ats.str(), lease())
                : batch.creates.empty()
                  ? w.exec_prepared("write_batch", f_ids.str(), f_execs.str(),
                                    f_epochs.str(), ids.str(), seqs.str(),
                                    kinds.str(), names.str(), outcomes.str(),
                                    payloads.str(), errors.str(), ats.str(),
                                    c_ids.str(), c_execs.str(), c_epochs.str(),
                                    c_status.str(), c_out.str(), c_err.str(),
                                    c_at.str(), lease())
                  : w.exec_prepared(
                      "write_batch_creating", f_ids.str(), f_execs.str(),
                      f_epochs.str(), ids.str(), seqs.str(), kinds.str(),
                      names.str(), outcomes.str(), payloads.str(), errors.str(),
                      ats.str(), c_ids.str(), c_execs.str(), c_epochs.str(),
                      c_status.str(), c_out.str(), c_err.str(), c_at.str(),
                      n.ids.str(), n.names.str(), n.statuses.str(),
                      n.inputs.str(), n.execs.str(), n.epochs.str(),
                      n.versions.str(), n.ats.str(), n.parents.str(),
                      n.deadlines.str(), n.object_types.str(),
                      n.object_keys.str(), lease());
    for (const auto& row : rows) {
      auto tag = row[0].as<std::string>();
      auto value = row[1].as<std::string>();
      if (tag == "a")
        out.owned.insert(std::move(value));
      else if (tag == "c")
        out.done.insert(std::move(value));
      else if (tag == "n" || tag == "e") {
        auto [id, seq] = read_created(value);
        out.inserted.emplace(std::move(id), inserted_run{tag == "e", seq});
      }
      else
        out.appended = std::stoull(value);
    }
    auto result = make_result(batch, out);
    read_recorded(w, batch, out.appended, result);
    return result;
  });
}


batch_result postgres_store::make_result(const persistence::write_batch& batch,
                                         batch_outcome& out) {
  batch_result result;
  creation_flags(batch.creates, out.inserted, result);
  result.appends.reserve(batch.appends.size());
  for (auto& a : batch.appends)
    result.appends.push_back(
      out.owned.count(owned_key(a.owner.epoch, a.entry.run_id)) > 0);
  for (auto& c : batch.completions)
    result.completions.push_back(out.done.count(c.run_id) > 0);
  return result;
}

void postgres_store::copy_batch(const persistence::write_batch& batch,
                                const creation_arrays& n,
                                const std::string& f_ids,
                                const std::string& f_execs,
                                const std::string& f_epochs,
                                const std::array<std::string, 7>& completions,
                                batch_outcome& out) {
  // A large batch: creations, fence, then COPY (several times cheaper per
  // row than INSERT ... SELECT), then completions, in one transaction.
  pqxx::work w{*conn_};
  if (!batch.creates.empty())
    n.insert(w, out);
  for (const auto& row : w.exec_prepared("fence_check", f_ids, f_execs, f_epochs,
                                          lease()))
    out.owned.insert(owned_key(row[1].as<std::int64_t>(),
                               row[0].as<std::string>()));
  if (!out.owned.empty()) {
    pqxx::stream_to stream{w, conn_->quote_name(schema_) + ".journal",
                           std::vector<std::string>{"run_id", "seq", "kind",
                                                    "name", "outcome", "payload",
                                                    "error", "created_at"}};
    for (auto& a : batch.appends) {
      auto& e = a.entry;
      if (out.owned.count(owned_key(a.owner.epoch, e.run_id)) == 0)
        continue;
      stream << std::make_tuple(e.run_id, e.seq, std::string{to_string(e.kind)},
                                e.name, static_cast<int>(e.outcome),
                                "\\x" + detail::to_hex(e.payload), e.error,
                                e.created_at_ms);
      ++out.appended; // COPY inserts every row or fails
    }
    stream.complete();
  }
  if (!batch.completions.empty()) {
    auto& c = completions;
    for (const auto& row : w.exec_prepared("complete_runs", c[0], c[1], c[2],
                                           c[3], c[4], c[5], c[6]))
      out.done.insert(row[0].as<std::string>());
  }
  w.commit();
}

} // namespace perdure::persistence

// -- executors and listing --------------------------------------------------------

namespace perdure::persistence {

namespace {


/// Returns the first key of this schema's executor locks: a hash of the
/// schema's name (the second key is the executor's `lock_key`), so two
/// schemas in one database never share a lock.
std::uint32_t lock_class(const std::string& schema) {
  std::uint32_t h = 2166136261u; // FNV-1a
  for (unsigned char ch : schema) {
    h ^= ch;
    h *= 16777619u;
  }
  return h;
}

} // namespace

void postgres_store::prepare_executors(connection& c,
                                       const std::string& s) {
  auto cls = lock_class(schema_);
  auto cls_key = std::to_string(static_cast<std::int32_t>(cls));
  // Every lease epoch comes from one sequence (see migration 6).
  auto epochs = c.quote(s + "executor_epochs");
  // Lapsed: no heartbeat for the executor's own timeout (a stalled or
  // cut-off holder), or its session lock is free (its process died) and it
  // missed four heartbeats (a holder whose connection broke reconnects and
  // locks again first). Right after a server restart every lock is free and
  // every heartbeat old: holders get a timeout's time to come back. One
  // that has beaten since the restart took its lock first (a renewal locks,
  // then beats), so a free lock says it died as at any other time.
  auto lapsed
    = "e.state = 'live' AND (GREATEST(e.heartbeat_at, "
      "pg_postmaster_start_time()) < now() - e.lease_ms * interval "
      "'1 millisecond' OR (e.heartbeat_at < now() - interval '1 second' AND "
      "(pg_postmaster_start_time() < now() - e.lease_ms * interval '1 "
      "millisecond' OR e.heartbeat_at > pg_postmaster_start_time()) AND NOT "
      "EXISTS (SELECT 1 FROM pg_locks l WHERE "
      "l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM "
      "pg_database WHERE datname = current_database()) AND l.classid = "
      + std::to_string(cls)
      + "::oid AND l.objid = e.lock_key::oid AND l.objsubid = 2)))";
  c.prepare("lease_insert", "INSERT INTO " + s
                              + "executors (id) VALUES ($1) ON CONFLICT (id) "
                                "DO NOTHING");
  c.prepare("lease_key", "SELECT lock_key, instance, state FROM " + s
                           + "executors WHERE id = $1 FOR UPDATE");
  c.prepare("lease_lock", "SELECT pg_try_advisory_lock(" + cls_key
                            + ", $1::int), pg_backend_pid(), (SELECT "
                              "backend_start::text FROM pg_stat_activity "
                              "WHERE pid = pg_backend_pid())");
  // A connection that broke on this side may live on on the server for a
  // while, holding the lock: the new one ends it (same role, allowed).
  c.prepare("lease_unlock_stale",
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN "
            "pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = "
            "'advisory' AND l.granted AND l.classid = "
              + std::to_string(cls)
              + "::oid AND l.objid = $1::int::oid AND l.objsubid = 2 AND "
                "l.pid = $2 AND a.backend_start::text = $3 AND l.pid <> "
                "pg_backend_pid()");
  // A holder whose lease is not live (lapsed, stopped, or no heartbeat for
  // its lease period) holds the lock from a session that lives on: a
  // process partitioned away, which TCP keepalive ends only after hours.
  // Its runs were taken over and its writes are fenced: the restarted
  // process of the same id ends that session.
  c.prepare("lease_end_lapsed_holder",
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE "
            "l.locktype = 'advisory' AND l.granted AND l.database = (SELECT "
            "oid FROM pg_database WHERE datname = current_database()) AND "
            "l.classid = "
              + std::to_string(cls)
              + "::oid AND l.objid = $1::int::oid AND l.objsubid = 2 AND "
                "l.pid <> pg_backend_pid() AND EXISTS (SELECT 1 FROM "
              + s
              + "executors e WHERE e.id = $2 AND (e.state <> 'live' OR "
                "e.heartbeat_at < now() - e.lease_ms * interval '1 "
                "millisecond'))");
  c.prepare("lease_unlock", "SELECT pg_advisory_unlock(" + cls_key
                              + ", $1::int)");
  c.prepare("lease_take",
            "UPDATE " + s
              + "executors SET epoch = nextval(" + epochs
              + "), state = 'live', instance = "
                "$2, app_version = $3, lease_ms = $4, heartbeat_at = now(), "
                "started_at = now() WHERE id = $1 RETURNING epoch");
  c.prepare("lease_renew",
            "WITH hb AS (UPDATE " + s
              + "executors SET heartbeat_at = now() WHERE id = $1 AND epoch = "
                "$2 AND state = 'live' RETURNING id) SELECT 'h', id FROM hb "
                "UNION ALL SELECT 'l', e.id FROM "
              + s + "executors e WHERE e.id <> $1 AND " + lapsed);
  c.prepare("lease_lapse", "UPDATE " + s
                             + "executors e SET epoch = nextval(" + epochs
                             + "), state = 'lapsed' WHERE id = $1 AND "
                             + lapsed + " RETURNING id");
  c.prepare("lease_release",
            "UPDATE " + s
              + "executors SET epoch = nextval(" + epochs
              + "), state = 'stopped' WHERE id = $1 AND epoch = $2");
  // Runs nobody live holds: of lapsed or stopped executors (their rows
  // locked FOR SHARE, so a holder coming back waits for this takeover, and
  // a run it claimed meanwhile is re-checked) or started by clients.
  auto orphaned = "(r.executor = '' OR r.executor IN (SELECT id FROM gone))";
  c.prepare(
    "take_over",
    "WITH gone AS (SELECT id FROM " + s
      + "executors WHERE state <> 'live' FOR SHARE), cand AS (SELECT r.id FROM "
      + s + "runs r WHERE r.status = 'PENDING' AND " + orphaned + " AND "
      + claimable("$2", "$3")
      + " AND ($4::text IS NULL OR r.id = $4)), share AS (SELECT CASE WHEN "
        "$4::text IS NOT NULL THEN 1 ELSE GREATEST(1, ceil((SELECT count(*) "
        "FROM cand)::numeric / GREATEST(1, (SELECT count(*) FROM "
      + s
      + "executors WHERE state = 'live'))))::bigint END AS n), picked AS "
        "(SELECT r.id FROM "
      + s + "runs r WHERE r.id IN (SELECT id FROM cand) AND r.status = "
      + "'PENDING' AND " + orphaned
      + " ORDER BY r.created_at, r.id LIMIT (SELECT n FROM share) FOR UPDATE "
        "SKIP LOCKED) UPDATE "
      + s
      + "runs r SET executor = $1, epoch = r.epoch + 1, recovery_attempts = "
        "r.recovery_attempts + CASE WHEN r.executor = '' OR r.wake_at > $5 "
        "THEN 0 ELSE 1 END FROM picked WHERE r.id = picked.id AND "
      + holds_lease(s, "$1", "$6") + " RETURNING "
      + qualified_run_columns("r"));
  c.prepare("count_unclaimable",
            "SELECT count(*) FROM " + s
              + "runs WHERE status = 'PENDING' AND (executor = $1 OR executor "
                "= '' OR executor IN (SELECT id FROM "
              + s + "executors WHERE state <> 'live')) AND object_type IS "
                "NULL AND NOT ("
              + claimable("$2", "$3") + ")");
  // Rows a takeover or a returning holder has locked are skipped.
  c.prepare("forget_executors",
            "DELETE FROM " + s + "executors WHERE id IN (SELECT e.id FROM " + s
              + "executors e WHERE e.state <> 'live' AND NOT EXISTS (SELECT 1 "
                "FROM "
              + s
              + "runs r WHERE r.executor = e.id AND r.status = 'PENDING') FOR "
                "UPDATE SKIP LOCKED)");
}

std::int64_t postgres_store::acquire_lease(const lease_request& r) {
  return with_retry([&]() -> std::int64_t {
    {
      pqxx::nontransaction n{*conn_};
      n.exec_prepared("lease_insert", r.executor);
    }
    // The row locked: a takeover of this id under way finishes first.
    pqxx::work w{*conn_};
    auto row = w.exec_prepared("lease_key", r.executor);
    if (row.empty())
      throw pqxx::serialization_failure{"executor row forgotten meanwhile"};
    auto key = row[0][0].as<std::int32_t>();
    if (!(lease_locked_ && lease_key_ == key)) {
      bool locked = lock_lease(w, key, false);
      if (!locked
          && !w.exec_prepared("lease_end_lapsed_holder", key, r.executor)
                .empty()) {
        // Its session ends within moments of the signal.
        for (int i = 0; i < 100 && !locked; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds{20});
          locked = lock_lease(w, key, false);
        }
      }
      if (!locked)
        throw perdure::error(
          errc::executor_in_use,
          "executor id '" + r.executor
            + "' is held by a live process (instance "
            + row[0][1].as<std::string>()
            + "); give each process its own executor id, or use "
              "perdure::client in processes that only start and signal work");
    }
    auto epoch = w.exec_prepared("lease_take", r.executor, r.instance,
                                 r.app_version, r.timeout_ms)[0][0]
                   .as<std::int64_t>();
    w.commit();
    return epoch;
  });
}

bool postgres_store::lock_lease(pqxx::transaction_base& t, std::int32_t key,
                                bool end_stale) {
  auto locked = t.exec_prepared("lease_lock", key)[0];
  if (!locked[0].as<bool>() && end_stale && !lease_session_.empty()) {
    // Our own previous connection may still hold it on the server (its
    // pid and start time, so never another process's session): end it;
    // the lock is free at a next beat.
    t.exec_prepared("lease_unlock_stale", key, lease_pid_, lease_session_);
    return false;
  }
  if (!locked[0].as<bool>())
    return false;
  lease_key_ = key;
  lease_locked_ = true;
  lease_pid_ = locked[1].as<std::int32_t>();
  lease_session_ = locked[2].as<std::string>();
  return true;
}

std::optional<lease_renewal>
postgres_store::renew_lease(std::string_view executor, std::int64_t epoch) {
  return with_retry([&]() -> std::optional<lease_renewal> {
    pqxx::nontransaction w{*conn_};
    // A new connection: the session lock went with the old one. If it is
    // still held, the epoch below says whose: the lock only speeds up the
    // detection of a dead holder, so this one tries again next beat (and
    // the caller acts as a holder without it: see `lease_renewal`).
    lease_renewal renewal;
    if (!lease_locked_) {
      renewal.relocked = true;
      lock_lease(w, lease_key_, true);
    }
    bool held = false;
    for (const auto& row :
         w.exec_prepared("lease_renew", std::string{executor}, epoch)) {
      if (row[0].as<std::string>() == "h")
        held = true;
      else
        renewal.lapsed.push_back(row[1].as<std::string>());
    }
    if (!held)
      return std::nullopt;
    renewal.locked = lease_locked_;
    return renewal;
  });
}

bool postgres_store::lapse_executor(std::string_view id) {
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    return !w.exec_prepared("lease_lapse", std::string{id}).empty();
  });
}

void postgres_store::release_lease(std::string_view executor,
                                   std::int64_t epoch) {
  with_retry([&] {
    pqxx::nontransaction w{*conn_};
    w.exec_prepared("lease_release", std::string{executor}, epoch);
    if (lease_locked_)
      w.exec_prepared("lease_unlock", lease_key_);
    lease_locked_ = false;
    return 0;
  });
}

std::vector<run_record>
postgres_store::take_over(std::string_view executor, const claim_filter& filter,
                          std::optional<std::string_view> only,
                          std::int64_t now_ms) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  auto one = only ? std::string{*only} : std::string{};
  return with_retry([&] {
    pqxx::work w{*conn_};
    std::vector<run_record> result;
    for (const auto& row : w.exec_prepared(
           "take_over", std::string{executor}, names.str(), filter.app_version,
           only ? one.c_str() : nullptr, now_ms, lease()))
      result.push_back(read_run(row));
    w.commit();
    if (result.empty() && !only) { // nothing left to take
      pqxx::nontransaction n{*conn_};
      n.exec_prepared("forget_executors");
    }
    std::sort(result.begin(), result.end(), [](auto& a, auto& b) {
      return std::tie(a.created_at_ms, a.id) < std::tie(b.created_at_ms, b.id);
    });
    return result;
  });
}

std::int64_t postgres_store::release_unclaimable(std::string_view executor,
                                                 const claim_filter& filter) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    return static_cast<std::int64_t>(
      w.exec_prepared("release_unclaimable", std::string{executor},
                      names.str(), filter.app_version, lease())
        .affected_rows());
  });
}

std::int64_t postgres_store::count_unclaimable(std::string_view executor,
                                               const claim_filter& filter) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  return with_retry([&] {
    pqxx::read_transaction t{*conn_};
    return t
      .exec_prepared("count_unclaimable", std::string{executor}, names.str(),
                     filter.app_version)[0][0]
      .as<std::int64_t>();
  });
}

// -- objects ------------------------------------------------------------------------

namespace {

/// Whether the holder of object row `o` (an alias) has no live lease.
std::string holder_gone(const std::string& s, const std::string& o) {
  return "(" + o + ".executor = '' OR NOT EXISTS (SELECT 1 FROM " + s
         + "executors e WHERE e.id = " + o + ".executor AND e.state = "
           "'live'))";
}

/// Returns the condition that the oldest unended invocation of key
/// (`type`, `key`) is one a process may run, or that there is none:
/// `handlers` (a text[] parameter) names what it registered as
/// `type\x1fhandler`, `version` its app version (see object_claim_filter).
std::string oldest_admitted(const std::string& s, const std::string& type,
                            const std::string& key, const std::string& handlers,
                            const std::string& version) {
  return "COALESCE((SELECT (h.object_type || chr(31) || h.name) = ANY("
         + handlers + "::text[]) AND (h.app_version = '' OR h.app_version = "
         + version + ") FROM " + s + "runs h WHERE h.object_type = " + type
         + " AND h.object_key = " + key
         + " AND h.status IN ('ENQUEUED', 'PENDING') ORDER BY h.inbox_seq "
           "LIMIT 1), true)";
}

/// Returns what `can` registers as `oldest_admitted` takes it.
std::string handler_array(const object_claim_filter& can) {
  detail::pg_array out;
  for (auto& [type, handlers] : can.types)
    for (auto& h : handlers)
      out.add(type + '\x1f' + h);
  return out.str();
}

/// Reads invocations selected as the run columns then `inbox_seq`, of
/// key (`type`, `key`), oldest first.
std::vector<run_record> read_inbox(const pqxx::result& res,
                                   std::string_view type,
                                   std::string_view key) {
  std::vector<std::pair<std::int64_t, run_record>> rows;
  for (const auto& row : res) {
    auto run = read_run(row);
    run.object_type = type;
    run.object_key = key;
    if (!row[run_column_count].is_null())
      run.inbox_seq = row[run_column_count].as<std::int64_t>();
    rows.emplace_back(row[run_column_count].is_null()
                        ? 0
                        : row[run_column_count].as<std::int64_t>(),
                      std::move(run));
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<run_record> out;
  out.reserve(rows.size());
  for (auto& r : rows)
    out.push_back(std::move(r.second));
  return out;
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

object_record read_object(const pqxx::row& row, std::string_view type,
                          std::string_view key) {
  object_record o;
  o.type = type;
  o.key = key;
  o.state = row[0].is_null() ? std::string{} : bytes(row[0]);
  o.version = row[1].as<std::int64_t>();
  o.owner.executor = row[2].as<std::string>();
  o.owner.epoch = row[3].as<std::int64_t>();
  o.updated_at_ms = row[4].as<std::int64_t>();
  return o;
}

} // namespace

void postgres_store::prepare_objects(connection& c, const std::string& s) {
  auto cols = qualified_run_columns("r") + ", r.inbox_seq";
  // Taken if free, ours, or its holder's lease is not live; the epoch goes
  // up at every claim, so a copy of the key elsewhere is fenced.
  // Taken if free, ours, or its holder's lease is not live, and its oldest
  // invocation can run here (else a key of ours is given up); the epoch
  // goes up at every claim, so a copy of the key elsewhere is fenced.
  c.prepare("claim_object",
            "WITH head AS (SELECT "
              + oldest_admitted(s, "$1", "$2", "$6", "$7")
              + " AS ok), released AS (UPDATE " + s
              + "objects SET executor = '', updated_at = $4 WHERE type = $1 "
                "AND key = $2 AND executor = $3 AND NOT (SELECT ok FROM head) "
                "RETURNING 1), claimed AS (INSERT INTO " + s
              + "objects AS o (type, key, state, version, executor, epoch, "
                "updated_at) SELECT $1, $2, NULL, 0, $3, 1, $4 WHERE (SELECT "
                "ok FROM head) AND "
              + holds_lease(s, "$3", "$5")
              + " ON CONFLICT (type, key) DO UPDATE SET executor = "
                "EXCLUDED.executor, epoch = o.epoch + 1, updated_at = "
                "EXCLUDED.updated_at WHERE (o.executor = EXCLUDED.executor OR "
              + holder_gone(s, "o") + ") AND " + holds_lease(s, "$3", "$5")
              + " AND (SELECT ok FROM head) RETURNING o.state, o.version, "
                "o.executor, o.epoch, o.updated_at) SELECT state, version, "
                "executor, epoch, updated_at, false FROM claimed UNION ALL "
                "SELECT NULL::bytea, 0::bigint, ''::text, 0::bigint, "
                "0::bigint, true FROM released");
  // A PENDING one that may have begun counts a recovery: the oldest (calls
  // of a key run in order), or one that recorded something (a shared one
  // running beside it, or one run while the one before it committed). An
  // invocation that takes its process down every time must end (see
  // max_recovery_attempts).
  c.prepare("claim_inbox",
            "UPDATE " + s
              + "runs r SET executor = $3, epoch = $4, status = 'PENDING', "
                "wake_at = NULL, recovery_attempts = r.recovery_attempts + "
                "CASE WHEN r.status = 'PENDING' AND (r.inbox_seq = (SELECT "
                "min(h.inbox_seq) FROM " + s
              + "runs h WHERE h.object_type = $1 AND h.object_key = $2 AND "
                "h.status IN ('ENQUEUED', 'PENDING')) OR EXISTS (SELECT 1 FROM "
              + s
              + "journal j WHERE j.run_id = r.id)) THEN 1 ELSE 0 END WHERE "
                "r.object_type = $1 AND r.object_key = $2 AND r.status IN "
                "('ENQUEUED', 'PENDING') RETURNING "
              + cols);
  c.prepare("release_object",
            "UPDATE " + s
              + "objects SET executor = '', updated_at = $5 WHERE type = $1 "
                "AND key = $2 AND executor = $3 AND epoch = $4 RETURNING 1");
  // A statement of its own after the release, which locked the key's row:
  // it sees what a take of the inbox committed meanwhile (a CTE of the
  // release would read the runs as they were before it waited).
  c.prepare("requeue_released",
            "UPDATE " + s
              + "runs SET status = 'ENQUEUED', executor = '', epoch = 0 WHERE "
                "object_type = $1 AND object_key = $2 AND status = 'PENDING' "
                "AND executor = $3");
  c.prepare("hold_object",
            "SELECT 1 FROM " + s
              + "objects WHERE type = $1 AND key = $2 AND executor = $3 AND "
                "epoch = $4 AND "
              + holds_lease(s, "$3", "$5") + " FOR SHARE");
  // ENQUEUED ones, and PENDING ones stored under another epoch (handed to
  // an actor that left meanwhile).
  c.prepare("take_inbox",
            "UPDATE " + s
              + "runs r SET executor = $3, epoch = $4, status = 'PENDING' "
                "WHERE r.object_type = $1 AND r.object_key = $2 AND (r.status "
                "= 'ENQUEUED' OR (r.status = 'PENDING' AND (r.executor <> $3 "
                "OR r.epoch <> $4))) RETURNING "
              + cols);
  c.prepare("claimable_objects",
            "SELECT DISTINCT r.object_type, r.object_key FROM " + s
              + "runs r LEFT JOIN " + s
              + "objects o ON o.type = r.object_type AND o.key = r.object_key "
                "WHERE r.object_type = ANY($2::text[]) AND r.status IN "
                "('ENQUEUED', 'PENDING') AND (((o.type IS NULL OR "
              + holder_gone(s, "o") + ") AND "
              + oldest_admitted(s, "r.object_type", "r.object_key", "$5", "$6")
              + ") OR (o.executor = $1 AND ($4 OR r.status = 'ENQUEUED' OR "
                "r.epoch <> o.epoch))) LIMIT $3");
  // An invocation's end: its key held by its owner (locked, so a claim
  // waits for this commit), its run completed under the same fence, and
  // the key's state set to the newest state among the invocations that
  // completed. Several of one key in a batch (a pipeline) commit all or
  // none: their runs are locked and counted first (a refused one, e.g.
  // cancelled, must not let the next one commit a state built on it). A
  // lone one needs no lock: refused, it writes no state.
  c.prepare(
    "commit_invocations",
    "WITH inv AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
    "$4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], "
    "$9::bigint[], $10::text[], $12::bigint[], $13::bool[]) WITH ORDINALITY "
    "AS i(type, key, run_id, executor, epoch, status, output, error, at, "
    "state, base, checks, ord)), multi AS (SELECT type, key, count(*) AS n "
    "FROM inv GROUP BY type, key HAVING count(*) > 1), ready AS (SELECT "
    "i.type, i.key FROM inv i JOIN " + s
      + "runs r ON r.id = i.run_id AND r.executor = i.executor AND r.epoch = "
        "i.epoch AND (r.status = 'PENDING' OR r.status = i.status) WHERE "
        "(i.type, i.key) IN (SELECT type, key FROM multi) FOR UPDATE OF r), "
        "held AS (SELECT o.type, o.key FROM " + s
      + "objects o WHERE (o.type, o.key, o.executor, o.epoch) IN (SELECT type, "
        "key, executor, epoch FROM inv) AND o.version = COALESCE((SELECT "
        "min(i.base) FROM inv i WHERE i.type = o.type AND i.key = o.key AND "
        "i.checks), o.version) AND COALESCE((SELECT m.n FROM multi m WHERE "
        "m.type = o.type AND m.key = o.key), 0) = (SELECT count(*) FROM ready "
        "y WHERE y.type = o.type AND y.key = o.key) AND "
      + holds_lease(s, "($4::text[])[1]", "$11")
      + " FOR UPDATE), done AS (UPDATE " + s
      + "runs r SET status = i.status, output = decode(i.output, 'hex'), error "
        "= i.error, updated_at = i.at FROM inv i WHERE r.id = i.run_id AND "
        "r.executor = i.executor AND r.epoch = i.epoch AND (r.status = "
        "'PENDING' OR r.status = i.status) AND (i.type, i.key) IN (SELECT "
        "type, key FROM held) RETURNING r.id, r.parent_id, i.at), woken AS "
        "(UPDATE " + s
      + "runs p SET wake_at = 0 FROM done d WHERE p.id = d.parent_id AND "
        "p.wake_at > d.at), stated AS (UPDATE " + s
      + "objects o SET state = decode(l.state, 'hex'), version = o.version + "
        "l.n, updated_at = l.at FROM (SELECT DISTINCT ON (type, key) type, "
        "key, state, at, count(*) OVER (PARTITION BY type, key) AS n FROM inv "
        "WHERE state IS NOT NULL AND run_id IN (SELECT id FROM done) ORDER BY "
        "type, key, ord DESC) l WHERE o.type = l.type AND o.key = l.key "
        "RETURNING 1) SELECT id FROM done");
}

std::vector<bool> postgres_store::commit_invocations(
  const std::vector<invocation_commit>& invocations) {
  detail::pg_array types, keys, ids, execs, epochs, statuses, outputs, errors,
    ats, states, bases, checks;
  for (auto& i : invocations) {
    types.add(i.object_type);
    keys.add(i.object_key);
    add_completion(i.completion, ids, execs, epochs, statuses, outputs, errors,
                   ats);
    states.add_opt(i.state ? std::optional{detail::to_hex(*i.state)}
                           : std::nullopt);
    bases.add(i.base_version);
    checks.add(i.checks_base ? "t" : "f");
  }
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    std::unordered_set<std::string> done;
    for (const auto& row : w.exec_prepared(
           "commit_invocations", types.str(), keys.str(), ids.str(),
           execs.str(), epochs.str(), statuses.str(), outputs.str(),
           errors.str(), ats.str(), states.str(), lease(), bases.str(),
           checks.str()))
      done.insert(row[0].as<std::string>());
    std::vector<bool> out;
    out.reserve(invocations.size());
    for (auto& i : invocations)
      out.push_back(done.count(i.completion.run_id) > 0);
    return out;
  });
}

std::optional<claimed_object>
postgres_store::claim_object(std::string_view type, std::string_view key,
                             std::string_view executor,
                             const object_claim_filter& can) {
  auto handlers = handler_array(can);
  return with_retry([&]() -> std::optional<claimed_object> {
    pqxx::work w{*conn_};
    auto res = w.exec_prepared("claim_object", std::string{type},
                               std::string{key}, std::string{executor},
                               wall_ms(), lease(), handlers, can.app_version);
    if (res.empty())
      return std::nullopt;
    if (res[0][5].as<bool>()) { // given up: its oldest call is not for us
      requeue_released(w, type, key, executor);
      w.commit();
      return std::nullopt;
    }
    claimed_object out;
    out.object = read_object(res[0], type, key);
    out.inbox = read_inbox(
      w.exec_prepared("claim_inbox", std::string{type}, std::string{key},
                      std::string{executor}, out.object.owner.epoch),
      type, key);
    w.commit();
    return out;
  });
}

void postgres_store::release_object(std::string_view type,
                                    std::string_view key, const fence& owner) {
  with_retry([&] {
    pqxx::work w{*conn_};
    if (!w.exec_prepared("release_object", std::string{type},
                         std::string{key}, owner.executor, owner.epoch,
                         wall_ms())
           .empty())
      requeue_released(w, type, key, owner.executor);
    w.commit();
  });
}

void postgres_store::requeue_released(pqxx::transaction_base& w,
                                      std::string_view type,
                                      std::string_view key,
                                      std::string_view executor) {
  w.exec_prepared("requeue_released", std::string{type}, std::string{key},
                  std::string{executor});
  w.exec_prepared("notify", detail::delivery_channel(schema_),
                  notice::calls(std::string{type}, std::string{key}).encode());
}

std::optional<std::vector<run_record>>
postgres_store::take_inbox(std::string_view type, std::string_view key,
                           const fence& owner) {
  return with_retry([&]() -> std::optional<std::vector<run_record>> {
    pqxx::work w{*conn_};
    if (w.exec_prepared("hold_object", std::string{type}, std::string{key},
                        owner.executor, owner.epoch, lease())
          .empty())
      return std::nullopt;
    auto out = read_inbox(w.exec_prepared("take_inbox", std::string{type},
                                          std::string{key}, owner.executor,
                                          owner.epoch),
                          type, key);
    w.commit();
    return out;
  });
}

std::vector<std::pair<std::string, std::string>>
postgres_store::claimable_objects(std::string_view executor,
                                  const object_claim_filter& can,
                                  std::int64_t limit, bool all_ours) {
  detail::pg_array names;
  for (auto& [type, handlers] : can.types)
    names.add(type);
  auto handlers = handler_array(can);
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& row : w.exec_prepared(
           "claimable_objects", std::string{executor}, names.str(), limit,
           all_ours, handlers, can.app_version))
      out.emplace_back(row[0].as<std::string>(), row[1].as<std::string>());
    return out;
  });
}

} // namespace perdure::persistence

namespace perdure::persistence {

void postgres_store::in_work(
  const std::function<void(pqxx::transaction_base&)>& body) {
  with_retry([&] {
    pqxx::work w{*conn_};
    body(w);
    w.commit();
    return 0;
  });
}

void postgres_store::in_autocommit(
  const std::function<void(pqxx::transaction_base&)>& body) {
  with_retry([&] {
    pqxx::nontransaction n{*conn_};
    body(n);
    return 0;
  });
}

} // namespace perdure::persistence

namespace perdure::persistence::detail {

std::string pg_holds_lease(const std::string& s, const std::string& executor,
                           const std::string& lease) {
  return holds_lease(s, executor, lease);
}

} // namespace perdure::persistence::detail

namespace perdure::persistence {

void postgres_store::read(const std::function<void(detail::sql_tx&)>& body) {
  with_retry([&] {
    pqxx::read_transaction t{*conn_};
    detail::pg_tx tx{t, prepared_, schema_, schema_prefix_};
    body(tx);
    return 0;
  });
}

void postgres_store::write(const std::function<void(detail::sql_tx&)>& body) {
  with_retry([&] {
    pqxx::work w{*conn_};
    detail::pg_tx tx{w, prepared_, schema_, schema_prefix_};
    body(tx);
    w.commit();
    return 0;
  });
}

void postgres_store::autocommit(
  const std::function<void(detail::sql_tx&)>& body) {
  with_retry([&] {
    pqxx::nontransaction n{*conn_};
    detail::pg_tx tx{n, prepared_, schema_, schema_prefix_};
    body(tx);
    return 0;
  });
}

} // namespace perdure::persistence
