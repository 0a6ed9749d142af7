#include "support/test_support.hpp"

#include <pqxx/pqxx>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <unistd.h>

#include "perdure/pqxx_session.hpp"
#include "perdure/sqlite_session.hpp"

namespace perdure::test {

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

namespace {

std::string unique_suffix() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  return std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_"
         + std::to_string(rd() % 1000000);
}

} // namespace

std::string store_under_test() {
  auto env = std::getenv("PERDURE_TEST_STORE");
  std::string kind = env ? env : "sqlite";
  if (kind != "sqlite" && kind != "postgres")
    throw std::runtime_error("PERDURE_TEST_STORE must be sqlite or postgres");
  return kind;
}

void worker_logs_to_stderr() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("perdure-worker"));
}

database database::named(std::string url, std::string schema) {
  database db;
  db.postgres = url.rfind("postgres", 0) == 0;
  db.url = std::move(url);
  db.schema = std::move(schema);
  return db;
}

database database::fresh() {
  database db;
  if (store_under_test() == "postgres") {
    auto url = std::getenv("PERDURE_TEST_PG_URL");
    if (url == nullptr || *url == '\0')
      throw std::runtime_error(
        "PERDURE_TEST_PG_URL is not set: run the PostgreSQL tests through "
        "scripts/test, which starts a throwaway server");
    db.url = url;
    db.schema = "t_" + unique_suffix();
    db.postgres = true;
  } else {
    auto dir = std::filesystem::temp_directory_path() / "perdure-tests";
    std::filesystem::create_directories(dir);
    db.url = "sqlite://" + (dir / ("t_" + unique_suffix() + ".db")).string();
    db.schema = "perdure";
  }
  return db;
}

config database::runtime_config(std::string executor_id) const {
  config cfg;
  cfg.database_url = url;
  cfg.schema = schema;
  cfg.executor_id = std::move(executor_id);
  cfg.db_retry_budget = std::chrono::milliseconds{10'000};
  cfg.poll_interval = std::chrono::milliseconds{20};
  return cfg;
}

// -- sql_client -----------------------------------------------------------------

struct sql_client::impl {
  std::unique_ptr<pqxx::connection> pg;
  sqlite3* lite = nullptr;
  std::string schema;

  ~impl() {
    if (lite)
      sqlite3_close(lite);
  }
};

sql_client::sql_client(const database& db) : impl_(std::make_unique<impl>()) {
  impl_->schema = db.schema;
  if (db.postgres) {
    impl_->pg = std::make_unique<pqxx::connection>(db.url);
    pqxx::nontransaction nt{*impl_->pg};
    nt.exec("CREATE SCHEMA IF NOT EXISTS " + impl_->pg->quote_name(db.schema));
  } else {
    auto path = db.url.substr(std::string{"sqlite://"}.size());
    if (sqlite3_open(path.c_str(), &impl_->lite) != SQLITE_OK)
      throw std::runtime_error("cannot open " + path);
    sqlite3_busy_timeout(impl_->lite, 10000);
  }
}

sql_client::~sql_client() = default;

const char* sql_client::dialect() const {
  return impl_->pg ? "postgresql" : "sqlite";
}

std::string sql_client::table(const std::string& t) const {
  if (impl_->pg)
    return impl_->pg->quote_name(impl_->schema) + "." + t;
  return t;
}

sql_rows sql_client::exec(const std::string& sql,
                          const std::vector<sql_param>& params) {
  sql_rows result;
  if (impl_->pg) {
    std::vector<std::optional<std::string>> texts;
    for (auto& p : params)
      texts.push_back(to_text(p));
    std::vector<const char*> ptrs;
    for (auto& t : texts)
      ptrs.push_back(t ? t->c_str() : nullptr);
    pqxx::work w{*impl_->pg};
    auto res = w.exec_params(sql, pqxx::prepare::make_dynamic_params(ptrs));
    for (const auto& row : res) {
      auto& out = result.rows.emplace_back();
      for (const auto& f : row)
        out.emplace_back(f.is_null() ? std::nullopt
                                     : std::optional<std::string>{f.c_str()});
    }
    result.affected = static_cast<std::int64_t>(res.affected_rows());
    w.commit();
    return result;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(impl_->lite, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
    throw std::runtime_error(std::string{"prepare: "}
                             + sqlite3_errmsg(impl_->lite));
  for (size_t i = 0; i < params.size(); ++i) {
    auto name = "$" + std::to_string(i + 1);
    int idx = sqlite3_bind_parameter_index(st, name.c_str());
    if (idx == 0)
      idx = static_cast<int>(i + 1);
    if (auto t = to_text(params[i]))
      sqlite3_bind_text(st, idx, t->data(), static_cast<int>(t->size()),
                        SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(st, idx);
  }
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    auto& out = result.rows.emplace_back();
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      if (sqlite3_column_type(st, c) == SQLITE_NULL)
        out.emplace_back(std::nullopt);
      else
        out.emplace_back(std::string{
          reinterpret_cast<const char*>(sqlite3_column_text(st, c)),
          static_cast<size_t>(sqlite3_column_bytes(st, c))});
    }
  }
  std::string err = rc == SQLITE_DONE ? "" : sqlite3_errmsg(impl_->lite);
  sqlite3_finalize(st);
  if (!err.empty())
    throw std::runtime_error("sqlite: " + err);
  result.affected = sqlite3_changes(impl_->lite);
  return result;
}

std::string sql_client::scalar(const std::string& sql,
                               const std::vector<sql_param>& params) {
  auto rows = exec(sql, params);
  if (rows.rows.size() != 1 || rows.rows[0].size() != 1)
    throw std::runtime_error("not a scalar result: " + sql);
  return rows.rows[0][0].value_or("NULL");
}

sql_client& thread_client(const database& db) {
  thread_local std::unique_ptr<sql_client> client;
  if (!client)
    client = std::make_unique<sql_client>(db);
  return *client;
}

void in_one_transaction(const database& db,
                        const std::function<void(sql_session&)>& work) {
  if (db.postgres) {
    pqxx::connection conn{db.url};
    pqxx::work w{conn};
    pqxx_session s{w, db.schema};
    work(s);
    w.commit();
    return;
  }
  sqlite3* raw = nullptr;
  auto path = db.url.substr(std::string{"sqlite://"}.size());
  if (sqlite3_open(path.c_str(), &raw) != SQLITE_OK)
    throw std::runtime_error("cannot open " + path);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> conn{raw, sqlite3_close};
  sqlite3_busy_timeout(raw, 10'000);
  sqlite3_exec(raw, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  sqlite_session s{raw};
  work(s);
  if (sqlite3_exec(raw, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK)
    throw std::runtime_error(sqlite3_errmsg(raw));
}

} // namespace perdure::test
