// Queues across processes on one PostgreSQL: two runtimes together hold
// the rate limit (by when items start) and the global and per-partition
// concurrency, and the items of a SIGKILLed one finish on the other, no
// step past its checkpoint run twice. Each worker logs every step it ran
// (pid, partition, when it began and ended) to item_log.

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"
#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

using spec = std::tuple<int, int, std::string>;

struct logged {
  std::string run;
  int step;
  std::int64_t pid;
  std::string part;
  std::int64_t enter, leave;
};

class queue_process_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    // Registered for PostgreSQL only: SQLite runs one runtime per file.
    ASSERT_TRUE(db_.postgres) << "run with PERDURE_TEST_STORE=postgres";
    sql_ = std::make_unique<test::sql_client>(db_);
    client{db_.runtime_config("setup")}; // migrated before the workers
    sql_->exec("CREATE TABLE " + sql_->table("item_log")
               + " (run_id TEXT, step INTEGER, pid BIGINT, part TEXT, "
                 "enter_ms BIGINT, leave_ms BIGINT)");
  }

  std::unique_ptr<test::child_process> worker(const std::string& executor) {
    auto w = std::make_unique<test::child_process>(std::vector<std::string>{
      PERDURE_QUEUE_WORKER, db_.url, db_.schema, executor});
    EXPECT_TRUE(w->wait_for("READY", 20s)) << w->output();
    return w;
  }

  std::vector<logged> log() {
    std::vector<logged> out;
    for (auto& r : sql_->exec("SELECT run_id, step, pid, part, enter_ms, "
                              "leave_ms FROM "
                              + sql_->table("item_log")
                              + " ORDER BY enter_ms")
                     .rows)
      out.push_back({*r[0], std::stoi(*r[1]), std::stoll(*r[2]), *r[3],
                     std::stoll(*r[4]), std::stoll(*r[5])});
    return out;
  }

  /// Returns the most steps running at once (among those `keep` admits).
  template <class P>
  static int max_overlap(const std::vector<logged>& rows, P keep) {
    std::vector<std::pair<std::int64_t, int>> edges;
    for (auto& r : rows)
      if (keep(r)) {
        edges.push_back({r.enter, 1});
        edges.push_back({r.leave, -1});
      }
    std::sort(edges.begin(), edges.end()); // an end before a start at a tie
    int now = 0, most = 0;
    for (auto& [at, d] : edges)
      most = std::max(most, now += d);
    return most;
  }

  test::database db_;
  std::unique_ptr<test::sql_client> sql_;
};

TEST_F(queue_process_test, two_processes_hold_the_rate_limit_by_start_time) {
  auto a = worker("a");
  auto b = worker("b");
  client c{db_.runtime_config("web")};
  std::vector<workflow_handle<int>> handles;
  for (int n = 0; n < 60; ++n)
    handles.push_back(
      queues::enqueue<int>(c, "rated", "item", spec{1, 1, ""}));
  for (auto& h : handles)
    EXPECT_EQ(h.get(60s), 0);
  auto rows = log();
  ASSERT_EQ(rows.size(), 60u);
  std::set<std::int64_t> pids;
  std::vector<std::int64_t> starts;
  for (auto& r : rows) {
    pids.insert(r.pid);
    starts.push_back(r.enter);
  }
  EXPECT_EQ(pids.size(), 2u) << "both processes claimed";
  std::sort(starts.begin(), starts.end());
  // Windows 100 ms shorter than the period, as the torture run's check:
  // the limit counts claims stamped on the database's clock, and a body
  // begins a little after its claim (the queue restamps a start that
  // slipped past its 30 ms margin while loading, not the scheduling
  // after). Under the sanitizers' load one start in 60 slipped into the
  // next window of a full-length check.
  for (std::size_t i = 0; i < starts.size(); ++i) {
    auto in_window = std::upper_bound(starts.begin(), starts.end(),
                                      starts[i] + 899)
                     - (starts.begin() + static_cast<std::ptrdiff_t>(i));
    EXPECT_LE(in_window, 20) << "starts in [" << starts[i] << ", +900 ms)";
  }
  auto span = starts.back() - starts.front();
  std::cout << "[ measured ] 40 starts after the first 20 took " << span
            << " ms: " << 40.0 * 1000 / std::max<double>(1, span)
            << "/s of 20/s" << std::endl;
  // 75 % at least: a limiter that halves the rate fails, a loaded CI
  // machine's late claim does not (the exact rate is the bench's).
  EXPECT_LE(span, 40 * 1000 / 15) << "below 75 % of the limit";
}

