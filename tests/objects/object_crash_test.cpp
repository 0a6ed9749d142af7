// Kills object worker processes (`object_worker.cpp`, SIGKILL) in the middle
// of handlers and checks what users rely on: every call's effect applied
// exactly once (exact totals), each call's reply the same every time it is
// asked for (idempotency keys across crashes), replies consistent with the
// state (each key's replies are 1..n, each once), and never two holders of
// one key running its exclusive handlers at once.

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

constexpr int calls = 400;
constexpr int keys = 20;

class object_worker : public test::child_process {
public:
  object_worker(const test::database& db, const std::string& executor,
                int threads = 8, const std::string& mode = "")
    : child_process(args(db, executor, threads, mode)) {
  }

private:
  static std::vector<std::string> args(const test::database& db,
                                       const std::string& executor,
                                       int threads, const std::string& mode) {
    std::vector<std::string> all{PERDURE_OBJECT_WORKER, db.url, db.schema,
                                 executor, std::to_string(calls),
                                 std::to_string(keys),
                                 std::to_string(threads)};
    if (!mode.empty())
      all.push_back(mode);
    return all;
  }
};

class object_crash_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    sql_ = std::make_unique<test::sql_client>(db_);
    sql_->exec("CREATE TABLE " + sql_->table("probe")
               + " (key TEXT PRIMARY KEY, holder TEXT NOT NULL)");
    sql_->exec("CREATE TABLE " + sql_->table("overlaps")
               + " (key TEXT NOT NULL, seen TEXT NOT NULL, me TEXT NOT "
                 "NULL, at BIGINT NOT NULL)");
  }

  /// Adds the replies `w` printed to `replies_`; a call answered twice must
  /// be answered the same.
  void collect(const test::child_process& w) {
    std::istringstream in{w.output()};
    std::string tag;
    std::set<int> heard; // each caller hears exactly one end
    for (std::string line; std::getline(in, line);) {
      std::istringstream l{line};
      int n = 0;
      std::int64_t reply = 0;
      if (line.rfind("E ", 0) == 0)
        ADD_FAILURE() << "a call ended without its reply: " << line;
      if (!(l >> tag >> n >> reply) || tag != "R") {
        // The worker logs to stderr: a reply line cannot be spliced.
        EXPECT_NE(line.rfind("R ", 0), 0u) << "a reply line unread: " << line;
        continue;
      }
      EXPECT_TRUE(heard.insert(n).second)
        << "call " << n << " heard its end twice in one process";
      auto [i, added] = replies_.emplace(n, reply);
      EXPECT_EQ(i->second, reply) << "call " << n << " answered twice, "
                                  << "differently";
    }
  }

  /// Every call applied once, and every reply consistent with that.
  void expect_exactly_once() {
    std::string missing;
    for (int n = 0; n < calls; ++n)
      if (replies_.count(n) == 0)
        missing += " " + std::to_string(n);
    ASSERT_EQ(replies_.size(), static_cast<size_t>(calls))
      << "calls no process answered:" << missing;
    std::map<std::string, std::set<std::int64_t>> per_key;
    for (auto& [n, reply] : replies_) {
      auto key = "acct-" + std::to_string(n % keys);
      EXPECT_TRUE(per_key[key].insert(reply).second)
        << "two calls of " << key << " saw the same total " << reply;
    }
    std::string state = std::string{sql_->dialect()} == "postgresql"
                          ? "convert_from(state, 'UTF8')"
                          : "CAST(state AS TEXT)";
    for (auto& [key, seen] : per_key) {
      auto expected = static_cast<std::int64_t>(seen.size());
      EXPECT_EQ(*seen.begin(), 1) << key;
      EXPECT_EQ(*seen.rbegin(), expected) << key;
      auto stored = sql_->scalar("SELECT " + state + " FROM "
                                   + sql_->table("objects")
                                   + " WHERE type = 'account' AND key = $1",
                                 {key});
      EXPECT_NE(stored.find("\"total\": " + std::to_string(expected)),
                std::string::npos)
        << key << " holds " << stored;
    }
    EXPECT_EQ(sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                           + " WHERE status <> 'SUCCESS'"),
              "0");
  }

  void kill_holders(const std::string& mode);

  test::database db_;
  std::unique_ptr<test::sql_client> sql_;
  std::map<int, std::int64_t> replies_;
};

} // namespace

