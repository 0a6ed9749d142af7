// Virtual objects' keys on SQLite: claiming, holding, releasing and their
// inboxes.

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

std::vector<run_record> sqlite_store::take_invocations(std::string_view type,
                                                       std::string_view key,
                                                       const fence& owner,
                                                       bool all_pending) {
  std::vector<std::string> ids;
  // ENQUEUED ones, and PENDING ones: all, or those stored under another
  // epoch (handed to an actor that left meanwhile).
  // `status IN (...)` spelled as runs_inbox's condition: SQLite uses a
  // partial index only for a query whose terms name its condition (else it
  // scans every run: a cost that grows with history).
  std::vector<std::int64_t> seqs;
  auto& sel = prepare("SELECT id, rowid FROM runs WHERE object_type = ?1 AND "
                      "object_key = ?2 AND status IN ('ENQUEUED', 'PENDING') "
                      "AND (status = 'ENQUEUED' OR (?3 = 1 OR executor <> ?4 "
                      "OR epoch <> ?5)) ORDER BY rowid");
  sel.bind(1, type)
    .bind(2, key)
    .bind(3, std::int64_t{all_pending ? 1 : 0})
    .bind(4, owner.executor)
    .bind(5, owner.epoch);
  while (sel.step()) {
    ids.push_back(sel.text(0));
    seqs.push_back(sel.int64(1));
  }
  sel.reset();
  std::vector<run_record> out;
  for (auto& id : ids) {
    // A claim of a PENDING one that may have begun counts a recovery: the
    // oldest (calls of a key run in order), or one that recorded something
    // (see postgres_store's claim_inbox).
    bool oldest = &id == &ids.front();
    prepare("UPDATE runs SET executor = ?2, epoch = ?3, status = 'PENDING', "
            "wake_at = NULL, recovery_attempts = recovery_attempts + CASE "
            "WHEN ?4 = 1 AND status = 'PENDING' AND (?5 = 1 OR EXISTS "
            "(SELECT 1 FROM journal WHERE run_id = ?1)) THEN 1 ELSE 0 END "
            "WHERE id = ?1")
      .bind(1, id)
      .bind(2, owner.executor)
      .bind(3, owner.epoch)
      .bind(4, std::int64_t{all_pending ? 1 : 0})
      .bind(5, std::int64_t{oldest ? 1 : 0})
      .run();
    auto run = read_run_row(id);
    run.object_type = type;
    run.object_key = key;
    run.inbox_seq = seqs[out.size()];
    out.push_back(std::move(run));
  }
  return out;
}

std::optional<claimed_object>
sqlite_store::claim_object(std::string_view type, std::string_view key,
                           std::string_view executor,
                           const object_claim_filter& can) {
  return in_transaction([&]() -> std::optional<claimed_object> {
    // Its oldest unended call must be one this process can run.
    auto& head = prepare("SELECT name, app_version FROM runs WHERE "
                         "object_type = ?1 AND object_key = ?2 AND status IN "
                         "('ENQUEUED', 'PENDING') ORDER BY rowid LIMIT 1");
    head.bind(1, type).bind(2, key);
    bool admitted = !head.step() || can.admits(type, head.text(0), head.text(1));
    head.reset();
    if (!admitted) {
      prepare("UPDATE objects SET executor = '', updated_at = ?4 WHERE type = "
              "?1 AND key = ?2 AND executor = ?3")
        .bind(1, type)
        .bind(2, key)
        .bind(3, executor)
        .bind(4, wall_ms())
        .run();
      if (sqlite3_changes(db_) == 1)
        requeue_released(type, key, executor);
      return std::nullopt;
    }
    prepare(std::string{"INSERT INTO objects (type, key, state, version, "
                        "executor, epoch, updated_at) VALUES (?1, ?2, NULL, 0, "
                        "?3, 1, ?4) ON CONFLICT (type, key) DO UPDATE SET "
                        "executor = excluded.executor, epoch = epoch + 1, "
                        "updated_at = excluded.updated_at WHERE executor = "
                        "excluded.executor OR "}
            + holder_gone)
      .bind(1, type)
      .bind(2, key)
      .bind(3, executor)
      .bind(4, wall_ms())
      .run();
    if (sqlite3_changes(db_) != 1)
      return std::nullopt;
    auto object = get_object(type, key);
    if (!object)
      return std::nullopt;
    claimed_object out;
    out.object = std::move(*object);
    out.inbox = take_invocations(type, key, out.object.owner, true);
    return out;
  });
}

