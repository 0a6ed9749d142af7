// Every statement Perdure issues against a store holding 100 000 runs is
// served by an index where one should serve: a full scan of `runs` or of
// the journal is a cost that grows with history (every call, item and run
// leaves a row), and a long-lived deployment pays it on every use. The test
// fills the tables, runs every feature once, collects the statements the
// stores issued (SQLite: as they are prepared; PostgreSQL: from
// pg_stat_statements) and reads each one's plan.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/persistence/sqlite_store.hpp"
#include "perdure/queues/queue.hpp"
#include "perdure/retention/collector.hpp"
#include "perdure/sagas/saga.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

std::mutex seen_mtx;
std::set<std::string> seen_sqlite;

void remember(const std::string& sql) {
  std::lock_guard guard{seen_mtx};
  seen_sqlite.insert(sql);
}

struct tally {
  std::int64_t total = 0;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(total));
  }
};

class query_plan_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// Returns the columns of table `t`, in order.
  std::vector<std::string> columns(test::sql_client& sql, const std::string& t) {
    std::vector<std::string> out;
    auto rows = db_.postgres
                  ? sql.exec("SELECT column_name FROM information_schema.columns "
                             "WHERE table_schema = $1 AND table_name = $2 ORDER "
                             "BY ordinal_position",
                             {db_.schema, t})
                  : sql.exec("SELECT name FROM pragma_table_info('" + t + "')");
    for (auto& r : rows.rows)
      out.push_back(*r[0]);
    return out;
  }

  /// Adds `copies` copies of run `from` (and its journal), ended, with ids
  /// `<from>-<n>`, spread over time (and, for invocations, over keys).
  void clone(test::sql_client& sql, const std::string& from, int copies) {
    auto cols = columns(sql, "runs");
    std::string names, values;
    for (auto& c : cols) {
      names += (names.empty() ? "" : ", ") + c;
      std::string v = c;
      if (c == "id")
        v = "id || '-' || n";
      else if (c == "created_at" || c == "updated_at")
        v = c + " - n * 1000";
      else if (c == "object_key")
        v = "CASE WHEN object_key IS NULL THEN NULL ELSE object_key || '-' || "
            "(n % 5000) END";
      else if (c == "dedup_id")
        v = "NULL";
      values += (values.empty() ? "" : ", ") + v;
    }
    auto series = "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
                  "FROM g WHERE n < " + std::to_string(copies) + ") ";
    sql.exec(series + "INSERT INTO " + sql.table("runs") + " (" + names
               + ") SELECT " + values + " FROM " + sql.table("runs")
               + " CROSS JOIN g WHERE id = $1",
             {from});
    auto jcols = columns(sql, "journal");
    std::string jnames, jvalues;
    for (auto& c : jcols) {
      jnames += (jnames.empty() ? "" : ", ") + c;
      jvalues += std::string{jvalues.empty() ? "" : ", "}
                 + (c == "run_id" ? "run_id || '-' || n" : c);
    }
    sql.exec(series + "INSERT INTO " + sql.table("journal") + " (" + jnames
               + ") SELECT " + jvalues + " FROM " + sql.table("journal")
               + " CROSS JOIN g WHERE run_id = $1",
             {from});
  }

  /// A runtime with every feature registered.
  std::unique_ptr<runtime> make(config cfg) {
    cfg.stranded_check = 200ms;
    auto rt = std::make_unique<runtime>(cfg);
    rt->register_workflow("steps", [](workflow_context& ctx, int n) -> task<int> {
      int sum = 0;
      for (int i = 0; i < n; ++i)
        sum += co_await ctx.step("s", [&] { return 1; });
      co_return sum;
    });
    rt->register_workflow("waits", [](workflow_context& ctx) -> task<int> {
      co_await ctx.sleep(10ms);
      auto a = co_await ctx.awakeable<int>();
      auto got = co_await ctx.recv<int>("topic", 1h);
      auto c = co_await ctx.start_child<int>("steps", 1);
      co_return co_await a + (got ? *got : 0) + co_await c - 1;
    });
    rt->register_workflow("flaky", [](workflow_context& ctx) -> task<int> {
      co_return co_await ctx.step(
        "f", []() -> int { throw std::runtime_error("no"); },
        retry_policy{.max_attempts = 1});
    });
    rt->register_workflow("trip", [](workflow_context& ctx) -> task<int> {
      co_return co_await sagas::run<int>(ctx, [&](sagas::saga& s) -> task<int> {
        co_await s.step("a", [] { return 1; }, [](const int&) {});
        co_await s.step("b", []() -> int { throw terminal_error("no"); },
                        [](const int&) {});
        co_return 0;
      });
    });
    rt->register_object<tally>("tally").handler(
      "add", [](object_context<tally>& ctx, std::int64_t n) -> task<std::int64_t> {
        ctx.state().total += n;
        co_return ctx.state().total;
      });
    queues::register_queue(*rt, "parts", {.concurrency = 4,
                                         .partition_concurrency = 1,
                                         .rate = queues::rate_limit{1000, 1s}});
    queues::register_queue(*rt, "plain",
                           {.retry = {.max_attempts = 2, .backoff = 10ms}});
    return rt;
  }

  /// Runs every feature once on `rt`.
  void exercise(runtime& rt, const std::string& tag) {
    auto a = rt.start_workflow<int>("steps", 3, {.id = "w1" + tag});
    EXPECT_EQ(a.get(20s), 3);
    auto waiting = rt.start_workflow<int>("waits", {.id = "w2" + tag, .timeout = 1h});
    ASSERT_TRUE(test::eventually([&] {
      return rt.history("w2" + tag).size() >= 2;
    }));
    rt.send("w2" + tag, "topic", 5);
    rt.resolve_awakeable("awk_1_w2" + tag, 6);
    EXPECT_EQ(waiting.get(20s), 11);
    EXPECT_GE(rt.call<std::int64_t>("tally", "k-1", "add", std::int64_t{1}), 1);
    EXPECT_GE(rt.call<std::int64_t>("tally", "fresh", "add", std::int64_t{2},
                                    {.idempotency_key = "once" + tag}),
              2);
    auto sent = rt.send<std::int64_t>("tally", "fresh", "add", std::int64_t{1});
    EXPECT_GE(sent.get(20s), 3);
    auto item = queues::enqueue<int>(rt, "parts", "steps", 1,
                                     {.partition_key = "p", .dedup_id = "d"});
    EXPECT_EQ(item.get(20s), 1);
    auto flaky = queues::enqueue<int>(rt, "plain", "flaky");
    EXPECT_THROW(flaky.get(20s), perdure::error);
    (void)queues::stats(rt, "parts");
    auto trip = rt.start_workflow<int>("trip", {.id = "trip" + tag});
    EXPECT_THROW(trip.get(20s), perdure::error);
    auto cancelled = rt.start_workflow<int>("waits", {.id = "w3" + tag});
    cancelled.cancel();
    (void)rt.list_runs({.status = run_status::success, .limit = 50});
    (void)rt.list_runs({.name = "steps", .limit = 50});
    (void)rt.history("w1" + tag);
    {
      // Retention: what ended over 10 h ago (the oldest clones, in the
      // second round) collected in batches, and their ids freed at once.
      namespace ret = perdure::retention;
      ret::keep k{10h, 0ms};
      ret::policies keep;
      keep.all = ret::policy{k, k, k};
      ret::collector gc{rt, keep, {.interval = 1h, .batch = 500, .duty = 1.0}};
      (void)gc.collect_now();
    }
    std::this_thread::sleep_for(600ms); // the stranded check, a sweep
  }

  test::database db_;
};

