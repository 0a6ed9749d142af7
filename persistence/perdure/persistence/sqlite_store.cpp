#include "perdure/persistence/sqlite_store.hpp"

#include <atomic>

#include <sqlite3.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <utility>

#include "perdure/sqlite_session.hpp"
#include "perdure/sqlite_session.hpp"
#include "perdure/persistence/detail/migrations.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/detail/retry.hpp"
#include "perdure/persistence/detail/sqlite_statement.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"

namespace perdure::persistence {

namespace {


detail::failure_kind classify(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const sqlite_failure& ex) {
    auto primary = ex.code() & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
      return detail::failure_kind::retry;
    if (primary == SQLITE_FULL)
      return detail::failure_kind::full;
  } catch (...) {
  }
  return detail::failure_kind::permanent;
}

} // namespace


// -- user SQL -----------------------------------------------------------------

using detail::run_columns;

/// The current row of a stepped statement, for the shared decoders.
class sqlite_store::row final : public detail::sql_row {
public:
  explicit row(statement& st) : st_(st) {}

  bool is_null(int col) const override {
    return st_.is_null(col);
  }
  std::int64_t int64(int col) const override {
    return st_.int64(col);
  }
  std::string text(int col) const override {
    return st_.text(col);
  }
  std::string bytes(int col) const override {
    return st_.text(col);
  }

private:
  statement& st_;
};

namespace {

} // namespace

// -- sqlite_store -------------------------------------------------------------

template <class F>
auto sqlite_store::with_retry(F&& attempt) {
  try {
    // Out of space: before the retry, the log is checkpointed into the
    // database and truncated, which gives its space back when the room
    // left lets the database take its pages (a log that only grows until
    // its next checkpoint would fill any room returned before then); and
    // the first commit after the disk filled truncates it once more (see
    // in_transaction).
    return detail::with_retry(retry_budget_, attempt, classify, [this] {
      was_full_ = true;
      // Not waiting long for readers: the retry budget is what may wait.
      sqlite3_busy_timeout(db_, 50);
      truncate_log();
      sqlite3_busy_timeout(db_, 5000);
    });
  } catch (const sqlite_failure& ex) {
    throw perdure::error(errc::store_error, ex.what());
  }
}

