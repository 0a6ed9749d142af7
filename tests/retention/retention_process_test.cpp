// Retention under a running workload, with kills during collection: worker
// processes each run a steady workload and a collector that collects
// every ended run at once; each is SIGKILLed after a random moment and
// the next takes over (its turn runs out in 300 ms). The store starts with
// 20 000 ended roots (a tenth with a child) and work that must stay: an
// ended root whose child still waits in a queue, a BLOCKED root with an
// ended child. After every kill: nothing half-collected (a tombstone
// with rows left, a kept run with rows missing, a child collected apart
// from its root), nothing live collected, and the collectors' total equal
// to the tombstones. At the end every seeded root is collected, the kept
// work is whole, and a collected id still refuses a new start.

#include <gtest/gtest.h>

#include <unistd.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "perdure/perdure.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr const char* ended = "('SUCCESS', 'ERROR', 'CANCELLED', "
                              "'RETRIES_EXCEEDED', 'COMPENSATED', "
                              "'COMPENSATION_FAILED', 'DEAD_LETTER')";

class seeder {
public:
  explicit seeder(test::sql_client& sql) : sql_(sql) {}

  bool pg() const {
    return std::string{sql_.dialect()} == "postgresql";
  }

  std::string t(const std::string& table) const {
    return sql_.table(table);
  }

  std::string bytes() const {
    return pg() ? "'\\x01'::bytea" : "X'01'";
  }

  /// INSERT INTO `table` (`columns`) SELECT `select` over g = 1..n.
  void series(int n, const std::string& table, const std::string& columns,
              const std::string& select) {
    auto ns = std::to_string(n);
    if (pg())
      sql_.exec("INSERT INTO " + t(table) + " (" + columns + ") SELECT "
                + select + " FROM generate_series(1, " + ns + ") AS s(g)");
    else
      sql_.exec("WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 "
                "FROM s WHERE g < " + ns + ") INSERT INTO " + t(table) + " ("
                + columns + ") SELECT " + select + " FROM s");
  }

  /// Runs `id_expr` (over g) of workflow "seeded": status, parent, and
  /// three journal entries, an event and a message each.
  void runs(int n, const std::string& id_expr, const std::string& status,
            const std::string& parent_expr, std::int64_t at,
            const std::string& extra_cols = "",
            const std::string& extra_vals = "") {
    auto at_s = std::to_string(at);
    series(n, "runs",
           "id, name, status, inputs, executor, epoch, app_version, "
           "created_at, updated_at, parent_id" + extra_cols,
           id_expr + ", 'seeded', '" + status + "', " + bytes() + ", '', 0, "
             "'', " + at_s + ", " + at_s + ", " + parent_expr + extra_vals);
    for (int seq = 0; seq < 3; ++seq)
      series(n, "journal",
             "run_id, seq, kind, name, outcome, payload, created_at",
             id_expr + ", " + std::to_string(seq) + ", 'step', 's', 0, "
               + bytes() + ", " + at_s);
    series(n, "events", "run_id, key, value, updated_at",
           id_expr + ", 'k', " + bytes() + ", " + at_s);
    series(n, "messages", "run_id, topic, payload, created_at",
           id_expr + ", 'm', " + bytes() + ", " + at_s);
  }

private:
  test::sql_client& sql_;
};

std::int64_t number(test::sql_client& sql, const std::string& q) {
  return std::stoll(sql.scalar(q));
}

/// Rows of run ids matching `like` with `n` journal entries.
std::string journal_count(test::sql_client& sql, const std::string& run) {
  return "(SELECT COUNT(*) FROM " + sql.table("journal") + " j WHERE j.run_id = "
         + run + ")";
}

/// Checks what must hold at any moment; `when` names the moment.
void check_consistent(test::sql_client& sql, const std::string& when) {
  auto runs = sql.table("runs");
  SCOPED_TRACE(when);
  // A tombstone has nothing left, and has ended.
  EXPECT_EQ(number(sql, "SELECT COUNT(*) FROM " + runs
                          + " r WHERE collected_at IS NOT NULL AND (status "
                            "NOT IN " + ended + " OR " + journal_count(sql, "r.id")
                          + " > 0 OR (SELECT COUNT(*) FROM "
                          + sql.table("events") + " e WHERE e.run_id = r.id) "
                            "> 0 OR (SELECT COUNT(*) FROM "
                          + sql.table("messages")
                          + " m WHERE m.run_id = r.id) > 0 OR output IS NOT "
                            "NULL)"),
            0);
  // A seeded run not collected has everything.
  EXPECT_EQ(number(sql, "SELECT COUNT(*) FROM " + runs
                          + " r WHERE name = 'seeded' AND collected_at IS "
                            "NULL AND " + journal_count(sql, "r.id") + " <> 3"),
            0);
  // A child is collected exactly when its root is.
  EXPECT_EQ(number(sql, "SELECT COUNT(*) FROM " + runs + " c JOIN " + runs
                          + " p ON p.id = c.parent_id WHERE (c.collected_at "
                            "IS NULL) <> (p.collected_at IS NULL)"),
            0);
  // The kept work.
  EXPECT_EQ(number(sql, "SELECT COUNT(*) FROM " + runs
                          + " WHERE id LIKE 'keep-%' AND collected_at IS "
                            "NULL"),
            4 * 20);
  // The collectors' total counts every tombstone once (none expired yet).
  EXPECT_EQ(number(sql, "SELECT runs_collected FROM "
                          + sql.table("retention_state")),
            number(sql, "SELECT COUNT(*) FROM " + runs
                          + " WHERE collected_at IS NOT NULL"));
}

