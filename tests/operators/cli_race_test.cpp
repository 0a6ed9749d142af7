// CLI actions racing running processes (PostgreSQL, several processes):
// runs cancelled from the CLI mid-flight, their process SIGKILLed, and the
// CLI's resume of them racing another process's takeover of the rest.
// Every run ends SUCCESS with each transaction committed once.

#include <gtest/gtest.h>

#include <signal.h>

#include <string>

#include <nlohmann/json.hpp>

#include "operators/cli_runner.hpp"
#include "perdure/perdure.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

TEST(cli_race_test, resume_from_the_cli_while_another_process_takes_over) {
  auto db = test::database::fresh();
  if (!db.postgres)
    GTEST_SKIP() << "several runtimes share PostgreSQL only";
  test::sql_client sql{db};
  client ops{db.runtime_config("ops")}; // migrates
  sql.exec("CREATE TABLE " + sql.table("step_log")
           + " (run_id TEXT, seq INTEGER, pid BIGINT, at_ms BIGINT)");
  sql.exec("CREATE TABLE " + sql.table("tx_rows") + " (run_id TEXT)");
  auto worker = [&](const std::string& executor) {
    auto w = std::make_unique<test::child_process>(std::vector<std::string>{
      PERDURE_PROCESS_WORKER, db.url, db.schema, executor, "1000", "200"});
    EXPECT_TRUE(w->wait_for("READY", 30s)) << w->output();
    return w;
  };
  auto a = worker("worker-a");
  constexpr int runs = 30;
  for (int i = 0; i < runs; ++i)
    (void)ops.start_workflow<int>("job", i,
                                  {.id = (i % 2 ? "odd-" : "even-")
                                         + std::to_string(i)});
  // Mid-flight: half of them cancelled from the CLI, by filter.
  ASSERT_TRUE(test::eventually([&] {
    return std::stol(sql.scalar("SELECT count(DISTINCT run_id) FROM "
                                + sql.table("step_log"))) >= runs;
  }, 30s));
  auto cancel = test::run_cli(db, {"runs", "cancel", "--id-prefix", "odd-",
                                   "--yes", "--json"});
  ASSERT_EQ(cancel.code, 0) << cancel.out << cancel.err;
  EXPECT_EQ(nlohmann::json::parse(cancel.out)["done"], runs / 2);
  // Worker A dies; B starts and takes over A's runs while the CLI resumes
  // the cancelled ones.
  a->sigkill();
  auto b = worker("worker-b");
  auto resume = test::run_cli(db, {"runs", "resume", "--status", "CANCELLED",
                                   "--reason", "cancelled by mistake", "--yes",
                                   "--json"});
  ASSERT_EQ(resume.code, 0) << resume.out << resume.err;
  EXPECT_EQ(nlohmann::json::parse(resume.out)["done"], runs / 2);
  ASSERT_TRUE(test::eventually([&] {
    return std::stol(sql.scalar("SELECT count(*) FROM " + sql.table("runs")
                                + " WHERE status = 'SUCCESS' AND name = "
                                  "'job'")) == runs;
  }, 60s)) << test::run_cli(db, {"runs", "list", "--limit", "100"}).out;
  EXPECT_EQ(sql.scalar("SELECT count(*) FROM " + sql.table("tx_rows")),
            std::to_string(runs))
    << "each run's transaction committed once";
  EXPECT_EQ(sql.scalar("SELECT count(*) FROM (SELECT run_id FROM "
                       + sql.table("tx_rows")
                       + " GROUP BY run_id HAVING count(*) > 1) d"),
            "0");
  // The history of a resumed run says so.
  auto shown = test::run_cli(db, {"runs", "show", "odd-1", "--json"});
  bool recorded = false;
  auto doc = nlohmann::json::parse(shown.out);
  for (auto& e : doc["journal"])
    recorded = recorded || (e["kind"] == "resume"
                            && e["reason"] == "cancelled by mistake");
  EXPECT_TRUE(recorded) << shown.out;
  b->signal(SIGTERM);
  EXPECT_EQ(b->wait_exit(30s), 0);
}

} // namespace
