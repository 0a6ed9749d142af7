#include "db_counters.hpp"

#include <sqlite3.h>
#include <sys/resource.h>

#include <pqxx/pqxx>
#include <thread>

namespace perdure::bench {

namespace {

double number(test::sql_client& sql, const std::string& q) {
  auto v = sql.scalar(q);
  return v.empty() ? 0.0 : std::stod(v);
}

/// Whether pg_stat_statements can be read here (the server preloads it;
/// scripts/bench's server does): creates the extension once.
bool statements_readable(test::sql_client& sql) {
  try {
    sql.exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    sql.scalar("SELECT COUNT(*) FROM pg_stat_statements");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

} // namespace

db_counters read_counters(const test::database& db,
                          const std::vector<std::string>& tables) {
  db_counters c;
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  c.cpu_us = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6
             + static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  c.context_switches = static_cast<double>(ru.ru_nvcsw + ru.ru_nivcsw);
  if (!db.postgres)
    return c;
  // Backends report their statistics at most once a second; a backend
  // that went idle reports within its idle interval. Callers read after a
  // runtime's connections closed (reported at exit) or accept the lag.
  std::this_thread::sleep_for(std::chrono::milliseconds{1100});
  test::sql_client sql{db};
  sql.exec("SELECT pg_stat_clear_snapshot()");
  c.commits = number(sql, "SELECT xact_commit FROM pg_stat_database WHERE "
                          "datname = current_database()");
  c.wal_bytes = number(sql, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn");
  std::string list;
  for (auto& t : tables)
    list += (list.empty() ? "'" : ", '") + t + "'";
  auto where = " FROM pg_stat_user_tables WHERE schemaname = '" + db.schema
               + "' AND relname IN (" + list + ")";
  c.rows_written = number(sql, "SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + "
                               "n_tup_del), 0)" + where);
  c.hot_updates = number(sql, "SELECT COALESCE(SUM(n_tup_hot_upd), 0)" + where);
  if (statements_readable(sql)) {
    auto in_db = std::string{" FROM pg_stat_statements WHERE dbid = (SELECT "
                             "oid FROM pg_database WHERE datname = "
                             "current_database())"};
    try {
      c.statements = number(sql, "SELECT COALESCE(SUM(calls), 0)" + in_db);
      c.db_exec_ms = number(sql, "SELECT COALESCE(SUM(total_exec_time), 0)"
                                   + in_db);
    } catch (const std::exception&) {
      // Before PostgreSQL 13 the column is total_time: not reported.
      c.statements = c.db_exec_ms = -1;
    }
  }
  return c;
}

void add_per(json_line& line, const db_counters& before,
             const db_counters& after, double n, const std::string& unit) {
  auto add = [&](const char* name, double b, double a) {
    if (b >= 0 && a >= 0 && n > 0)
      line.add(std::string{name} + "_per_" + unit, (a - b) / n);
  };
  add("statements", before.statements, after.statements);
  add("commits", before.commits, after.commits);
  add("rows_written", before.rows_written, after.rows_written);
  add("hot_updates", before.hot_updates, after.hot_updates);
  add("wal_bytes", before.wal_bytes, after.wal_bytes);
  if (before.db_exec_ms >= 0 && after.db_exec_ms >= 0 && n > 0)
    line.add("db_us_per_" + unit,
             (after.db_exec_ms - before.db_exec_ms) * 1000 / n);
  add("cpu_us", before.cpu_us, after.cpu_us);
  add("context_switches", before.context_switches, after.context_switches);
}

double copy_baseline(const test::database& db, long rows) {
  static int made = 0;
  auto name = "baseline_" + std::to_string(++made);
  test::sql_client sql{db};
  auto table = sql.table(name);
  sql.exec("CREATE TABLE " + table
           + " (run_id TEXT NOT NULL, seq INT NOT NULL, kind TEXT NOT NULL, "
             "name TEXT NOT NULL, outcome SMALLINT NOT NULL, payload "
           + std::string{db.postgres ? "BYTEA" : "BLOB"}
           + ", error TEXT, created_at BIGINT NOT NULL, PRIMARY KEY (run_id, "
             "seq))");
  constexpr long batch = 1000;
  auto payload = std::string{"{\"value\":42}"};
  auto t0 = bench_clock::now();
  if (db.postgres) {
    pqxx::connection c{db.url};
    for (long first = 0; first < rows; first += batch) {
      pqxx::work w{c};
      pqxx::stream_to s{w, db.schema + "." + name,
                        std::vector<std::string>{"run_id", "seq", "kind",
                                                 "name", "outcome", "payload",
                                                 "error", "created_at"}};
      for (long i = first; i < std::min(rows, first + batch); ++i)
        s << std::make_tuple("run-" + std::to_string(i / 20), i % 20, "step",
                             "s", 0, "\\x7b2276616c7565223a34327d", "", 1L);
      s.complete();
      w.commit();
    }
  } else {
    sqlite3* lite = nullptr;
    sqlite3_open(db.url.substr(9).c_str(), &lite);
    sqlite3_busy_timeout(lite, 10000);
    sqlite3_exec(lite, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
                 nullptr, nullptr, nullptr);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(lite,
                       ("INSERT INTO " + name
                        + " VALUES (?1, ?2, 'step', 's', 0, ?3, '', 1)")
                         .c_str(),
                       -1, &st, nullptr);
    for (long first = 0; first < rows; first += batch) {
      sqlite3_exec(lite, "BEGIN", nullptr, nullptr, nullptr);
      for (long i = first; i < std::min(rows, first + batch); ++i) {
        auto id = "run-" + std::to_string(i / 20);
        sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, i % 20);
        sqlite3_bind_blob(st, 3, payload.data(),
                          static_cast<int>(payload.size()), SQLITE_STATIC);
        sqlite3_step(st);
        sqlite3_reset(st);
      }
      sqlite3_exec(lite, "COMMIT", nullptr, nullptr, nullptr);
    }
    sqlite3_finalize(st);
    sqlite3_close(lite);
  }
  auto secs = seconds_since(t0);
  auto written = std::stol(sql.scalar("SELECT COUNT(*) FROM " + table));
  sql.exec("DROP TABLE " + table);
  if (written != rows)
    throw std::runtime_error("the baseline wrote the wrong number of rows");
  return static_cast<double>(rows) / secs;
}

void two_sided_baseline::add_to(json_line& line, double rate) const {
  line.add("baseline_rows_per_s_before", before)
    .add("baseline_rows_per_s_after", after)
    .add("baseline_rows_per_s", mean())
    .add("ratio_to_baseline", mean() > 0 ? rate / mean() : 0);
}

} // namespace perdure::bench