/// Kills holders whose callers use `mode` (blocking: "", or "async") at
/// moments timed by replies, then checks every call applied exactly once.
void object_crash_test::kill_holders(const std::string& mode) {
  std::mt19937 rng{std::random_device{}()};
  // Timed by replies, not from READY: a delay of its own let the first
  // process finish every call before its kill now and then (1 run in 7),
  // leaving nothing in flight for any kill. The k-th process dies once
  // about (k + 1) / (kills + 1) of the calls were answered (a reply again
  // for those answered before), so each kill hits other calls.
  std::uniform_int_distribution<int> delay_ms{0, 20};
  constexpr int kills = 4;
  int interrupted = 0;
  for (int k = 0; k < kills; ++k) {
    object_worker w{db_, "holder", 8, mode};
    ASSERT_TRUE(w.wait_for("READY", 60s)) << w.output();
    auto replies = [&] {
      std::size_t n = 0;
      for (auto at = w.output().find("\nR "); at != std::string::npos;
           at = w.output().find("\nR ", at + 1))
        ++n;
      return n;
    };
    // Async callers hear ends a key's first call read from the store
    // (the key was not held yet) well after they committed: their
    // replies would time the kills too late, so the store's ends do.
    auto ended = [&] {
      return static_cast<std::size_t>(std::stoll(
        sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                     + " WHERE status = 'SUCCESS'")));
    };
    auto target = static_cast<std::size_t>((k + 1) * calls / (kills + 1));
    while ((mode.empty() ? replies() : ended()) < target
           && !w.wait_for("DONE", 5ms)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{delay_ms(rng)});
    w.sigkill();
    collect(w);
    interrupted += sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("runs")
                                + " WHERE status <> 'SUCCESS'")
                       != "0";
  }
  object_worker last{db_, "holder", 8, mode};
  ASSERT_EQ(last.wait_exit(180s), 0) << last.output();
  collect(last);
  EXPECT_GE(interrupted, 1) << "no kill hit a call in flight: the test is void";
  expect_exactly_once();
  EXPECT_EQ(sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("overlaps")),
            "0");
}

TEST_F(object_crash_test, sigkilled_holders_apply_every_call_exactly_once) {
  kill_holders("");
}

// The same with every call in flight at once through call_async: the
// calls a killed process stored run once, and the next one's callers
// (same idempotency keys) get their first replies.
TEST_F(object_crash_test, sigkilled_holders_apply_every_async_call_exactly_once) {
  kill_holders("async");
}

TEST_F(object_crash_test, a_call_that_kills_its_process_every_time_ends) {
  // Its handler SIGKILLs the process; each start claims it again (one more
  // recovery) until it passes max_recovery_attempts (2 in the worker).
  std::string last;
  int starts = 0;
  for (; starts < 6; ++starts) {
    test::child_process w{{PERDURE_OBJECT_WORKER, db_.url, db_.schema,
                           "holder", "0", "1", "1", "poison"}};
    auto code = w.wait_exit(60s);
    last = w.output();
    if (code == 0)
      break;
  }
  EXPECT_LE(starts, 4) << last;
  EXPECT_NE(last.find("ENDED RETRIES_EXCEEDED"), std::string::npos) << last;
  EXPECT_EQ(sql_->scalar("SELECT status FROM " + sql_->table("runs")
                         + " WHERE object_key = 'acct-poison'"),
            "RETRIES_EXCEEDED");
  // It changed nothing.
  EXPECT_EQ(sql_->scalar("SELECT COUNT(*) FROM " + sql_->table("objects")
                         + " WHERE key = 'acct-poison' AND state IS NOT NULL"),
            "0");
}

TEST_F(object_crash_test, two_processes_never_hold_one_key_at_once) {
  if (test::store_under_test() != "postgres")
    GTEST_SKIP() << "SQLite serves one runtime per file";
  std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> delay_ms{50, 300};
  // Both call every call (same idempotency keys): each runs once, wherever.
  // a starts first and claims most keys; b's calls of those go to a.
  std::int64_t killed_at = 0;
  int held_by_a = 0;
  std::optional<object_worker> b;
  {
    object_worker a{db_, "a", 4};
    ASSERT_TRUE(a.wait_for("READY", 60s)) << a.output();
    std::this_thread::sleep_for(50ms);
    b.emplace(db_, "b", 4);
    ASSERT_TRUE(b->wait_for("READY", 60s)) << b->output();
    std::this_thread::sleep_for(std::chrono::milliseconds{delay_ms(rng)});
    a.sigkill();
    killed_at = test::wall_ms();
    collect(a);
  }
  // Keys a held, with calls under way: b must take them over.
  held_by_a = std::stoi(sql_->scalar(
    "SELECT COUNT(*) FROM " + sql_->table("objects")
    + " o WHERE o.executor = 'a' AND EXISTS (SELECT 1 FROM "
    + sql_->table("runs")
    + " r WHERE r.object_type = o.type AND r.object_key = o.key AND "
      "r.status <> 'SUCCESS')"));
  ASSERT_EQ(b->wait_exit(180s), 0) << b->output();
  collect(*b);
  EXPECT_GE(held_by_a, 1) << "a held no key with calls under way: void";
  std::cout << "a held " << held_by_a << " keys with calls under way\n";
  expect_exactly_once();
  // The dead holder's probe rows stay; seeing one after its death is no
  // overlap.
  auto overlaps = sql_->exec("SELECT key, seen, me, at FROM "
                             + sql_->table("overlaps"));
  for (auto& row : overlaps.rows)
    EXPECT_TRUE(*row[1] == "a" && std::stoll(*row[3]) >= killed_at)
      << *row[2] << " ran a handler of " << *row[0] << " while " << *row[1]
      << " held it";
}
