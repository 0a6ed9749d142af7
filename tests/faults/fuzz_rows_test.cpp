// Seeded random input for what Perdure reads that another process wrote:
// journal rows, saga phases, queue columns and notices. Every input gives
// a value or a clear error -- the run it belongs to fails with a reason, a
// notice is ignored -- never a crash, a hang or a sanitizer report. The
// seed is printed (PERDURE_FUZZ_SEED repeats it).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <variant>
#include <random>
#include <string>
#include <thread>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/queues/queue.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

std::uint64_t seed() {
  if (auto s = std::getenv("PERDURE_FUZZ_SEED"))
    return std::stoull(s);
  return std::random_device{}();
}

std::string junk(std::mt19937_64& rng, std::size_t most) {
  static const std::string alphabet =
    // Text another process could have written (PostgreSQL stores only
    // valid UTF-8), with JSON's and the notices' separators.
    "abcdefghijklmnopqrstuvwxyz0123456789:/.-_ {}[]\",\x1f";
  std::string s(rng() % (most + 1), ' ');
  for (auto& c : s)
    c = alphabet[rng() % alphabet.size()];
  return s;
}

/// Waits at its second operation; its first is a step.
void register_waiter(runtime& rt) {
  rt.register_workflow("waiter", [](workflow_context& ctx) -> task<int> {
    auto a = co_await ctx.step("a", [] { return 1; });
    co_return a + co_await ctx.recv<int>("go");
  });
}

class fuzz_rows_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    seed_ = seed();
    std::cout << "seed " << seed_ << " (PERDURE_FUZZ_SEED repeats it)\n";
  }

  test::database db_;
  std::uint64_t seed_ = 0;
};

} // namespace

TEST_F(fuzz_rows_test, random_journal_rows_and_phases_fail_their_runs_clearly) {
  constexpr int runs = 40;
  {
    runtime rt{db_.runtime_config()};
    register_waiter(rt);
    rt.start();
    for (int n = 0; n < runs; ++n)
      rt.start_workflow<int>("waiter", {.id = "r" + std::to_string(n)});
    ASSERT_TRUE(test::eventually([&] {
      return rt.history("r" + std::to_string(runs - 1)).size() >= 1;
    }));
  }
  // Rows no Perdure wrote: at the wait's index, random kinds (real ones
  // and junk), outcomes, names and payloads; random saga phases too.
  std::mt19937_64 rng{seed_};
  test::sql_client sql{db_};
  static const char* kinds[] = {"step", "transaction", "sleep", "await",
                                "awakeable", "child", "select", "event"};
  for (int n = 0; n < runs; ++n) {
    auto id = "r" + std::to_string(n);
    sql.exec("DELETE FROM " + sql.table("journal")
               + " WHERE run_id = $1 AND seq > 0",
             {id});
    for (std::int64_t seq = 1; seq <= static_cast<std::int64_t>(1 + rng() % 3);
         ++seq) {
      auto kind = rng() % 4 == 0 ? junk(rng, 8) : std::string{kinds[rng() % 8]};
      sql.exec("INSERT INTO " + sql.table("journal")
                 + " (run_id, seq, kind, name, outcome, payload, error, "
                   "created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
               {id, seq, kind, junk(rng, 12),
                static_cast<std::int64_t>(rng() % 6) - 1, junk(rng, 40),
                junk(rng, 10), static_cast<std::int64_t>(rng() % 1000)});
    }
    if (rng() % 3 == 0)
      sql.exec("UPDATE " + sql.table("runs") + " SET saga_phase = $2 WHERE id = $1",
               {id, junk(rng, 12)});
  }
  // The store reads them back as values or unreadable entries.
  auto store = persistence::open_store(db_.store_options());
  std::vector<std::string> ids;
  for (int n = 0; n < runs; ++n)
    ids.push_back("r" + std::to_string(n));
  EXPECT_NO_THROW(store->load_journals(ids));
  // A runtime recovers them all: each either ends (failed with a reason,
  // or taking the junk as its value) or waits on; none takes it down.
  runtime rt{db_.runtime_config()};
  register_waiter(rt);
  rt.start();
  for (auto& id : ids) {
    try {
      rt.send(id, "go", 1);
    } catch (const error&) {
    }
  }
  std::this_thread::sleep_for(2s);
  int ended = 0;
  for (auto& id : ids) {
    auto status = rt.retrieve_workflow<int>(id).status();
    if (status != run_status::pending)
      ++ended;
    if (status == run_status::error) {
      auto page = rt.list_runs({.limit = 1000});
      for (auto& r : page.runs) {
        if (r.id == id) {
          EXPECT_TRUE(r.error && !r.error->empty()) << id << " failed silently";
        }
      }
    }
  }
  std::cout << ended << " of " << runs << " runs ended\n";
  // The runtime is still sound: a fresh run runs.
  auto fresh = rt.start_workflow<int>("waiter", {.id = "fresh"});
  rt.send("fresh", "go", 41);
  EXPECT_EQ(fresh.get(20s), 42);
}

