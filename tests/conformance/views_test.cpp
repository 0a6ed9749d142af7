// The SQL contract for operators: the views' names, columns and (on
// PostgreSQL) types are pinned, and their values agree with the API on a
// store holding finished, failed and waiting runs, an object and a queue.

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

struct tally {
  std::int64_t total = 0;
  template <class A>
  void serialize(A& a) {
    a(CEREAL_NVP(total));
  }
};

using columns = std::vector<std::pair<std::string, std::string>>;

class views_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
  }

  /// The view's columns in order, with their PostgreSQL types (SQLite:
  /// no types, "").
  columns columns_of(test::sql_client& sql, const std::string& view) {
    columns out;
    if (db_.postgres) {
      auto rows = sql.exec("SELECT column_name, data_type FROM "
                           "information_schema.columns WHERE table_schema = "
                           "$1 AND table_name = $2 ORDER BY ordinal_position",
                           {db_.schema, view});
      for (auto& r : rows.rows)
        out.emplace_back(*r[0], *r[1]);
    } else {
      auto rows = sql.exec("SELECT name FROM pragma_table_info('" + view + "')");
      for (auto& r : rows.rows)
        out.emplace_back(*r[0], "");
    }
    return out;
  }

  /// Pins `view`'s columns: names in order, and PostgreSQL's types.
  void expect_columns(test::sql_client& sql, const std::string& view,
                      const columns& want) {
    auto got = columns_of(sql, view);
    ASSERT_EQ(got.size(), want.size()) << view;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first) << view << " column " << i;
      if (db_.postgres) {
        EXPECT_EQ(got[i].second, want[i].second) << view << "." << want[i].first;
      }
    }
  }

  test::database db_;
};

const std::string ts = "timestamp with time zone";

TEST_F(views_test, the_views_columns_and_types_are_the_contract) {
  { runtime rt{db_.runtime_config()}; rt.start(); } // migrates
  test::sql_client sql{db_};
  expect_columns(sql, "v_runs",
                 {{"id", "text"}, {"workflow", "text"}, {"status", "text"},
                  {"app_version", "text"}, {"executor", "text"},
                  {"epoch", "bigint"}, {"parent_id", "text"},
                  {"queue_name", "text"}, {"object_type", "text"},
                  {"object_key", "text"}, {"created_at", ts},
                  {"updated_at", ts}, {"ended_at", ts}, {"started_at", ts},
                  {"deadline", ts}, {"wake_at", ts}, {"attempts", "integer"},
                  {"recovery_attempts", "integer"}, {"priority", "integer"},
                  {"partition_key", "text"}, {"dedup_id", "text"},
                  {"saga_phase", "text"}, {"cancel_requested", "boolean"},
                  {"error", "text"}, {"inputs", "jsonb"}, {"output", "jsonb"},
                  {"collected_at", ts}});
  expect_columns(sql, "v_steps",
                 {{"run_id", "text"}, {"seq", "integer"}, {"kind", "text"},
                  {"name", "text"}, {"outcome", "text"}, {"result", "jsonb"},
                  {"error", "text"}, {"recorded_at", ts}});
  expect_columns(sql, "v_waits",
                 {{"run_id", "text"}, {"workflow", "text"}, {"kind", "text"},
                  {"wait_id", "text"}, {"since", ts}, {"due_at", ts}});
  expect_columns(sql, "v_queues",
                 {{"name", "text"}, {"concurrency", "integer"},
                  {"partition_concurrency", "integer"},
                  {"rate_limit", "integer"}, {"rate_period_ms", "bigint"},
                  {"enqueued", "bigint"}, {"running", "bigint"},
                  {"dead_letters", "bigint"}, {"updated_at", ts}});
  expect_columns(sql, "v_objects",
                 {{"type", "text"}, {"key", "text"}, {"state", "jsonb"},
                  {"version", "bigint"}, {"executor", "text"},
                  {"epoch", "bigint"}, {"updated_at", ts},
                  {"queued_calls", "bigint"}});
  expect_columns(sql, "v_executors",
                 {{"id", "text"}, {"state", "text"}, {"app_version", "text"},
                  {"epoch", "bigint"}, {"heartbeat_at", ts},
                  {"lease_ms", "bigint"}, {"started_at", ts},
                  {"runs_held", "bigint"}});
  expect_columns(sql, "v_versions",
                 {{"app_version", "text"}, {"first_seen", ts},
                  {"last_seen", ts}, {"live_executors", "bigint"},
                  {"pending", "bigint"}, {"enqueued", "bigint"},
                  {"blocked", "bigint"}, {"stranded", "boolean"}});
  expect_columns(sql, "v_schedules",
                 {{"name", "text"}, {"workflow", "text"},
                  {"queue_name", "text"}, {"cron", "text"},
                  {"time_zone", "text"}, {"state", "text"},
                  {"next_fire", ts}, {"last_fire", ts},
                  {"last_run_id", "text"}, {"started", "bigint"},
                  {"skipped", "bigint"}, {"missed", "bigint"},
                  {"caught_up", "bigint"}, {"overlap", "text"},
                  {"catchup", "text"}, {"owner", "text"},
                  {"updated_at", ts}});
}

