// Statement preparation of the PostgreSQL store: every statement it uses
// on the hot path is prepared once per connection, under its name. The
// prepare_* functions are long lists of statements, one concept each
// (runs, batches, objects): read as data, not as logic, so they stay whole.

#include "perdure/persistence/postgres_store.hpp"
#include "perdure/persistence/detail/postgres/postgres_internal.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

using namespace detail::pg;

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
  prepare_runs(*c, s);
  prepare_batches(*c, s);
  prepare_executors(*c, s);
  prepare_objects(*c, s);
  conn_ = std::move(c);
}

/// Runs: creating, claiming, cancelling, saga undo.
void postgres_store::prepare_runs(connection& c, const std::string& s) {
  // Insert-or-read in one statement (one round trip, autocommit). A row
  // inserted by a transaction still in flight is not visible to the read
  // half: the caller retries.
  c.prepare("create_run",
             "WITH ins AS (INSERT INTO " + s
               + "runs (id, name, status, inputs, executor, epoch, "
                 "app_version, created_at, updated_at, parent_id, deadline, "
                 "object_type, object_key, inbox_seq, call_chain, "
                 "traceparent) VALUES ($1, "
                 "$2, CASE WHEN $11::text IS NOT NULL AND $3 = 'PENDING' AND "
                 "EXISTS (SELECT 1 FROM " + s
               + "runs h WHERE h.object_type = $11 AND h.object_key = $12 AND "
                 "h.status IN ('ENQUEUED', 'PENDING') AND (h.status = "
                 "'ENQUEUED' OR h.executor <> $5 OR h.epoch <> $6)) THEN "
                 "'ENQUEUED' ELSE $3 END, $4, $5, $6, $7, $8, $8, $9, $10, $11, "
                 "$12, CASE WHEN $11::text IS NULL THEN NULL ELSE nextval('"
               + s + "inbox_seq') END, $13, $14) ON CONFLICT (id) DO NOTHING "
                     "RETURNING "
               + run_columns + ", inbox_seq) SELECT true, " + run_columns
               + ", inbox_seq FROM ins UNION ALL SELECT false, " + run_columns
               + ", inbox_seq FROM " + s
               + "runs WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM ins)");
  // Many runs at once (the writer batches starts): new ids inserted, taken
  // ones left alone; the inserted ids come back.
  c.prepare("create_runs", create_runs_sql(s, 1));
  // The run and its PENDING descendants (none below a compensating saga:
  // those are its compensations' calls; below a saga going forward, only
  // child sagas: a plain child or call is what a step in flight waits
  // for, which finishes and is compensated): PENDING sagas going forward
  // or done (body returned: its effects stand, what follows observes) are
  // signalled (due at once if passivated), compensating ones left alone,
  // other runs end (a queue item waiting to retry too). One UPDATE whose CASEs PostgreSQL evaluates on the row
  // as it is once locked: a phase committed meanwhile is seen. The run's
  // own parent, if it is passivated (waiting for this end, maybe), is
  // marked delivered.
  auto ends = std::string{"(saga_phase IS NULL OR status = 'ENQUEUED')"};
  // A deadline timer ($3) cancels only the attempt it was armed for (also
  // re-checked on the locked row: a retry may have put the item back).
  auto at_deadline = std::string{
    "($3::bigint IS NULL OR (status IN ('PENDING', 'BLOCKED') AND deadline "
    "= $3))"};
  // `many`: an operator's bulk cancel (`cancel_runs`): every root of
  // $1::text[] at once, no deadline, and each run's notice sent by the
  // statement itself ($3 the channel, $4 and $5 the cancelled and saga
  // notices' prefixes): one round trip and one commit per batch.
  auto cancel_sql = [&](bool many) {
    auto root = many ? std::string{"id = ANY($1::text[])"}
                     : "id = $1 AND " + at_deadline;
    auto own_deadline = many ? std::string{""}
                             : " AND (id <> $1 OR " + at_deadline + ")";
    auto roots = many ? std::string{"c.id = ANY($1::text[])"}
                      : std::string{"c.id = $1"};
    auto result = many ? std::string{"SELECT id, status <> 'CANCELLED', "
                                     "pg_notify($3, CASE WHEN status <> "
                                     "'CANCELLED' THEN $5 ELSE $4 END || id) "
                                     "FROM changed"}
                       : std::string{"SELECT id, status <> 'CANCELLED' FROM "
                                     "changed"};
    return "WITH RECURSIVE tree(id, phase) AS (SELECT id, saga_phase FROM " + s
           + "runs WHERE " + root
           + " AND (status IN ('PENDING', 'BLOCKED') OR (status = 'ENQUEUED' "
             "AND (queue_name IS NOT NULL OR object_key IS NOT NULL))) UNION "
             "SELECT r.id, r.saga_phase FROM "
           + s
           + "runs r JOIN tree t ON r.parent_id = t.id WHERE r.status IN "
             "('PENDING', 'BLOCKED') AND t.phase IS DISTINCT FROM "
             "'COMPENSATING' AND (t.phase IS DISTINCT FROM 'FORWARD' OR "
             "r.saga_phase IS NOT NULL)), changed AS (UPDATE "
           + s + "runs SET status = CASE WHEN " + ends
           + " THEN 'CANCELLED' ELSE status END, error = CASE WHEN " + ends
           + " THEN 'cancelled' ELSE error END, wake_at = CASE WHEN " + ends
           + " THEN NULL WHEN wake_at > 0 THEN 0 ELSE wake_at END, "
             "cancel_requested_at = CASE WHEN "
           + ends + " THEN cancel_requested_at ELSE COALESCE("
             "cancel_requested_at, $2) END, updated_at = CASE WHEN " + ends
           + " THEN $2 ELSE updated_at END WHERE id IN (SELECT id FROM tree) "
             "AND status IN ('PENDING', 'ENQUEUED', 'BLOCKED') AND saga_phase "
             "IS DISTINCT FROM 'COMPENSATING'"
           + own_deadline
           + " RETURNING id, parent_id, status), woken AS (UPDATE " + s
           + "runs p SET wake_at = 0 FROM changed c WHERE " + roots
           + " AND c.status = 'CANCELLED' AND p.id = c.parent_id AND "
             "p.wake_at > $2) "
           + result;
  };
  c.prepare("cancel_run", cancel_sql(false));
  c.prepare("cancel_runs", cancel_sql(true));
  c.prepare("notify", "SELECT pg_notify($1, $2)");
  // A completed saga's undo: its journal up to its DONE phase, its inputs,
  // and a cancellation to observe there.
  c.prepare("copy_journal_for_undo",
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
  c.prepare("request_undo",
             "UPDATE " + s + "runs u SET inputs = o.inputs, saga_phase = "
               "'FORWARD', cancel_requested_at = $3 FROM " + s
               + "runs o WHERE u.id = $1 AND o.id = $2 RETURNING "
               + qualified_run_columns("u"));
  c.prepare("claim_run",
             "UPDATE " + s
               + "runs SET epoch = epoch + $7, wake_at = NULL, recovery_attempts "
                 "= recovery_attempts + $3 WHERE id = $1 AND executor = $2 AND "
                 "status = 'PENDING' AND ($7 = 1 OR wake_at IS NOT NULL) AND "
               + claimable("$4", "$5", "runs", s) + " AND "
               + holds_lease(s, "$2", "$6")
               + " RETURNING " + run_columns);
}

/// The journal writer's batch: the fence, appends, completions, creations.
void postgres_store::prepare_batches(connection& c, const std::string& s) {
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
  c.prepare("fence_check", fence_sql(4));
  // A small batch is one statement in autocommit: one round trip, one
  // commit (what a lone workflow's latency needs). The fence locks the owned run rows FOR SHARE, so a concurrent
  // takeover (which bumps the epoch) either waits for this commit or makes
  // this statement see its epoch.
  // Three shapes, so the hot statement carries nothing it does not use:
  // appends only (a lone workflow's steps), appends and completions, and
  // with creations too (starts sharing a batch with steps).
  auto batch_sql = [&](bool completing, bool creating) {
    auto lease = creating ? 32 : completing ? 19 : 12;
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
  c.prepare("write_batch_appending", batch_sql(false, false));
  c.prepare("write_batch", batch_sql(true, false));
  c.prepare("write_batch_creating", batch_sql(true, true));
  c.prepare("complete_runs", "WITH completed AS (" + complete_sql(s, 1)
                                + "), " + wake_parents_sql(s)
                                + " SELECT id FROM completed");
  c.prepare("get_entries",
             "SELECT j.run_id, j.seq, j.kind, j.name, j.outcome, j.payload, "
             "j.error, j.created_at FROM "
               + s
               + "journal j WHERE (j.run_id, j.seq) IN (SELECT * FROM "
                 "unnest($1::text[], $2::int[]))");
}

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
      + claimable("$2", "$3", "r", s)
      + " AND ($4::text IS NULL OR r.id = $4)), share AS (SELECT CASE WHEN "
        "$4::text IS NOT NULL THEN 1 ELSE GREATEST(1, ceil((SELECT count(*) "
        "FROM cand)::numeric / GREATEST(1, (SELECT count(*) FROM "
      + s
      + "executors WHERE state = 'live'))))::bigint END AS n), picked AS "
        "(SELECT r.id FROM "
      + s + "runs r WHERE r.id IN (SELECT id FROM cand) AND r.status = "
      + "'PENDING' AND " + orphaned
      // Re-checked on the row FOR UPDATE locks: move_runs may have
      // re-stamped it since `cand` read it.
      + " AND (r.app_version = '' OR r.app_version = $3)"
      + " ORDER BY r.created_at, r.id LIMIT (SELECT n FROM share) FOR UPDATE "
        "SKIP LOCKED) UPDATE "
      + s
      + "runs r SET executor = $1, epoch = r.epoch + 1, recovery_attempts = "
        "r.recovery_attempts + CASE WHEN r.executor = '' OR r.wake_at > $5 "
        "THEN 0 ELSE 1 END FROM picked WHERE r.id = picked.id AND "
      + holds_lease(s, "$1", "$6") + " RETURNING "
      + qualified_run_columns("r"));
  // Rows a takeover or a returning holder has locked are skipped.
  c.prepare("forget_executors",
            "DELETE FROM " + s + "executors WHERE id IN (SELECT e.id FROM " + s
              + "executors e WHERE e.state <> 'live' AND NOT EXISTS (SELECT 1 "
                "FROM "
              + s
              + "runs r WHERE r.executor = e.id AND r.status = 'PENDING') FOR "
                "UPDATE SKIP LOCKED)");
}

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
  // lone one needs no lock: refused, it writes no state. Per-key figures
  // are aggregated once (`keys`, `counted`), not per object row: with
  // hundreds of ends in a batch, correlated subqueries over `inv` made
  // the statement quadratic (issue 27: 52 ms for 395 ends).
  c.prepare(
    "commit_invocations",
    "WITH inv AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
    "$4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], "
    "$9::bigint[], $10::text[], $12::bigint[], $13::bool[]) WITH ORDINALITY "
    "AS i(type, key, run_id, executor, epoch, status, output, error, at, "
    "state, base, checks, ord)), keys AS (SELECT type, key, min(base) "
    "FILTER (WHERE checks) AS base, count(*) AS n FROM inv GROUP BY type, "
    "key), multi AS (SELECT type, key, n FROM keys WHERE n > 1), ready AS "
    "(SELECT "
    "i.type, i.key FROM inv i JOIN " + s
      + "runs r ON r.id = i.run_id AND r.executor = i.executor AND r.epoch = "
        "i.epoch AND (r.status = 'PENDING' OR r.status = i.status) WHERE "
        "(i.type, i.key) IN (SELECT type, key FROM multi) FOR UPDATE OF r), "
        "counted AS (SELECT type, key, count(*) AS n FROM ready GROUP BY "
        "type, key), held AS (SELECT o.type, o.key FROM (SELECT DISTINCT "
        "type, key, executor, epoch FROM inv) f JOIN " + s
      + "objects o ON o.type = f.type AND o.key = f.key AND o.executor = "
        "f.executor AND o.epoch = f.epoch JOIN keys k ON k.type = o.type AND "
        "k.key = o.key LEFT JOIN counted y ON y.type = k.type AND y.key = "
        "k.key WHERE o.version = COALESCE(k.base, o.version) AND (k.n = 1 OR "
        "k.n = COALESCE(y.n, 0)) AND "
      + holds_lease(s, "($4::text[])[1]", "$11")
      + " FOR UPDATE OF o), done AS (UPDATE " + s
      + "runs r SET status = i.status, output = decode(i.output, 'hex'), error "
        "= i.error, updated_at = i.at FROM inv i WHERE r.id = i.run_id AND "
        "r.executor = i.executor AND r.epoch = i.epoch AND (r.status = "
        "'PENDING' OR r.status = i.status) AND r.collected_at IS NULL AND "
        "(i.type, i.key) IN (SELECT "
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

} // namespace perdure::persistence
