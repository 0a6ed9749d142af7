// Creating, claiming, cancelling and taking over runs on SQLite (a
// statement per effect: SQLite has no data-modifying CTEs).

#include "perdure/persistence/sqlite_store.hpp"
#include "perdure/persistence/detail/sqlite/sqlite_internal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

namespace {

/// The patches a run took, each followed by '\x1f' (see
/// `claim_filter::admits`).
constexpr const char* patches_taken
  = "COALESCE((SELECT group_concat(pj.name || char(31), '') FROM journal pj "
    "WHERE pj.run_id = runs.id AND pj.seq < 0 AND pj.kind = 'patch'), '')";

} // namespace

using detail::run_columns;
using namespace detail::sqlite;

bool sqlite_store::insert_run(const run_record& run, inserted_run* out) {
  // An invocation to hand to its key's actor (PENDING under the key's
  // epoch) is stored ENQUEUED if older calls of the key wait that the
  // actor has not taken: it follows them through the inbox (per-key order
  // with clients on the same file). `status IN`: see take_invocations.
  auto& ins = prepare(
    "INSERT INTO runs (id, name, status, inputs, executor, epoch, "
    "app_version, created_at, updated_at, parent_id, deadline, object_type, "
    "object_key, call_chain, traceparent) VALUES (?1, ?2, CASE WHEN ?11 IS "
    "NOT NULL AND ?3 "
    "= 'PENDING' AND EXISTS (SELECT 1 FROM runs h WHERE h.object_type = ?11 "
    "AND h.object_key = ?12 AND h.status IN ('ENQUEUED', 'PENDING') AND "
    "(h.status = 'ENQUEUED' OR h.executor <> ?5 OR h.epoch <> ?6)) THEN "
    "'ENQUEUED' ELSE ?3 END, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, ?11, ?12, ?13, "
    "?14) "
    "ON CONFLICT (id) DO NOTHING RETURNING status, rowid");
  ins.bind(1, run.id)
    .bind(2, run.name)
    .bind(3, to_string(run.status))
    .bind_blob(4, run.inputs)
    .bind(5, run.owner.executor)
    .bind(6, run.owner.epoch)
    .bind(7, run.app_version)
    .bind(8, run.created_at_ms)
    .bind_opt(9, run.parent_id)
    .bind_opt_int(10, run.deadline_ms)
    .bind_opt(11, run.object_type.empty() ? std::nullopt
                                          : std::optional{run.object_type})
    .bind_opt(12, run.object_type.empty() ? std::nullopt
                                          : std::optional{run.object_key})
    .bind_opt(13, run.call_chain.empty() ? std::nullopt
                                         : std::optional{run.call_chain})
    .bind_opt(14, run.traceparent.empty() ? std::nullopt
                                          : std::optional{run.traceparent});
  if (!ins.step()) {
    ins.reset();
    return false; // the id was taken
  }
  if (out) {
    out->enqueued = ins.text(0) == "ENQUEUED";
    out->inbox_seq = run.object_type.empty() ? 0 : ins.int64(1);
  }
  while (ins.step()) {
  }
  ins.reset();
  return true;
}

run_record sqlite_store::read_run_row(std::string_view id) {
  auto& sel = prepare(std::string{"SELECT "} + run_columns
                      + " FROM runs WHERE id = ?1");
  sel.bind(1, id);
  if (!sel.step())
    throw perdure::error(errc::store_error,
                         "run vanished: " + std::string{id});
  auto run = detail::read_run(row{sel});
  sel.reset();
  return run;
}

create_result sqlite_store::create_run(const run_record& run) {
  return in_transaction([&] {
    create_result result;
    result.created = insert_run(run);
    result.run = read_run_row(run.id);
    return result;
  });
}