TEST_F(views_test, the_views_show_what_the_api_shows) {
  runtime rt{db_.runtime_config("views-rt")};
  rt.register_workflow("double", [](workflow_context& ctx, int x) -> task<int> {
    co_return co_await ctx.step("times-two", [&] { return 2 * x; });
  });
  rt.register_workflow("approve", [](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.awakeable<int>();
    co_await ctx.step("ask", [&] { return a.id(); });
    co_return co_await a;
  });
  rt.register_object<tally>("tally").handler(
    "add", [](object_context<tally>& ctx, std::int64_t n) -> task<std::int64_t> {
      ctx.state().total += n;
      co_return ctx.state().total;
    });
  queues::register_queue(rt, "mail", {.concurrency = 3});
  rt.start();
  EXPECT_EQ(rt.start_workflow<int>("double", 21, {.id = "d1"}).get(20s), 42);
  auto waiting = rt.start_workflow<int>("approve", {.id = "a1"});
  ASSERT_TRUE(test::eventually([&] { return rt.history("a1").size() >= 2; }));
  EXPECT_EQ(rt.call<std::int64_t>("tally", "k", "add", std::int64_t{5}), 5);
  test::sql_client sql{db_};
  auto t = [&](const std::string& v) { return sql.table(v); };
  auto run = sql.exec("SELECT status, workflow, executor, output, inputs, "
                      "created_at, ended_at FROM " + t("v_runs") + " WHERE id = 'd1'");
  ASSERT_EQ(run.rows.size(), 1u);
  auto& r = run.rows[0];
  EXPECT_EQ(*r[0], "SUCCESS");
  EXPECT_EQ(*r[1], "double");
  EXPECT_EQ(*r[2], "views-rt");
  EXPECT_EQ(*r[3], "42") << "the output's JSON value";
  EXPECT_EQ(*r[4], "21");
  std::regex time{db_.postgres ? R"(^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[.0-9]*\+00$)"
                               : R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$)"};
  EXPECT_TRUE(std::regex_match(*r[5], time)) << *r[5];
  ASSERT_TRUE(r[6].has_value()) << "an ended run has ended_at";
  auto pending = sql.exec("SELECT status, ended_at FROM " + t("v_runs") +
                          " WHERE id = 'a1'");
  EXPECT_EQ(*pending.rows[0][0], "PENDING");
  EXPECT_FALSE(pending.rows[0][1].has_value());
  auto steps = sql.exec("SELECT seq, kind, name, outcome, result FROM " +
                        t("v_steps") + " WHERE run_id = 'd1' ORDER BY seq");
  ASSERT_EQ(steps.rows.size(), 1u);
  EXPECT_EQ(*steps.rows[0][2], "times-two");
  EXPECT_EQ(*steps.rows[0][3], "value");
  EXPECT_EQ(*steps.rows[0][4], "42");
  auto waits = sql.exec("SELECT run_id, kind, wait_id FROM " + t("v_waits"));
  ASSERT_EQ(waits.rows.size(), 1u);
  EXPECT_EQ(*waits.rows[0][0], "a1");
  EXPECT_EQ(*waits.rows[0][1], "awakeable");
  EXPECT_EQ(*waits.rows[0][2], "awk_0_a1");
  auto state = sql.exec("SELECT state, queued_calls FROM " + t("v_objects") +
                        " WHERE type = 'tally' AND key = 'k'");
  ASSERT_EQ(state.rows.size(), 1u);
  auto compact = *state.rows[0][0];
  std::erase(compact, ' ');
  EXPECT_EQ(compact, "{\"total\":5}");
  EXPECT_EQ(*state.rows[0][1], "0");
  auto q = sql.exec("SELECT concurrency, enqueued, dead_letters FROM " +
                    t("v_queues") + " WHERE name = 'mail'");
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_EQ(*q.rows[0][0], "3");
  auto ex = sql.exec("SELECT state, runs_held FROM " + t("v_executors") +
                     " WHERE id = 'views-rt'");
  ASSERT_EQ(ex.rows.size(), 1u);
  EXPECT_EQ(*ex.rows[0][0], "live");
  EXPECT_EQ(*ex.rows[0][1], "1") << "the waiting run";
  auto v = sql.exec("SELECT pending, stranded FROM " + t("v_versions") +
                    " WHERE app_version = ''");
  ASSERT_EQ(v.rows.size(), 1u);
  EXPECT_EQ(*v.rows[0][0], "1");
  EXPECT_TRUE(*v.rows[0][1] == "f" || *v.rows[0][1] == "false"
              || *v.rows[0][1] == "0") << *v.rows[0][1];
  rt.resolve_awakeable("awk_0_a1", 9);
  EXPECT_EQ(waiting.get(20s), 9);
  EXPECT_TRUE(sql.exec("SELECT * FROM " + t("v_waits")).rows.empty());
}

TEST_F(views_test, a_payload_that_is_not_json_reads_as_null_not_an_error) {
  { runtime rt{db_.runtime_config()}; rt.start(); }
  test::sql_client sql{db_};
  auto now = std::to_string(test::wall_ms());
  sql.exec("INSERT INTO " + sql.table("runs") +
           " (id, name, status, inputs, executor, epoch, created_at, "
           "updated_at) VALUES ('bad', 'w', 'SUCCESS', $1, '', 0, " + now +
           ", " + now + ")", {std::string{"{not json"}});
  auto rows = sql.exec("SELECT inputs FROM " + sql.table("v_runs") +
                       " WHERE id = 'bad'");
  ASSERT_EQ(rows.rows.size(), 1u);
  EXPECT_FALSE(rows.rows[0][0].has_value());
}

} // namespace