TEST_F(fuzz_rows_test, random_notices_are_ignored) {
  if (!db_.postgres)
    GTEST_SKIP() << "notices are PostgreSQL's (NOTIFY)";
  runtime rt{db_.runtime_config()};
  register_waiter(rt);
  rt.register_object<int>("counter").handler(
    "add", [](object_context<int>& ctx, int n) -> task<int> {
      ctx.state() += n;
      co_return ctx.state();
    });
  queues::register_queue(rt, "q", {});
  rt.start();
  auto h = rt.start_workflow<int>("waiter", {.id = "w"});
  auto store = persistence::open_store(db_.store_options());
  std::mt19937_64 rng{seed_};
  static const char prefixes[] = "wcnkqxo";
  for (int i = 0; i < 3000; ++i) {
    std::string payload;
    if (rng() % 4 != 0)
      payload = std::string{prefixes[rng() % 7]} + (rng() % 3 ? ":" : "");
    payload += junk(rng, 30);
    store->notify(payload);
  }
  // Notices naming real things still work among them.
  store->notify("w:w");
  store->notify("o:counter\x1fk");
  store->notify("q:q");
  rt.send("w", "go", 1);
  EXPECT_EQ(h.get(20s), 2);
  EXPECT_EQ(rt.call<int>("counter", "k", "add", 5), 5);
}

// Queue items whose scheduling columns another process wrote badly:
// extreme priorities, partitions, delays, timeouts and attempt counts, junk
// inputs. Each item ends, waits for its time, or fails with a reason; none
// wedges the queue for the items enqueued after it.
TEST_F(fuzz_rows_test, random_queue_columns_never_wedge_the_queue) {
  constexpr int items = 40;
  auto register_all = [](runtime& rt) {
    rt.register_workflow("echo", [](workflow_context&, int n) -> task<int> {
      co_return n;
    });
    queues::register_queue(rt, "q", {.concurrency = 4,
                                     .partition_concurrency = 1});
  };
  {
    client c{db_.runtime_config()};
    for (int n = 0; n < items; ++n)
      queues::enqueue<int>(c, "q", "echo", n,
                           {.id = "i" + std::to_string(n),
                            .partition_key = "p" + std::to_string(n % 3)});
  }
  std::mt19937_64 rng{seed_};
  test::sql_client sql{db_};
  auto extreme = [&]() -> sql_param {
    static const std::int64_t values[] = {
      std::numeric_limits<std::int64_t>::min(),
      std::numeric_limits<std::int64_t>::max(), -1, 0, 1,
      std::numeric_limits<std::int32_t>::max()};
    switch (rng() % 4) {
      case 0: return nullptr;
      case 1: return static_cast<std::int64_t>(rng());
      default: return values[rng() % 6];
    }
  };
  static const char* columns[] = {"priority", "not_before", "timeout_ms",
                                  "attempts", "deadline"};
  for (int n = 0; n < items; ++n) {
    auto id = "i" + std::to_string(n);
    for (int k = 0; k < 2; ++k) {
      std::string column = columns[rng() % 5];
      auto value = extreme();
      if (column == "priority" || column == "attempts") {
        // NOT NULL INTEGER columns: within their type on PostgreSQL.
        if (std::holds_alternative<std::nullptr_t>(value))
          value = std::int64_t{0};
        auto v = std::get<std::int64_t>(value);
        value = static_cast<std::int64_t>(static_cast<std::int32_t>(v));
      }
      sql.exec("UPDATE " + sql.table("runs") + " SET " + column
                 + " = $2 WHERE id = $1",
               {id, value});
    }
    if (rng() % 4 == 0)
      sql.exec("UPDATE " + sql.table("runs")
                 + " SET partition_key = $2 WHERE id = $1",
               {id, junk(rng, 20)});
  }
  runtime rt{db_.runtime_config()};
  register_all(rt);
  rt.start();
  // The queue still serves: items enqueued now run, in every partition.
  client c{db_.runtime_config()};
  std::vector<workflow_handle<int>> fresh;
  for (int n = 0; n < 6; ++n)
    fresh.push_back(queues::enqueue<int>(
      c, "q", "echo", 100 + n,
      {.id = "fresh" + std::to_string(n),
       .partition_key = "p" + std::to_string(n % 3)}));
  for (int n = 0; n < 6; ++n)
    EXPECT_EQ(fresh[n].get(30s), 100 + n) << "the queue is wedged";
  // Every damaged item ends (with a reason if it failed) or is ENQUEUED
  // for a time in the future.
  std::vector<std::string> stuck;
  auto settled = [&] {
    stuck.clear();
    auto now = test::wall_ms();
    for (auto& row : sql.exec("SELECT id, status, not_before, error FROM "
                              + sql.table("runs") + " WHERE id LIKE 'i%'")
                       .rows) {
      auto id = row[0].value_or("");
      auto status = row[1].value_or("");
      if (status == "SUCCESS")
        continue;
      if (status == "ENQUEUED" && row[2] && std::stoll(*row[2]) > now + 60'000)
        continue; // waits for its time
      if (status == "ENQUEUED" || status == "PENDING")
        stuck.push_back(id + " " + status);
      else if (!row[3] || row[3]->empty())
        stuck.push_back(id + " ended " + status + " with no reason");
    }
    return stuck.empty();
  };
  EXPECT_TRUE(test::eventually(settled, 20s));
  for (auto& s : stuck)
    ADD_FAILURE() << s;
}