std::optional<create_result>
sqlite_store::create_child(const fence& parent, const run_record& child) {
  return in_transaction([&]() -> std::optional<create_result> {
    if (!child.parent_id || !fenced_ok(*child.parent_id, parent))
      return std::nullopt; // nothing written
    create_result result;
    inserted_run made;
    result.created = insert_run(child, &made);
    if (result.created && !child.undo_of.empty()) {
      // A completed saga's undo: its journal up to its DONE phase, its
      // inputs, and a cancellation to observe there.
      prepare("INSERT INTO journal (run_id, seq, kind, name, outcome, "
              "payload, error, created_at) SELECT ?1, seq, kind, "
              + detail::undo_entry_name("?2", "?1")
              + ", outcome, payload, error, created_at FROM journal WHERE run_id "
              "= ?2 AND seq < COALESCE((SELECT min(seq) FROM journal WHERE "
              "run_id = ?2 AND kind = 'phase' AND CAST(payload AS TEXT) = "
              "'DONE'), 2147483647)")
        .bind(1, child.id)
        .bind(2, child.undo_of)
        .run();
      prepare("UPDATE runs SET inputs = (SELECT inputs FROM runs WHERE id = "
              "?2), saga_phase = 'FORWARD', cancel_requested_at = ?3 WHERE id "
              "= ?1")
        .bind(1, child.id)
        .bind(2, child.undo_of)
        .bind(3, child.created_at_ms)
        .run();
    }
    result.run = read_run_row(child.id);
    result.run.inbox_seq = made.inbox_seq;
    return result;
  });
}

std::optional<run_record> sqlite_store::claim_run(std::string_view id,
                                                  std::string_view executor,
                                                  const claim_filter& filter,
                                                  bool count_attempt,
                                                  bool new_epoch) {
  return in_transaction([&]() -> std::optional<run_record> {
    // Keeping its epoch, only a passivated run (its wake-up time written).
    auto& sel = prepare("SELECT name, app_version, " + std::string{patches_taken}
                        + " FROM runs WHERE id = ?1 AND "
                        "executor = ?2 AND status = 'PENDING' AND object_type "
                        "IS NULL AND (?3 = 1 OR wake_at IS NOT NULL)");
    sel.bind(1, id).bind(2, executor).bind(3, std::int64_t{new_epoch ? 1 : 0});
    auto ok = sel.step()
              && filter.admits(sel.text(0), sel.text(1), sel.text(2));
    sel.reset();
    if (!ok)
      return std::nullopt;
    prepare("UPDATE runs SET epoch = epoch + ?3, wake_at = NULL, "
            "recovery_attempts = recovery_attempts + ?2 WHERE id = ?1")
      .bind(1, id)
      .bind(2, std::int64_t{count_attempt ? 1 : 0})
      .bind(3, std::int64_t{new_epoch ? 1 : 0})
      .run();
    return read_run_row(id);
  });
}

std::vector<cancelled_run>
sqlite_store::cancel_run(std::string_view run_id, std::int64_t at_ms,
                         std::optional<std::int64_t> deadline_ms) {
  return in_transaction(
    [&] { return cancel_in_transaction(run_id, at_ms, deadline_ms); });
}

std::vector<cancelled_run>
sqlite_store::cancel_runs(const std::vector<std::string>& run_ids,
                          std::int64_t at_ms) {
  return in_transaction([&] {
    std::vector<cancelled_run> runs;
    for (auto& id : run_ids)
      for (auto& c : cancel_in_transaction(id, at_ms, std::nullopt)) {
        notice_in((c.signalled ? notice::saga_cancel(c.id)
                               : notice::cancelled(c.id))
                    .encode());
        runs.push_back(std::move(c));
      }
    return runs;
  });
}

