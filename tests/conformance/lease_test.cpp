// Executor leases at the store: one holder per id, a lapsed holder's
// writes and claims fenced, epochs that never come back, runs a holder
// cannot run given up.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "conformance/store_fixture.hpp"
#include "perdure/error.hpp"

namespace perdure::test {
namespace {

using namespace std::chrono_literals;

class lease_test : public store_test {
protected:
  /// A connection writing for the holder of a lease.
  struct holder {
    std::shared_ptr<std::atomic<std::int64_t>> epoch
      = std::make_shared<std::atomic<std::int64_t>>(0);
    std::unique_ptr<store> db;
  };

  holder open_holder() {
    holder h;
    auto opts = db_.store_options();
    opts.lease_epoch = h.epoch;
    h.db = open_store(opts);
    return h;
  }

  static lease_request request(std::string executor,
                               std::int64_t timeout_ms = 10'000) {
    return {.executor = std::move(executor),
            .instance = "i-" + std::to_string(timeout_ms),
            .app_version = "",
            .timeout_ms = timeout_ms};
  }

  run_record run_of(std::string id, std::string executor) {
    auto r = make_run(std::move(id));
    r.owner = {std::move(executor), 1};
    return r;
  }
};

TEST_F(lease_test, a_held_id_is_refused_and_the_holder_keeps_it) {
  auto first = open_holder();
  first.epoch->store(first.db->acquire_lease(request("x")));
  auto second = open_holder();
  try {
    second.db->acquire_lease(request("x"));
    FAIL() << "a second holder got the lease";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::executor_in_use) << ex.what();
  }
  auto renewed = first.db->renew_lease("x", first.epoch->load());
  ASSERT_TRUE(renewed.has_value())
    << "the refused request changed the holder's lease";
  EXPECT_TRUE(renewed->locked);
}

// A review found the patch rule tested only through a runtime that gave
// the run back at once: here every claim path, on both stores, must leave
// a run that took a patch to a filter that declares it.
TEST_F(lease_test, a_run_that_took_a_patch_is_claimed_only_where_it_is_declared) {
  auto x = open_holder();
  x.epoch->store(x.db->acquire_lease(request("x")));
  const claim_filter old_code{.names = {"wf"}, .app_version = ""};
  const claim_filter new_code{.names = {"wf", "wf\x1e" "carrier"},
                              .app_version = ""};
  ASSERT_TRUE(store_->create_run(run_of("plain", "x")).created);
  ASSERT_TRUE(store_->create_run(run_of("patched", "x")).created);
  append_write marker;
  marker.owner = {"x", 1};
  marker.entry = {.run_id = "patched", .seq = -2, .kind = entry_kind::patch,
                  .name = "carrier", .payload = "0"};
  ASSERT_TRUE(x.db->write_batch({.appends = {marker}, .completions = {}})
                .appends.at(0));
  auto ids = [](const std::vector<run_record>& runs) {
    std::vector<std::string> out;
    for (auto& r : runs)
      out.push_back(r.id);
    std::sort(out.begin(), out.end());
    return out;
  };
  using ids_t = std::vector<std::string>;
  // Recovery of its own runs.
  EXPECT_EQ(ids(x.db->claim_pending_runs("x", old_code, 3000)),
            ids_t{"plain"});
  EXPECT_EQ(ids(x.db->claim_pending_runs("x", new_code, 3000)),
            (ids_t{"patched", "plain"}));
  // One run, as a notice has it claimed.
  EXPECT_FALSE(x.db->claim_run("patched", "x", old_code, false, true));
  EXPECT_TRUE(x.db->claim_run("patched", "x", new_code, false, true));
  // Given up by code that lacks it, for others to take over.
  EXPECT_EQ(x.db->count_unclaimable("x", old_code), 1);
  EXPECT_EQ(x.db->count_unclaimable("x", new_code), 0);
  EXPECT_EQ(x.db->release_unclaimable("x", new_code), 0);
  EXPECT_EQ(x.db->release_unclaimable("x", old_code), 1);
  EXPECT_EQ(store_->get_run("patched")->owner.executor, "");
  EXPECT_TRUE(x.db->take_over("x", old_code, std::nullopt, 3000).empty())
    << "taken over by code without its patch";
  EXPECT_EQ(ids(x.db->take_over("x", new_code, std::nullopt, 3000)),
            ids_t{"patched"});
  // BLOCKED, then tried again by a newer process.
  auto run = store_->get_run("patched");
  ASSERT_TRUE(x.db->block_run(run->owner, "patched", "diverged", 1000, 2000));
  EXPECT_TRUE(x.db->claim_blocked("x", old_code, 5000, 10).empty());
  EXPECT_EQ(ids(x.db->claim_blocked("x", new_code, 5000, 10)),
            ids_t{"patched"});
}

// The same for a queue item retried after it took a patch: back in its
// queue, claimed only by a process that declares the patch.
TEST_F(lease_test, a_queue_item_that_took_a_patch_is_claimed_only_where_it_is_declared) {
  auto x = open_holder();
  x.epoch->store(x.db->acquire_lease(request("x")));
  const claim_filter old_code{.names = {"wf"}, .app_version = ""};
  const claim_filter new_code{.names = {"wf", "wf\x1e" "carrier"},
                              .app_version = ""};
  queue_definition jobs{.name = "jobs"};
  x.db->define_queue(jobs);
  auto item = make_run("item");
  item.status = run_status::enqueued;
  item.queue_name = "jobs";
  item.owner = {"", 0};
  ASSERT_TRUE(store_->enqueue(item).created);
  auto claim = [&](const claim_filter& f) {
    return x.db->claim_queued({.queue = jobs, .executor = "x", .filter = f,
                               .now_ms = 3000, .capacity = 10});
  };
  auto first = claim(old_code);
  ASSERT_EQ(first.runs.size(), 1u) << "nothing taken yet: anyone runs it";
  append_write marker;
  marker.owner = first.runs[0].owner;
  marker.entry = {.run_id = "item", .seq = -2, .kind = entry_kind::patch,
                  .name = "carrier", .payload = "0"};
  ASSERT_TRUE(x.db->write_batch({.appends = {marker}, .completions = {}})
                .appends.at(0));
  ASSERT_TRUE(
    x.db->retry_item(first.runs[0].owner, "item", 0, "attempt failed", 3000));
  EXPECT_TRUE(claim(old_code).runs.empty())
    << "a retry that took a patch was claimed by code without it";
  auto again = claim(new_code);
  ASSERT_EQ(again.runs.size(), 1u);
  EXPECT_EQ(again.runs[0].id, "item");
}

TEST_F(lease_test, a_lapsed_holder_is_fenced_and_its_epoch_never_returns) {
  if (!db_.postgres)
    GTEST_SKIP() << "SQLite: one runtime per file, nobody declares it lapsed";
  auto stale = open_holder();
  stale.epoch->store(stale.db->acquire_lease(request("x", 1)));
  ASSERT_TRUE(store_->create_run(run_of("r1", "x")).created);
  EXPECT_TRUE(stale.db
                ->write_batch({.appends = {append("r1", 0, {"x", 1})},
                               .completions = {}})
                .appends.at(0));
  // It misses its 1 ms lease; another process declares it lapsed.
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(store_->lapse_executor("x"));
  EXPECT_FALSE(store_->lapse_executor("x")) << "declared once";
  EXPECT_FALSE(stale.db
                 ->write_batch({.appends = {append("r1", 1, {"x", 1})},
                                .completions = {}})
                 .appends.at(0))
    << "a lapsed holder's write got through";
  EXPECT_FALSE(stale.db->claim_run("r1", "x", wf_, false, true))
    << "a lapsed holder claimed a run";
  EXPECT_TRUE(stale.db->take_over("x", wf_, std::nullopt, 3000).empty())
    << "a lapsed holder took runs over";
  EXPECT_FALSE(stale.db->renew_lease("x", stale.epoch->load()).has_value());
  // Another executor takes the run; x's row, owning nothing, is forgotten.
  auto taken = store_->take_over("y", wf_, std::nullopt, 3000);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].owner.executor, "y");
  EXPECT_TRUE(store_->take_over("y", wf_, std::nullopt, 3000).empty());
  test::sql_client sql{db_};
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("executors")
                       + " WHERE id = 'x'"),
            "0");
  // A new holder of x: a fresh row, but not an epoch the stale one has.
  auto next = open_holder();
  next.epoch->store(next.db->acquire_lease(request("x")));
  EXPECT_NE(next.epoch->load(), stale.epoch->load());
  ASSERT_TRUE(store_->create_run(run_of("r2", "x")).created);
  EXPECT_FALSE(stale.db
                 ->write_batch({.appends = {append("r2", 0, {"x", 1})},
                                .completions = {}})
                 .appends.at(0))
    << "the stale holder wrote under the new holder's lease";
  EXPECT_TRUE(next.db
                ->write_batch({.appends = {append("r2", 0, {"x", 1})},
                               .completions = {}})
                .appends.at(0));
}

TEST_F(lease_test, runs_a_holder_cannot_run_are_given_up) {
  auto mine = run_of("mine", "x");
  auto other = run_of("other", "x");
  other.name = "not-registered-here";
  auto foreign = run_of("foreign", "z");
  foreign.name = "not-registered-here";
  for (auto& r : {mine, other, foreign})
    ASSERT_TRUE(store_->create_run(r).created);
  EXPECT_EQ(store_->release_unclaimable("x", wf_), 1);
  auto gone = store_->get_run("other");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->owner.executor, "");
  EXPECT_EQ(gone->owner.epoch, 2) << "a copy still running is fenced";
  EXPECT_EQ(store_->get_run("mine")->owner.executor, "x");
  EXPECT_EQ(store_->get_run("foreign")->owner.executor, "z");
  EXPECT_EQ(store_->release_unclaimable("x", wf_), 0);
}

} // namespace
} // namespace perdure::test
