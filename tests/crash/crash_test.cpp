// Kills a real worker process (SIGKILL) at random moments, restarts it, and
// checks what users rely on: every workflow ends SUCCESS with the right
// output, no checkpointed step ever runs again, a crash re-runs at most the
// step each run had in flight, and a transactional step's rows and its
// checkpoint are always both present or both absent.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "perdure/persistence/codec.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr int workflows = 200;
constexpr int steps = 10;
constexpr int tx_step = 5;
constexpr int kills = 4;

/// A crash worker process (`crash_worker.cpp`) on `db`.
class worker : public test::child_process {
public:
  worker(const test::database& db, int incarnation)
    : child_process({PERDURE_CRASH_WORKER, db.url, db.schema,
                     std::to_string(incarnation), std::to_string(workflows),
                     std::to_string(steps)}) {
  }
};

using step_key = std::pair<std::string, int>; // (run id, seq)

struct snapshot {
  std::set<step_key> checkpointed;
  std::map<std::string, int> last_seq; // per run, highest checkpointed seq
  std::map<std::string, int> tx_rows;   // per run, user rows of the tx step
  int unfinished_runs = 0;
};

class crash_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    sql_ = std::make_unique<test::sql_client>(db_);
    sql_->exec("CREATE TABLE " + sql_->table("step_log")
               + " (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                 "incarnation INTEGER NOT NULL)");
    sql_->exec("CREATE TABLE " + sql_->table("tx_rows")
               + " (run_id TEXT NOT NULL)");
  }

  snapshot take_snapshot() {
    snapshot s;
    // Journal and user rows in one statement (one snapshot): a killed
    // worker's last commit may still land between two reads.
    for (auto& row : sql_->exec("SELECT run_id, seq FROM "
                                + sql_->table("journal")
                                + " UNION ALL SELECT run_id, -1 FROM "
                                + sql_->table("tx_rows"))
                       .rows) {
      step_key k{*row[0], std::stoi(*row[1])};
      if (k.second < 0) {
        ++s.tx_rows[k.first];
        continue;
      }
      s.checkpointed.insert(k);
      auto& last = s.last_seq.try_emplace(k.first, -1).first->second;
      last = std::max(last, k.second);
    }
    s.unfinished_runs = std::stoi(
      sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                   + " WHERE status <> 'SUCCESS'"));
    return s;
  }

  /// Transactional step: user row present exactly when its checkpoint is.
  void expect_tx_rows_match_checkpoints(const snapshot& s, int kill) {
    for (int n = 0; n < workflows; ++n) {
      auto id = "wf-" + std::to_string(n);
      auto has_checkpoint = s.checkpointed.count({id, tx_step}) > 0;
      auto rows = s.tx_rows.find(id);
      EXPECT_EQ(rows == s.tx_rows.end() ? 0 : rows->second,
                has_checkpoint ? 1 : 0)
        << "after kill " << kill << ", run " << id;
    }
  }

  test::database db_;
  std::unique_ptr<test::sql_client> sql_;
};

} // namespace

TEST_F(crash_test, sigkilled_workers_finish_every_workflow_exactly_right) {
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> delay_ms{20, 600};
  std::vector<snapshot> at_kill;
  for (int k = 0; k < kills; ++k) {
    worker w{db_, k};
    ASSERT_TRUE(w.wait_for("READY", 60s)) << w.output();
    std::this_thread::sleep_for(std::chrono::milliseconds{delay_ms(rng)});
    w.sigkill();
    at_kill.push_back(take_snapshot());
    expect_tx_rows_match_checkpoints(at_kill.back(), k);
  }
  {
    worker w{db_, kills};
    ASSERT_EQ(w.wait_exit(180s), 0) << w.output();
  }
  int interrupted = 0;
  for (auto& s : at_kill)
    interrupted += s.unfinished_runs > 0 ? 1 : 0;
  EXPECT_GE(interrupted, 1) << "no kill hit unfinished work: the test is void";

  // Every workflow succeeded with the right output.
  // Outputs are JSON text in a BLOB/BYTEA column.
  std::string output = std::string{sql_->dialect()} == "postgresql"
                         ? "convert_from(output, 'UTF8')"
                         : "output";
  auto runs = sql_->exec("SELECT id, status, " + output + " FROM "
                         + sql_->table("runs"));
  ASSERT_EQ(runs.rows.size(), static_cast<size_t>(workflows));
  for (auto& row : runs.rows) {
    auto n = std::stoi(row[0]->substr(3));
    long expected = 1000;
    for (int i = 0; i < steps; ++i)
      if (i != tx_step)
        expected += i * i + n;
    EXPECT_EQ(*row[1], "SUCCESS") << *row[0];
    EXPECT_EQ(persistence::decode<long>(row[2].value_or("")), expected) << *row[0];
  }
  auto final_state = take_snapshot();
  EXPECT_EQ(final_state.checkpointed.size(),
            static_cast<size_t>(workflows * steps));
  expect_tx_rows_match_checkpoints(final_state, kills);

  // Step executions by (run, seq): which incarnations ran each.
  std::map<step_key, std::vector<int>> executions;
  for (auto& row : sql_->exec("SELECT run_id, seq, incarnation FROM "
                              + sql_->table("step_log"))
                     .rows)
    executions[{*row[0], std::stoi(*row[1])}].push_back(std::stoi(*row[2]));
  int reruns = 0;
  for (auto& [key, incs] : executions) {
    for (int k = 0; k < kills; ++k) {
      if (at_kill[k].checkpointed.count(key) == 0)
        continue;
      for (auto inc : incs)
        EXPECT_LE(inc, k) << "step " << key.first << "#" << key.second
                          << " was checkpointed before kill " << k
                          << " but ran again in incarnation " << inc;
    }
    reruns += static_cast<int>(incs.size()) - 1;
  }
  // A crash re-runs, per run, at most the one step that was in flight: the
  // one right after the last checkpoint.
  for (int k = 0; k < kills; ++k) {
    for (auto& [key, incs] : executions) {
      bool before = false, after = false;
      for (auto inc : incs)
        (inc <= k ? before : after) = true;
      if (before && after) {
        auto i = at_kill[k].last_seq.find(key.first);
        int next = i == at_kill[k].last_seq.end() ? 0 : i->second + 1;
        EXPECT_EQ(key.second, next)
          << "crash " << k << " re-ran " << key.first << "#" << key.second
          << ", which was not the step in flight";
      }
    }
  }
  EXPECT_LE(reruns, kills * workflows);
  std::cout << "crash test: " << reruns << " in-flight steps re-ran over "
            << kills << " kills\n";
}