TEST(retention_processes, collection_survives_kills_under_a_workload) {
  auto db = test::database::fresh();
  {
    client setup{db.runtime_config("setup")}; // creates the schema
  }
  test::sql_client sql{db};
  seeder seed{sql};
  auto hour_ago = test::wall_ms() - 3'600'000;
  // 20 000 ended roots, 2 000 of them with an ended child: the workers
  // (25 roots a batch) take seconds, so kills land mid-collection.
  seed.runs(20000, "'old-' || g", "SUCCESS", "NULL", hour_ago);
  seed.runs(2000, "'old-' || g || '.0'", "SUCCESS", "'old-' || g", hour_ago);
  // Kept: ended roots whose child waits in a queue nobody serves; a
  // BLOCKED root (no process retries it) with an ended child.
  seed.runs(20, "'keep-a' || g", "SUCCESS", "NULL", hour_ago);
  seed.runs(20, "'keep-a' || g || '.0'", "ENQUEUED", "'keep-a' || g",
            hour_ago, ", queue_name", ", 'parked'");
  seed.runs(20, "'keep-b' || g", "BLOCKED", "NULL", hour_ago,
            ", blocked_code_since", ", 9000000000000");
  seed.runs(20, "'keep-b' || g || '.0'", "SUCCESS", "'keep-b' || g",
            hour_ago);
  check_consistent(sql, "seeded");

  std::mt19937 rng{static_cast<unsigned>(::getpid())};
  std::uniform_int_distribution<int> life_ms{50, 700};
  int kills = db.postgres ? 14 : 10;
  auto runs = sql.table("runs");
  auto collected_old = [&] {
    return number(sql, "SELECT COUNT(*) FROM " + runs
                         + " WHERE id LIKE 'old-%' AND collected_at IS NOT "
                           "NULL");
  };
  int mid_collection = 0; // kills with part of the seeded runs collected
  for (int i = 0; i < kills; ++i) {
    test::child_process w{{PERDURE_RETENTION_WORKER, db.url, db.schema,
                           "w" + std::to_string(i)}};
    ASSERT_TRUE(w.wait_for("READY", 30s)) << w.output();
    std::this_thread::sleep_for(std::chrono::milliseconds{life_ms(rng)});
    w.sigkill();
    auto done = collected_old();
    if (done > 0 && done < 22000)
      ++mid_collection;
    check_consistent(sql, "after kill " + std::to_string(i) + " ("
                            + std::to_string(done)
                            + " seeded runs collected)");
  }
  EXPECT_GE(mid_collection, 2) << "the kills did not land mid-collection";
  // One more, left to finish: every seeded root and child collected.
  test::child_process last{{PERDURE_RETENTION_WORKER, db.url, db.schema,
                            "last"}};
  ASSERT_TRUE(last.wait_for("READY", 30s)) << last.output();
  EXPECT_TRUE(test::eventually([&] { return collected_old() == 22000; }, 120s))
    << collected_old();
  // The killed workers' runs were taken over and ended (then collected).
  EXPECT_TRUE(test::eventually(
    [&] {
      return number(sql, "SELECT COUNT(*) FROM " + runs
                           + " WHERE id LIKE 'job-w%' AND status NOT IN "
                           + ended)
             == 0;
    },
    60s));
  last.signal(SIGTERM);
  EXPECT_TRUE(last.wait_for("STOPPED", 30s)) << last.output();
  check_consistent(sql, "at the end");
  auto jobs_collected = number(
    sql, "SELECT COUNT(*) FROM " + runs
           + " WHERE id LIKE 'job-%' AND collected_at IS NOT NULL");
  EXPECT_GT(jobs_collected, 0);

  // A collected job's id still answers "already ran".
  auto id = sql.scalar("SELECT MIN(id) FROM " + runs
                       + " WHERE id LIKE 'job-w%' AND collected_at IS NOT "
                         "NULL");
  client c{db.runtime_config("probe")};
  auto n = std::stoi(id.substr(id.rfind('-') + 1));
  auto again = c.start_workflow<int>("job", n, {.id = id});
  try {
    again.get(10s);
    ADD_FAILURE() << "a collected run's result";
  } catch (const perdure::error& e) {
    EXPECT_EQ(e.code(), errc::collected) << e.what();
  }
}

} // namespace
