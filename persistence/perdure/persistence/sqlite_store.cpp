#include "perdure/persistence/sqlite_store.hpp"
#include "perdure/persistence/detail/sqlite/sqlite_internal.hpp"

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
#include "perdure/persistence/detail/sqlite/statement.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"

namespace perdure::persistence {



using detail::run_columns;
using namespace detail::sqlite;


// -- sqlite_store -------------------------------------------------------------



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

// -- executors and listing --------------------------------------------------------


// -- objects ------------------------------------------------------------------------


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