template <class F>
auto sqlite_store::in_transaction(F&& body) {
  return with_retry([&] {
    // IMMEDIATE takes the write lock up front: no deadlocking upgrade later.
    exec("BEGIN IMMEDIATE");
    try {
      auto result = body();
      exec("COMMIT");
      if (std::exchange(was_full_, false))
        truncate_log(); // one try: it may wait for readers (busy timeout)
      return result;
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  });
}

sqlite_store::sqlite_store(std::string path,
                           std::chrono::milliseconds retry_budget)
  : path_(std::move(path)), retry_budget_(retry_budget) {
  auto rc = sqlite3_open_v2(path_.c_str(), &db_,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                              | SQLITE_OPEN_NOMUTEX,
                            nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw perdure::error(errc::store_unavailable,
                         "cannot open SQLite database '" + path_ + "': " + msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  with_retry([&] {
    exec("PRAGMA journal_mode=WAL");
    // WAL with synchronous=NORMAL survives any crash of the application;
    // only an OS crash or power loss may drop the last commits.
    exec("PRAGMA synchronous=NORMAL");
    // After each checkpoint the log shrinks back to this size (bytes).
    exec("PRAGMA journal_size_limit=4194304");
    // The log grows until its next checkpoint: on a small disk, checkpoint
    // often enough that it takes at most a quarter of the room there is.
    exec(("PRAGMA wal_autocheckpoint=" + std::to_string(checkpoint_pages())).c_str());
    return 0;
  });
}

std::int64_t sqlite_store::checkpoint_pages() const {
  constexpr std::int64_t most = 1000; // SQLite's default: 4 MiB of pages
  auto dir = std::filesystem::absolute(path_).parent_path();
  struct statvfs fs{};
  if (::statvfs(dir.c_str(), &fs) != 0)
    return most;
  auto free = static_cast<std::int64_t>(fs.f_bavail)
              * static_cast<std::int64_t>(fs.f_frsize);
  return std::clamp<std::int64_t>(free / 4 / 4096, 16, most);
}

bool sqlite_store::truncate_log() {
  // A log left at the size it reached while the disk filled would keep that
  // space for good: give it back to the filesystem.
  return sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE,
                                   nullptr, nullptr)
         == SQLITE_OK;
}

sqlite_store::~sqlite_store() {
  if (lease_fd_ >= 0)
    ::close(lease_fd_); // drops the file lock
  statements_.clear();
  sqlite3_close(db_);
}

namespace {

std::atomic<void (*)(const std::string&)> statement_observer{nullptr};

} // namespace

void observe_sqlite_statements(void (*observer)(const std::string& sql)) {
  statement_observer = observer;
}

sqlite_store::statement& sqlite_store::prepare(const std::string& sql) {
  auto& slot = statements_[sql];
  if (!slot) {
    slot = std::make_unique<statement>(db_, sql);
    if (auto observe = statement_observer.load())
      observe(sql);
  }
  return slot->reset();
}

void sqlite_store::exec(const char* sql) {
  char* msg = nullptr;
  auto rc = sqlite3_exec(db_, sql, nullptr, nullptr, &msg);
  if (rc != SQLITE_OK) {
    std::string what = msg ? msg : "unknown error";
    sqlite3_free(msg);
    throw sqlite_failure(rc, std::string{sql} + ": " + what);
  }
}

void sqlite_store::migrate() {
  in_transaction([&] {
    exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
         " version INTEGER PRIMARY KEY, description TEXT NOT NULL)");
    std::set<int> applied;
    auto& sel = prepare("SELECT version FROM schema_migrations");
    while (sel.step())
      applied.insert(static_cast<int>(sel.int64(0)));
    sel.reset();
    for (auto& m : detail::sqlite_migrations()) {
      if (applied.count(m.version))
        continue;
      for (auto& sql : m.statements)
        exec(sql.c_str());
      prepare("INSERT INTO schema_migrations (version, description) "
              "VALUES (?1, ?2)")
        .bind(1, std::int64_t{m.version})
        .bind(2, m.description)
        .run();
    }
    return 0;
  });
  // Statements prepared before the schema changed must be re-prepared.
  statements_.clear();
}

bool sqlite_store::insert_run(const run_record& run, inserted_run* out) {
  // An invocation to hand to its key's actor (PENDING under the key's
  // epoch) is stored ENQUEUED if older calls of the key wait that the
  // actor has not taken: it follows them through the inbox (per-key order
  // with clients on the same file). `status IN`: see take_invocations.
  auto& ins = prepare(
    "INSERT INTO runs (id, name, status, inputs, executor, epoch, "
    "app_version, created_at, updated_at, parent_id, deadline, object_type, "
    "object_key, call_chain) VALUES (?1, ?2, CASE WHEN ?11 IS NOT NULL AND ?3 "
    "= 'PENDING' AND EXISTS (SELECT 1 FROM runs h WHERE h.object_type = ?11 "
    "AND h.object_key = ?12 AND h.status IN ('ENQUEUED', 'PENDING') AND "
    "(h.status = 'ENQUEUED' OR h.executor <> ?5 OR h.epoch <> ?6)) THEN "
    "'ENQUEUED' ELSE ?3 END, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, ?11, ?12, ?13) "
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
                                         : std::optional{run.call_chain});
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
    auto& sel = prepare("SELECT name, app_version FROM runs WHERE id = ?1 AND "
                        "executor = ?2 AND status = 'PENDING' AND object_type "
                        "IS NULL AND (?3 = 1 OR wake_at IS NOT NULL)");
    sel.bind(1, id).bind(2, executor).bind(3, std::int64_t{new_epoch ? 1 : 0});
    auto ok = sel.step() && filter.admits(sel.text(0), sel.text(1));
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
  return in_transaction([&] {
    // One statement per effect (SQLite has no data-modifying CTEs); the
    // tree is read once, before either changes it.
    std::vector<std::pair<std::string, std::string>> tree;
    // None below a compensating saga: those are its compensations' calls;
    // below a saga going forward, only child sagas (a plain child or call
    // is what a step in flight waits for: it finishes, and is compensated).
    auto& sel = prepare(
      "WITH RECURSIVE tree(id, phase) AS (SELECT id, saga_phase FROM runs "
      "WHERE id = ?1 AND (status = 'PENDING' OR (status = 'ENQUEUED' AND "
      "(queue_name IS NOT NULL OR object_key IS NOT NULL))) AND (?2 IS NULL OR (status = 'PENDING' AND "
      "deadline = ?2)) UNION SELECT r.id, r.saga_phase "
      "FROM tree t CROSS JOIN runs r WHERE r.parent_id = t.id AND r.status = "
      "'PENDING' AND t.phase IS NOT 'COMPENSATING' AND NOT (t.phase IS "
      "'FORWARD' AND r.saga_phase IS NULL)) SELECT id, "
      "COALESCE(phase, '') FROM tree");
    sel.bind(1, run_id);
    if (deadline_ms) // a deadline timer: only the attempt it was armed for
      sel.bind(2, *deadline_ms);
    else
      sel.bind_null(2);
    while (sel.step())
      tree.emplace_back(sel.text(0), sel.text(1));
    sel.reset();
    std::vector<cancelled_run> runs;
    bool ended_it = false;
    for (auto& [id, phase] : tree) {
      if (phase.empty() || phase == saga_phase::done) { // ends as any run
        prepare("UPDATE runs SET status = 'CANCELLED', error = 'cancelled', "
                "wake_at = NULL, updated_at = ?2 WHERE id = ?1")
          .bind(1, id)
          .bind(2, at_ms)
          .run();
        ended_it = ended_it || id == run_id;
        runs.push_back({id, false});
      } else if (phase == saga_phase::forward) {
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
  });
}

void sqlite_store::notify(std::string_view payload) {
  in_transaction([&] {
    notice_in(payload);
    return 0;
  });
}

void sqlite_store::notice_in(std::string_view payload) {
  // No NOTIFY: another process sharing the file polls this table
  // (`delivery_listener`). Old notices go now and then.
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  prepare("INSERT INTO notices (payload, created_at) VALUES (?1, ?2)")
    .bind(1, payload)
    .bind(2, std::int64_t{now})
    .run();
  if (sqlite3_last_insert_rowid(db_) % 256 == 0)
    prepare("DELETE FROM notices WHERE created_at < ?1")
      .bind(1, std::int64_t{now - 60'000})
      .run();
}

std::vector<std::pair<std::int64_t, std::string>>
sqlite_store::notices_after(std::int64_t after) {
  return with_retry([&] {
    std::vector<std::pair<std::int64_t, std::string>> result;
    if (after < 0) {
      auto& st = prepare("SELECT COALESCE(MAX(id), 0) FROM notices");
      st.step();
      result.emplace_back(st.int64(0), std::string{});
      st.reset();
      return result;
    }
    auto& st = prepare("SELECT id, payload FROM notices WHERE id > ?1 ORDER "
                       "BY id LIMIT 1000");
    st.bind(1, after);
    while (st.step())
      result.emplace_back(st.int64(0), st.text(1));
    st.reset();
    return result;
  });
}

std::vector<run_record>
sqlite_store::claim_pending_runs(std::string_view executor,
                                 const claim_filter& filter,
                                 std::int64_t now_ms) {
  return in_transaction([&] {
    return claim_where("executor = ?1", executor, filter, executor, now_ms,
                       false);
  });
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
  auto& sel = prepare("SELECT id, name, app_version FROM runs WHERE status = "
                      "'PENDING' AND object_type IS NULL AND " + which
                      + " ORDER BY +created_at, id");
  sel.bind(1, arg);
  while (sel.step())
    if (filter.admits(sel.text(1), sel.text(2)))
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

bool sqlite_store::fenced_ok(const std::string& run_id, const fence& owner) {
  auto& sel = prepare("SELECT 1 FROM runs WHERE id = ?1 AND executor = ?2 AND "
                      "epoch = ?3 AND status = 'PENDING'");
  sel.bind(1, run_id).bind(2, owner.executor).bind(3, owner.epoch);
  auto ok = sel.step();
  sel.reset();
  return ok;
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

// -- executors and listing --------------------------------------------------------

namespace {

/// Returns the time of day in ms (SQLite has no server clock to ask).
std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace

std::int64_t sqlite_store::acquire_lease(const lease_request& r) {
  if (lease_fd_ < 0) {
    // One runtime per file: a lock on a file beside it (never on the
    // database file itself, whose POSIX locks SQLite owns), released by
    // the kernel when the process dies.
    auto lock_path = path_ + ".runtime-lock";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw perdure::error(errc::store_unavailable,
                           "cannot open '" + lock_path + "'");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      throw perdure::error(
        errc::executor_in_use,
        "another runtime uses SQLite file '" + path_
          + "' (one runtime per file; use perdure::client in processes "
            "that only start and signal work, or PostgreSQL for several "
            "runtimes)");
    }
    lease_fd_ = fd;
  }
  return in_transaction([&] {
    auto now = wall_ms();
    prepare("INSERT INTO executors (id) VALUES (?1) ON CONFLICT (id) DO "
            "NOTHING")
      .bind(1, r.executor)
      .run();
    // Whoever else looked live died: this process holds the file.
    prepare("UPDATE executors SET epoch = epoch + 1, state = 'lapsed' WHERE "
            "state = 'live' AND id <> ?1")
      .bind(1, r.executor)
      .run();
    prepare("UPDATE executors SET epoch = epoch + 1, state = 'live', instance "
            "= ?2, app_version = ?3, lease_ms = ?4, heartbeat_at = ?5, "
            "started_at = ?5 WHERE id = ?1")
      .bind(1, r.executor)
      .bind(2, r.instance)
      .bind(3, r.app_version)
      .bind(4, r.timeout_ms)
      .bind(5, now)
      .run();
    auto& sel = prepare("SELECT epoch FROM executors WHERE id = ?1");
    sel.bind(1, r.executor);
    sel.step();
    auto epoch = sel.int64(0);
    sel.reset();
    return epoch;
  });
}

std::optional<lease_renewal>
sqlite_store::renew_lease(std::string_view executor, std::int64_t epoch) {
  return with_retry([&]() -> std::optional<lease_renewal> {
    prepare("UPDATE executors SET heartbeat_at = ?3 WHERE id = ?1 AND epoch = "
            "?2 AND state = 'live'")
      .bind(1, executor)
      .bind(2, epoch)
      .bind(3, wall_ms())
      .run();
    if (sqlite3_changes(db_) != 1)
      return std::nullopt;
    return lease_renewal{}; // no other live runtime on this file
  });
}

bool sqlite_store::lapse_executor(std::string_view) {
  return false; // nobody else can hold a lease on this file
}

void sqlite_store::release_lease(std::string_view executor,
                                 std::int64_t epoch) {
  with_retry([&] {
    prepare("UPDATE executors SET epoch = epoch + 1, state = 'stopped' WHERE "
            "id = ?1 AND epoch = ?2")
      .bind(1, executor)
      .bind(2, epoch)
      .run();
    return 0;
  });
  if (lease_fd_ >= 0) {
    ::close(lease_fd_);
    lease_fd_ = -1;
  }
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

std::int64_t sqlite_store::release_unclaimable(std::string_view executor,
                                               const claim_filter& filter) {
  return in_transaction([&] {
    std::vector<std::string> ids;
    auto& sel = prepare("SELECT id, name, app_version FROM runs WHERE status "
                        "= 'PENDING' AND executor = ?1 AND object_type IS "
                        "NULL");
    sel.bind(1, executor);
    while (sel.step())
      if (!filter.admits(sel.text(1), sel.text(2)))
        ids.push_back(sel.text(0));
    sel.reset();
    for (auto& id : ids)
      prepare("UPDATE runs SET executor = '', epoch = epoch + 1 WHERE id = ?1")
        .bind(1, id)
        .run();
    return static_cast<std::int64_t>(ids.size());
  });
}

std::int64_t sqlite_store::count_unclaimable(std::string_view executor,
                                             const claim_filter& filter) {
  return with_retry([&] {
    std::int64_t n = 0;
    auto& sel = prepare(
      "SELECT name, app_version FROM runs WHERE status = 'PENDING' AND "
      "object_type IS NULL AND (executor = ?1 OR executor = '' OR executor "
      "IN (SELECT id FROM executors WHERE state <> 'live'))");
    sel.bind(1, executor);
    while (sel.step())
      if (!filter.admits(sel.text(0), sel.text(1)))
        ++n;
    sel.reset();
    return n;
  });
}

// -- objects ------------------------------------------------------------------------

namespace {

constexpr const char* holder_gone
  = "(objects.executor = '' OR NOT EXISTS (SELECT 1 FROM executors e WHERE e.id = "
    "objects.executor AND e.state = 'live'))";

} // namespace

bool sqlite_store::complete_run(const completion_write& c) {
  // The same status again is accepted (an in-doubt completion re-sent).
  prepare("UPDATE runs SET status = ?1, output = ?2, error = ?3, updated_at = "
          "?4 WHERE id = ?5 AND executor = ?6 AND epoch = ?7 AND (status = "
          "'PENDING' OR status = ?1)")
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

namespace perdure::persistence {

void sqlite_store::in_write(const std::function<void()>& body) {
  in_transaction([&] {
    body();
    return 0;
  });
}

void sqlite_store::retried(const std::function<void()>& body) {
  with_retry([&] {
    body();
    return 0;
  });
}

} // namespace perdure::persistence

namespace perdure::persistence {

class sqlite_store::tx final : public detail::sql_tx {
public:
  explicit tx(sqlite_store& db) : db_(db) {}

  std::int64_t run(const detail::sql_query& q,
                   std::initializer_list<detail::sql_value> params,
                   const row_fn& each) override {
    auto& text = db_.rewritten_[q.name];
    if (text.empty())
      text = detail::sqlite_text(q.text);
    auto& st = db_.prepare(text);
    auto used = sqlite3_bind_parameter_count(st.get());
    int i = 0;
    for (auto& p : params) {
      if (++i > used)
        break; // canonical SQL may pass what only PostgreSQL reads
      if (std::holds_alternative<std::nullptr_t>(p))
        st.bind_null(i);
      else if (auto* n = std::get_if<std::int64_t>(&p))
        st.bind(i, *n);
      else if (auto* s = std::get_if<std::string_view>(&p))
        // An empty view may have no data: it would bind NULL.
        st.bind(i, s->data() ? *s : std::string_view{""});
      else {
        auto b = std::get<detail::sql_bytes>(p).value;
        st.bind_blob(i, b.data() ? b : std::string_view{""});
      }
    }
    row r{st};
    try {
      while (st.step())
        if (each)
          each(r);
    } catch (const sqlite_failure& ex) {
      if (ex.code() == SQLITE_CONSTRAINT_UNIQUE
          || ex.code() == SQLITE_CONSTRAINT_PRIMARYKEY)
        throw detail::unique_violation(ex.what());
      throw;
    }
    st.reset();
    return sqlite3_changes(db_.db_);
  }

  detail::sql_dialect dialect() const noexcept override {
    return detail::sql_dialect::sqlite;
  }

  void notify(std::string_view payload) override {
    db_.notice_in(payload);
  }

  perdure::sql_session& user_session() override {
    if (!session_)
      session_.emplace(db_.db_);
    return *session_;
  }

private:
  sqlite_store& db_;
  std::optional<sqlite_session> session_;
};

void sqlite_store::read(const std::function<void(detail::sql_tx&)>& body) {
  with_retry([&] {
    tx t{*this};
    body(t);
    return 0;
  });
}

void sqlite_store::write(const std::function<void(detail::sql_tx&)>& body) {
  in_transaction([&] {
    tx t{*this};
    body(t);
    return 0;
  });
}

void sqlite_store::autocommit(
  const std::function<void(detail::sql_tx&)>& body) {
  read(body);
}

} // namespace perdure::persistence
