// The journal writer's batch on SQLite: one IMMEDIATE transaction, a
// statement per write.

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

using detail::run_columns;
using namespace detail::sqlite;

batch_result sqlite_store::write_batch(const persistence::write_batch& batch) {
  return in_transaction([&] {
    batch_result result;
    result.created.reserve(batch.creates.size());
    for (auto& run : batch.creates) {
      inserted_run made;
      result.created.push_back(insert_run(run, &made));
      result.enqueued.push_back(made.enqueued
                                && run.status == run_status::pending);
      result.inbox_seqs.push_back(made.inbox_seq);
    }
    result.appends.reserve(batch.appends.size());
    for (std::size_t i = 0; i < batch.appends.size(); ++i) {
      auto& w = batch.appends[i];
      auto ok = fenced_ok(w.entry.run_id, w.owner);
      if (ok && !insert_entry(w.entry)) {
        // The index holds an outcome already: it stands, and is reported.
        result.recorded.resize(batch.appends.size());
        result.recorded[i] = recorded_entry(w.entry.run_id, w.entry.seq);
      }
      result.appends.push_back(ok);
    }
    for (auto& c : batch.completions)
      result.completions.push_back(complete_run(c));
    result.invocations.reserve(batch.invocations.size());
    for (auto& i : batch.invocations)
      result.invocations.push_back(commit_invocation(i));
    return result;
  });
}

bool sqlite_store::complete_run(const completion_write& c) {
  // The same status again is accepted (an in-doubt completion re-sent).
  prepare("UPDATE runs SET status = ?1, output = ?2, error = ?3, updated_at = "
          "?4 WHERE id = ?5 AND executor = ?6 AND epoch = ?7 AND (status = "
          "'PENDING' OR status = ?1) AND collected_at IS NULL")
    .bind(1, to_string(c.status))
    .bind_opt_blob(2, c.output)
    .bind_opt(3, c.error)
    .bind(4, c.at_ms)
    .bind(5, c.run_id)
    .bind(6, c.owner.executor)
    .bind(7, c.owner.epoch)
    .run();
  if (sqlite3_changes(db_) != 1)
    return false;
  mark_parent_delivered(c.run_id, c.at_ms);
  return true;
}

bool sqlite_store::commit_invocation(const invocation_commit& i) {
  auto& c = i.completion;
  auto& held = prepare("SELECT 1 FROM objects WHERE type = ?1 AND key = ?2 AND "
                       "executor = ?3 AND epoch = ?4 AND (?5 IS NULL OR "
                       "version = ?5)");
  held.bind(1, i.object_type)
    .bind(2, i.object_key)
    .bind(3, c.owner.executor)
    .bind(4, c.owner.epoch)
    .bind_opt_int(5, i.checks_base ? std::optional{i.base_version}
                                   : std::nullopt);
  auto ok = held.step();
  held.reset();
  if (!ok)
    return false;
  if (!complete_run(c))
    return false;
  if (i.state)
    prepare("UPDATE objects SET state = ?1, version = version + 1, updated_at "
            "= ?2 WHERE type = ?3 AND key = ?4")
      .bind_blob(1, *i.state)
      .bind(2, c.at_ms)
      .bind(3, i.object_type)
      .bind(4, i.object_key)
      .run();
  return true;
}

bool sqlite_store::insert_entry(const journal_entry& e) {
  prepare("INSERT INTO journal (run_id, seq, kind, name, outcome, payload, "
          "error, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
          "ON CONFLICT (run_id, seq) DO NOTHING")
    .bind(1, e.run_id)
    .bind(2, std::int64_t{e.seq})
    .bind(3, to_string(e.kind))
    .bind(4, e.name)
    .bind(5, static_cast<std::int64_t>(e.outcome))
    .bind_blob(6, e.payload)
    .bind(7, e.error)
    .bind(8, e.created_at_ms)
    .run();
  return sqlite3_changes(db_) == 1;
}

/// Run `run_id` ended at `at_ms`: its parent, if passivated then, may be
/// waiting for that end.
void sqlite_store::mark_parent_delivered(std::string_view run_id,
                                         std::int64_t at_ms) {
  prepare("UPDATE runs SET wake_at = 0 WHERE id = (SELECT parent_id FROM runs "
          "WHERE id = ?1) AND wake_at > ?2")
    .bind(1, run_id)
    .bind(2, at_ms)
    .run();
}

bool sqlite_store::fenced_ok(const std::string& run_id, const fence& owner) {
  auto& sel = prepare("SELECT 1 FROM runs WHERE id = ?1 AND executor = ?2 AND "
                      "epoch = ?3 AND status = 'PENDING'");
  sel.bind(1, run_id).bind(2, owner.executor).bind(3, owner.epoch);
  auto ok = sel.step();
  sel.reset();
  return ok;
}

std::optional<journal_entry>
sqlite_store::recorded_entry(const std::string& run_id, std::int32_t seq) {
  auto& sel = prepare("SELECT run_id, seq, kind, name, outcome, payload, "
                      "error, created_at FROM journal WHERE run_id = ?1 AND "
                      "seq = ?2");
  sel.bind(1, run_id).bind(2, std::int64_t{seq});
  if (!sel.step())
    return std::nullopt;
  auto e = detail::read_entry(row{sel});
  sel.reset();
  return e;
}

} // namespace perdure::persistence