void sqlite_store::release_object(std::string_view type, std::string_view key,
                                  const fence& owner) {
  in_transaction([&] {
    prepare("UPDATE objects SET executor = '', updated_at = ?5 WHERE type = ?1 "
            "AND key = ?2 AND executor = ?3 AND epoch = ?4")
      .bind(1, type)
      .bind(2, key)
      .bind(3, owner.executor)
      .bind(4, owner.epoch)
      .bind(5, wall_ms())
      .run();
    if (sqlite3_changes(db_) == 1)
      requeue_released(type, key, owner.executor);
    return 0;
  });
}

void sqlite_store::requeue_released(std::string_view type,
                                    std::string_view key,
                                    std::string_view executor) {
  // As if stored by a client: none of them began. `status IN` names
  // runs_inbox's condition (see take_invocations).
  prepare("UPDATE runs SET status = 'ENQUEUED', executor = '', epoch = 0 "
          "WHERE object_type = ?1 AND object_key = ?2 AND status IN "
          "('ENQUEUED', 'PENDING') AND status = 'PENDING' AND executor = ?3")
    .bind(1, type)
    .bind(2, key)
    .bind(3, executor)
    .run();
  notice_in(notice::calls(std::string{type}, std::string{key}).encode());
}

std::optional<std::vector<run_record>>
sqlite_store::take_inbox(std::string_view type, std::string_view key,
                         const fence& owner) {
  return in_transaction([&]() -> std::optional<std::vector<run_record>> {
    auto object = get_object(type, key);
    if (!object || object->owner != owner)
      return std::nullopt;
    return take_invocations(type, key, owner, false);
  });
}

std::vector<std::pair<std::string, std::string>>
sqlite_store::claimable_objects(std::string_view executor,
                                const object_claim_filter& can,
                                std::int64_t limit, bool all_ours) {
  return with_retry([&] {
    std::vector<std::pair<std::string, std::string>> out;
    // A key nobody holds is claimable if its oldest call can run here (the
    // handlers as `\x1fa\x1fb\x1f`: names hold no separator).
    auto& sel = prepare(
      std::string{"SELECT DISTINCT r.object_type, r.object_key FROM runs r "
                  "LEFT JOIN objects ON objects.type = r.object_type AND "
                  "objects.key = r.object_key WHERE r.object_type = ?1 AND "
                  "r.status IN ('ENQUEUED', 'PENDING') AND ((objects.executor "
                  "= ?2 AND (?4 = 1 OR r.status = 'ENQUEUED' OR r.epoch <> "
                  "objects.epoch)) OR ((objects.type IS NULL OR "}
      + holder_gone
      + ") AND COALESCE((SELECT instr(?5, char(31) || h.name || char(31)) > "
        "0 AND (h.app_version = '' OR h.app_version = ?6) FROM runs h WHERE "
        "h.object_type = r.object_type AND h.object_key = r.object_key AND "
        "h.status IN ('ENQUEUED', 'PENDING') ORDER BY h.rowid LIMIT 1), 1))) "
        "LIMIT ?3");
    for (auto& [type, handlers] : can.types) {
      std::string names{'\x1f'};
      for (auto& h : handlers)
        names += h + '\x1f';
      sel.reset()
        .bind(1, type)
        .bind(2, executor)
        .bind(3, limit)
        .bind(4, std::int64_t{all_ours ? 1 : 0})
        .bind(5, names)
        .bind(6, can.app_version);
      while (sel.step() && static_cast<std::int64_t>(out.size()) < limit)
        out.emplace_back(sel.text(0), sel.text(1));
    }
    sel.reset();
    return out;
  });
}

} // namespace perdure::persistence