TEST_F(query_plan_test, no_statement_scans_every_run_or_the_journal) {
  test::sql_client sql{db_};
  std::string log_file;
  if (db_.postgres) {
    // auto_explain logs the plan of every statement of this test's
    // runtime (its connections load it, see below) to the server's log.
    log_file = sql.scalar("SELECT current_setting('data_directory') || "
                          "'/../log'");
    try {
      (void)sql.scalar("SELECT size FROM pg_stat_file($1)", {log_file});
    } catch (const std::exception&) {
      // scripts/test's cluster always writes it there: under CI a missing
      // log is a broken set-up, not a reason to check nothing.
      if (std::getenv("CI"))
        FAIL() << "the server's log is not at " << log_file;
      GTEST_SKIP() << "the server's log is not at " << log_file
                   << " (a cluster not started by scripts/test)";
    }
  } else {
    persistence::observe_sqlite_statements(remember);
  }
  {
    // History first: one of each kind of row, then 100 000 runs like them.
    auto rt = make(db_.runtime_config());
    rt->start();
    exercise(*rt, "a");
  }
  auto call = sql.scalar("SELECT id FROM " + sql.table("runs")
                         + " WHERE object_key = 'k-1'");
  clone(sql, "w1a", 40'000);
  clone(sql, call, 40'000);
  clone(sql, sql.scalar("SELECT id FROM " + sql.table("runs")
                        + " WHERE queue_name = 'parts'"),
        20'000);
  for (auto& t : {"runs", "journal"}) // this test's tables only
    sql.exec("ANALYZE " + sql.table(t));
  ASSERT_GE(std::stoll(sql.scalar("SELECT count(*) FROM " + sql.table("runs"))),
            100'000);
  auto cfg = db_.runtime_config();
  std::int64_t log_from = 0;
  if (db_.postgres) {
    cfg.database_url += std::string{cfg.database_url.find('?') == std::string::npos
                                      ? "?"
                                      : "&"}
                        + "options=-c%20session_preload_libraries%3Dauto_explain"
                          "%20-c%20auto_explain.log_min_duration%3D0";
    log_from = std::stoll(
      sql.scalar("SELECT size FROM pg_stat_file($1)", {log_file}));
  } else {
    std::lock_guard guard{seen_mtx};
    seen_sqlite.clear();
  }
  {
    auto rt = make(cfg);
    rt->start(); // recovery, takeover passes, claims: on the full tables
    exercise(*rt, "b");
  }
  // Each statement with its plan.
  std::vector<std::pair<std::string, std::string>> plans;
  if (db_.postgres) {
    auto size = std::stoll(
      sql.scalar("SELECT size FROM pg_stat_file($1)", {log_file}));
    auto log = sql.scalar("SELECT pg_read_file($1, $2, $3)",
                          {log_file, log_from, size - log_from});
    const std::string marker = "plan:\n";
    for (auto at = log.find(marker); at != std::string::npos;) {
      auto next = log.find(marker, at + 1);
      auto chunk = log.substr(at + marker.size(),
                              next == std::string::npos ? std::string::npos
                                                        : next - at - marker.size());
      // "Query Text: <sql>" then the plan, up to the next log line.
      auto text = chunk.find("Query Text: ");
      auto end_of_text = chunk.find('\n', text);
      if (text != std::string::npos && end_of_text != std::string::npos) {
        auto plan_end = chunk.find("\n20", end_of_text); // the next line
        plans.emplace_back(
          chunk.substr(text + 12, end_of_text - text - 12),
          chunk.substr(end_of_text, plan_end == std::string::npos
                                      ? std::string::npos
                                      : plan_end - end_of_text));
      }
      at = next;
    }
  } else {
    persistence::observe_sqlite_statements(nullptr);
    std::vector<std::string> statements;
    {
      std::lock_guard guard{seen_mtx};
      statements.assign(seen_sqlite.begin(), seen_sqlite.end());
    }
    for (auto& q : statements) {
      std::string plan;
      for (auto& r : sql.exec("EXPLAIN QUERY PLAN " + q).rows)
        plan += *r.back() + "\n";
      plans.emplace_back(q, plan);
    }
  }
  // A full scan: PostgreSQL's "Seq Scan on runs", SQLite's "SCAN runs"
  // (or of an alias of it; "SCAN runs USING INDEX" reads every entry too).
  std::regex pg_scan{R"(Seq Scan on (runs|journal)\b)"};
  std::regex alias{R"(\b(?:runs|journal)\s+(?:AS\s+)?([a-z]\w*))",
                   std::regex::icase};
  static const std::set<std::string> keywords{
    "where", "set", "on", "join", "order", "group", "limit", "using", "left",
    "cross", "inner", "values", "returning", "union", "as", "and", "or",
    "natural"};
  int explained = 0;
  std::set<std::string> scans;
  for (auto& [q, plan] : plans) {
    if (q.find("runs") == std::string::npos
        && q.find("journal") == std::string::npos)
      continue;
    ++explained;
    bool scan = false;
    if (db_.postgres) {
      scan = std::regex_search(plan, pg_scan);
    } else {
      std::set<std::string> names{"runs", "journal"};
      for (std::sregex_iterator i{q.begin(), q.end(), alias}, end; i != end;
           ++i) {
        auto a = (*i)[1].str();
        auto lower = a;
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (keywords.count(lower) == 0)
          names.insert(a);
      }
      // A walk of a partial index of unended work is bounded by that
      // work; a walk of runs_created by the page's LIMIT.
      static const std::regex bounded{
        R"(USING (COVERING )?INDEX (runs_pending|runs_inbox|runs_queued|)"
        R"(runs_queued_partition|runs_queue_running|runs_delivered|)"
        R"(runs_cancel_signalled|runs_blocked)\b)"};
      for (auto& n : names) {
        std::regex walk{"SCAN " + n + "( USING [^\n]*)?\n"};
        for (std::sregex_iterator i{plan.begin(), plan.end(), walk}, end;
             i != end; ++i) {
          auto line = i->str();
          if (std::regex_search(line, bounded)
              || (line.find("runs_created") != std::string::npos
                  && q.find("LIMIT") != std::string::npos))
            continue;
          scan = true;
        }
      }
    }
    if (scan)
      scans.insert(q + "\n" + plan);
  }
  EXPECT_GE(explained, 25) << "too few of Perdure's statements were seen";
  for (auto& s : scans)
    ADD_FAILURE() << "a statement scans every run or journal entry:\n" << s;
}

} // namespace