TEST_F(queue_process_test, two_processes_hold_global_and_partition_concurrency) {
  auto a = worker("a");
  auto b = worker("b");
  client c{db_.runtime_config("web")};
  std::vector<workflow_handle<int>> handles;
  for (int n = 0; n < 30; ++n) {
    auto part = std::string{"p"} + static_cast<char>('a' + n % 5);
    handles.push_back(queues::enqueue<int>(c, "limited", "item",
                                           spec{2, 25, part},
                                           {.partition_key = part}));
  }
  for (auto& h : handles)
    EXPECT_EQ(h.get(60s), 1);
  auto rows = log();
  ASSERT_EQ(rows.size(), 60u);
  std::set<std::int64_t> pids;
  for (auto& r : rows)
    pids.insert(r.pid);
  EXPECT_EQ(pids.size(), 2u) << "both processes claimed";
  // A run holds its slot from its first step to its last: count runs.
  std::map<std::string, logged> spans;
  for (auto& r : rows) {
    auto [i, fresh] = spans.emplace(r.run, r);
    i->second.enter = std::min(i->second.enter, r.enter);
    i->second.leave = std::max(i->second.leave, r.leave);
  }
  std::vector<logged> items;
  for (auto& [id, r] : spans)
    items.push_back(r);
  auto all = max_overlap(items, [](auto&) { return true; });
  EXPECT_LE(all, 3) << "global concurrency";
  EXPECT_EQ(all, 3) << "and it was used";
  for (char p = 'a'; p < 'f'; ++p) {
    auto part = std::string{"p"} + p;
    EXPECT_EQ(max_overlap(items, [&](auto& r) { return r.part == part; }), 1)
      << part;
  }
}

TEST_F(queue_process_test, a_killed_process_items_finish_on_the_other_once) {
  auto a = worker("a");
  client c{db_.runtime_config("web")};
  std::vector<workflow_handle<int>> handles;
  for (int n = 0; n < 16; ++n)
    handles.push_back(
      queues::enqueue<int>(c, "jobs", "item", spec{5, 40, ""}));
  ASSERT_TRUE(test::eventually([&] { return log().size() >= 10; }, 20s));
  auto killed = a->pid();
  a->sigkill();
  auto b = worker("b");
  for (auto& h : handles)
    EXPECT_EQ(h.get(60s), 0 + 1 + 2 + 3 + 4);
  auto rows = log();
  std::map<std::string, int> last_of_killed; // its last step begun, per run
  for (auto& r : rows)
    if (r.pid == killed)
      last_of_killed[r.run] = std::max(last_of_killed[r.run], r.step);
  std::map<std::pair<std::string, int>, int> runs_of_step;
  for (auto& r : rows)
    ++runs_of_step[{r.run, r.step}];
  int taken_over = 0;
  for (auto& [key, n] : runs_of_step) {
    auto i = last_of_killed.find(key.first);
    if (n > 1) {
      EXPECT_EQ(n, 2) << key.first << " s" << key.second;
      // Only the step in flight at the kill runs again.
      ASSERT_NE(i, last_of_killed.end()) << key.first;
      EXPECT_EQ(key.second, i->second)
        << key.first << " s" << key.second << " ran again past its checkpoint";
    }
  }
  for (auto& h : handles)
    for (auto& r : rows)
      if (r.run == h.id() && r.pid != killed && r.step == 4
          && last_of_killed.count(h.id()) > 0)
        ++taken_over;
  EXPECT_GT(taken_over, 0) << "no item of the killed process moved";
}

} // namespace