std::vector<cancelled_run>
sqlite_store::cancel_in_transaction(std::string_view run_id,
                                    std::int64_t at_ms,
                                    std::optional<std::int64_t> deadline_ms) {
  {
    // One statement per effect (SQLite has no data-modifying CTEs); the
    // tree is read once, before either changes it.
    struct member {
      std::string id, phase, status;
    };
    std::vector<member> tree;
    // None below a compensating saga: those are its compensations' calls;
    // below a saga going forward, only child sagas (a plain child or call
    // is what a step in flight waits for: it finishes, and is compensated).
    auto& sel = prepare(
      "WITH RECURSIVE tree(id, phase, status) AS (SELECT id, saga_phase, "
      "status FROM runs "
      "WHERE id = ?1 AND (status IN ('PENDING', 'BLOCKED') OR (status = "
      "'ENQUEUED' AND "
      "(queue_name IS NOT NULL OR object_key IS NOT NULL))) AND (?2 IS NULL OR (status IN ('PENDING', 'BLOCKED') AND "
      "deadline = ?2)) UNION SELECT r.id, r.saga_phase, r.status "
      "FROM tree t CROSS JOIN runs r WHERE r.parent_id = t.id AND r.status IN "
      "('PENDING', 'BLOCKED') AND t.phase IS NOT 'COMPENSATING' AND NOT (t.phase IS "
      "'FORWARD' AND r.saga_phase IS NULL)) SELECT id, "
      "COALESCE(phase, ''), status FROM tree");
    sel.bind(1, run_id);
    if (deadline_ms) // a deadline timer: only the attempt it was armed for
      sel.bind(2, *deadline_ms);
    else
      sel.bind_null(2);
    while (sel.step())
      tree.push_back({sel.text(0), sel.text(1), sel.text(2)});
    sel.reset();
    std::vector<cancelled_run> runs;
    bool ended_it = false;
    for (auto& [id, phase, status] : tree) {
      // A queue item waiting to retry ends as any run, saga or not.
      if (phase.empty() || status == "ENQUEUED") { // ends as any run
        prepare("UPDATE runs SET status = 'CANCELLED', error = 'cancelled', "
                "wake_at = NULL, updated_at = ?2 WHERE id = ?1")
          .bind(1, id)
          .bind(2, at_ms)
          .run();
        ended_it = ended_it || id == run_id;
        runs.push_back({id, false});
      } else if (phase == saga_phase::forward || phase == saga_phase::done) {
        prepare("UPDATE runs SET cancel_requested_at = "
                "COALESCE(cancel_requested_at, ?2), wake_at = CASE WHEN "
                "wake_at > 0 THEN 0 ELSE wake_at END WHERE id = ?1")
          .bind(1, id)
          .bind(2, at_ms)
          .run();
        runs.push_back({id, true});
      }
    }
    if (ended_it)
      mark_parent_delivered(run_id, at_ms);
    return runs;
  }
}

std::vector<run_record>
sqlite_store::claim_where(const std::string& which, std::string_view arg,
                          const claim_filter& filter,
                          std::string_view executor, std::int64_t now_ms,
                          bool adopting) {
  // One runtime per file, in an IMMEDIATE transaction: read, then write.
  std::vector<std::string> ids;
  // `+created_at`: sorted after the PENDING runs are found by runs_pending
  // (ordering by runs_created walks every run ever made).
  auto& sel = prepare("SELECT id, name, app_version, "
                      + std::string{patches_taken}
                      + " FROM runs WHERE status = "
                      "'PENDING' AND object_type IS NULL AND " + which
                      + " ORDER BY +created_at, id");
  sel.bind(1, arg);
  while (sel.step())
    if (filter.admits(sel.text(1), sel.text(2), sel.text(3)))
      ids.push_back(sel.text(0));
  sel.reset();
  std::vector<run_record> result;
  for (auto& id : ids) {
    // A run that runs now counts a recovery; one adopted from a client
    // (never run) or passivated across restarts does not.
    prepare("UPDATE runs SET epoch = epoch + 1, recovery_attempts = "
            "recovery_attempts + CASE WHEN (?4 = 1 AND executor = '') OR "
            "wake_at > ?3 THEN 0 ELSE 1 END, executor = ?2 WHERE id = ?1")
      .bind(1, id)
      .bind(2, executor)
      .bind(3, now_ms)
      .bind(4, std::int64_t{adopting ? 1 : 0})
      .run();
    result.push_back(read_run_row(id));
  }
  return result;
}

std::vector<run_record>
sqlite_store::take_over(std::string_view executor, const claim_filter& filter,
                        std::optional<std::string_view> only,
                        std::int64_t now_ms) {
  // One IN list, so runs_pending serves it (an OR of two conditions on
  // the executor is a scan).
  auto orphaned = std::string{"executor IN (SELECT '' UNION ALL SELECT id "
                              "FROM executors WHERE state <> 'live')"};
  return in_transaction([&] {
    if (only)
      return claim_where(orphaned + " AND id = ?1", *only, filter, executor,
                         now_ms, true);
    auto runs = claim_where(orphaned + " AND ?1 IS NOT NULL", "", filter,
                            executor, now_ms, true);
    if (runs.empty())
      exec("DELETE FROM executors WHERE state <> 'live' AND NOT EXISTS "
           "(SELECT 1 FROM runs r WHERE r.executor = executors.id AND "
           "r.status = 'PENDING')");
    return runs;
  });
}

} // namespace perdure::persistence
