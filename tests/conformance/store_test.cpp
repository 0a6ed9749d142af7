// The store contract, run unchanged against SQLite and PostgreSQL.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <thread>

#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"
#include "conformance/store_fixture.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace perdure::persistence;
using perdure::test::store_test;


TEST_F(store_test, reports_its_dialect) {
  EXPECT_STREQ(store_->dialect(),
               test::store_under_test() == "postgres" ? "postgresql" : "sqlite");
}

TEST_F(store_test, migrations_are_versioned_and_idempotent) {
  // PostgreSQL skips 4 (SQLite's notices table; it has NOTIFY), SQLite 6
  // (PostgreSQL's lease epoch sequence; one runtime per file needs none).
  auto latest = 19;
  EXPECT_EQ(store_->schema_version(), latest);
  store_->migrate();
  auto other = open_store(db_.store_options());
  other->migrate();
  EXPECT_EQ(other->schema_version(), latest);
}

TEST_F(store_test, create_run_is_idempotent_by_id) {
  auto first = store_->create_run(make_run("r1"));
  EXPECT_TRUE(first.created);
  auto again = store_->create_run(make_run("r1", "{\"value\":2}"));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.run.inputs, "{\"value\":1}") << "the stored run wins";
  EXPECT_EQ(again.run.status, run_status::pending);
  EXPECT_EQ(again.run.owner, (fence{"exec-a", 1}));
}

TEST_F(store_test, get_run_returns_nothing_for_unknown_ids) {
  EXPECT_FALSE(store_->get_run("nope").has_value());
}

TEST_F(store_test, injection_like_ids_are_plain_data) {
  std::string evil = "x'); DROP TABLE runs; --\"\\";
  ASSERT_TRUE(store_->create_run(make_run(evil)).created);
  auto back = store_->get_run(evil);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->id, evil);
  auto result = store_->write_batch(
    {.appends = {append(evil, 0, {"exec-a", 1})}, .completions = {}});
  EXPECT_TRUE(result.appends.at(0));
  auto journal = store_->load_journals({evil});
  ASSERT_EQ(journal.size(), 1u);
  EXPECT_EQ(journal[0].run_id, evil);
}

TEST_F(store_test, binary_payloads_keep_every_byte) {
  std::string bytes;
  for (int i = 0; i < 256; ++i)
    bytes.push_back(static_cast<char>(i));
  bytes += std::string(3, '\0');
  ASSERT_TRUE(store_->create_run(make_run("bin", bytes)).created);
  EXPECT_EQ(store_->get_run("bin")->inputs, bytes);
  ASSERT_TRUE(store_
                ->write_batch({.appends = {append("bin", 0, {"exec-a", 1}, bytes)},
                               .completions = {}})
                .appends.at(0));
  EXPECT_EQ(store_->load_journals({"bin"}).at(0).payload, bytes);
  ASSERT_TRUE(store_
                ->write_batch({.appends = {},
                               .completions = {{.run_id = "bin",
                                                .owner = {"exec-a", 1},
                                                .status = run_status::success,
                                                .output = bytes,
                                                .error = std::nullopt,
                                                .at_ms = 3}}})
                .completions.at(0));
  EXPECT_EQ(store_->get_run("bin")->output, bytes);
}

TEST_F(store_test, a_one_megabyte_payload_round_trips) {
  std::string big(1 << 20, 'x');
  big[12345] = '\0';
  ASSERT_TRUE(store_->create_run(make_run("big", big)).created);
  EXPECT_EQ(store_->get_run("big")->inputs, big);
}

TEST_F(store_test, a_batch_creates_new_ids_and_reports_taken_ones) {
  ASSERT_TRUE(store_->create_run(make_run("old", "{\"value\":9}")).created);
  auto create = [&](std::vector<run_record> runs) {
    return store_->write_batch({.creates = std::move(runs)}).created;
  };
  auto created = create({make_run("a"), make_run("old"), make_run("b"),
                         make_run("a")});
  EXPECT_EQ(created, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(store_->get_run("old")->inputs, "{\"value\":9}")
    << "a taken id keeps its run";
  EXPECT_EQ(store_->get_run("a")->status, run_status::pending);
  EXPECT_EQ(store_->get_run("b")->owner, (fence{"exec-a", 1}));
  // Injection-like ids are data.
  auto odd = make_run("x'); DROP TABLE runs; --");
  EXPECT_EQ(create({odd}), std::vector<bool>{true});
  EXPECT_TRUE(store_->get_run(odd.id).has_value());
  EXPECT_TRUE(create({}).empty());
}

TEST_F(store_test, runs_read_together_are_those_that_exist) {
  auto odd = make_run("x'}\", \"{y");
  store_->create_run(make_run("a"));
  store_->create_run(odd);
  auto got = store_->get_runs({"a", "missing", odd.id, "a"});
  std::vector<std::string> ids;
  for (auto& r : got)
    ids.push_back(r.id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"a", odd.id}));
  for (auto& r : got)
    EXPECT_EQ(r.status, run_status::pending) << r.id;
  EXPECT_TRUE(store_->get_runs({}).empty());
}

TEST_F(store_test, journals_load_in_run_and_seq_order) {
  store_->create_run(make_run("a"));
  store_->create_run(make_run("b"));
  fence f{"exec-a", 1};
  store_->write_batch({.appends = {append("b", 1, f), append("a", 1, f),
                                   append("b", 0, f), append("a", 0, f)},
                       .completions = {}});
  auto j = store_->load_journals({"a", "b"});
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0].run_id, "a");
  EXPECT_EQ(j[0].seq, 0);
  EXPECT_EQ(j[1].seq, 1);
  EXPECT_EQ(j[2].run_id, "b");
  EXPECT_EQ(j[3].seq, 1);
  EXPECT_EQ(j[3].name, "step-1");
  EXPECT_EQ(store_->load_journals({"a"}).size(), 2u);
}

TEST_F(store_test, the_fence_rejects_stale_owners_and_keeps_the_rest_of_a_batch) {
  store_->create_run(make_run("mine"));
  store_->create_run(make_run("stolen"));
  // Recovery bumps the epoch of every PENDING run of exec-a.
  auto claimed = store_->claim_pending_runs("exec-a", wf_, 3000);
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0].owner.epoch, 2);
  EXPECT_EQ(claimed[0].recovery_attempts, 1);
  auto result = store_->write_batch(
    {.appends = {append("mine", 0, {"exec-a", 2}),
                 append("stolen", 0, {"exec-a", 1}),     // zombie epoch
                 append("stolen", 1, {"exec-b", 2})},    // wrong executor
     .completions = {}});
  EXPECT_EQ(result.appends, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(store_->load_journals({"stolen"}).size(), 0u);
  EXPECT_EQ(store_->load_journals({"mine"}).size(), 1u);
}

TEST_F(store_test, rewriting_an_index_under_the_same_fence_keeps_the_first_value) {
  store_->create_run(make_run("r"));
  fence f{"exec-a", 1};
  EXPECT_TRUE(store_->write_batch({.appends = {append("r", 0, f, "first")},
                                   .completions = {}})
                .appends.at(0));
  EXPECT_TRUE(store_->write_batch({.appends = {append("r", 0, f, "second")},
                                   .completions = {}})
                .appends.at(0));
  auto j = store_->load_journals({"r"});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].payload, "first");
}

TEST_F(store_test, completions_are_fenced_and_final) {
  store_->create_run(make_run("r"));
  completion_write c{.run_id = "r",
                     .owner = {"exec-a", 7},
                     .status = run_status::success,
                     .output = std::string{"out"},
                     .error = std::nullopt,
                     .at_ms = 5};
  EXPECT_FALSE(store_->write_batch({.appends = {}, .completions = {c}})
                 .completions.at(0));
  c.owner.epoch = 1;
  EXPECT_TRUE(store_->write_batch({.appends = {}, .completions = {c}})
                .completions.at(0));
  auto r = store_->get_run("r");
  EXPECT_EQ(r->status, run_status::success);
  EXPECT_EQ(r->output, "out");
  // Once ended, no append is accepted, even from the owner.
  EXPECT_FALSE(
    store_->write_batch({.appends = {append("r", 0, {"exec-a", 1})},
                         .completions = {}})
      .appends.at(0));
  // An ended run is not claimed by recovery.
  EXPECT_TRUE(store_->claim_pending_runs("exec-a", wf_, 3000).empty());
}

// -- passivated runs and deliveries ---------------------------------------------------

TEST_F(store_test, a_claim_counts_a_recovery_only_for_runs_due_now) {
  fence owner{"exec-a", 1};
  for (auto id : {"running", "sleeping", "due", "delivered"})
    ASSERT_TRUE(store_->create_run(make_run(id)).created);
  ASSERT_TRUE(store_->set_wake_at(owner, "sleeping", 5000));
  ASSERT_TRUE(store_->set_wake_at(owner, "due", 2000));
  ASSERT_TRUE(store_->set_wake_at(owner, "delivered",
                                  delivered_while_passivated));
  for (int restart = 1; restart <= 3; ++restart) {
    auto claimed = store_->claim_pending_runs("exec-a", wf_, 3000);
    ASSERT_EQ(claimed.size(), 4u);
    for (auto& r : claimed) {
      SCOPED_TRACE(r.id);
      EXPECT_EQ(r.owner.epoch, 1 + restart) << "every run is fenced";
      EXPECT_EQ(r.recovery_attempts, r.id == "sleeping" ? 0 : restart);
    }
  }
}

TEST_F(store_test, deliveries_mark_only_passivated_runs_for_the_sweep) {
  for (auto id : {"in-memory", "passivated", "revived"})
    ASSERT_TRUE(store_->create_run(make_run(id)).created);
  fence owner{"exec-a", 1};
  ASSERT_TRUE(store_->set_wake_at(owner, "passivated", 5000));
  ASSERT_TRUE(store_->set_wake_at(owner, "revived", 1000)); // due, in memory
  EXPECT_TRUE(store_->send_message("in-memory", "t", "x", 3000));
  EXPECT_TRUE(store_->send_message("passivated", "t", "x", 3000));
  resolution r{.id = "promise-of-revived", .run_id = "revived", .seq = -1,
               .result = outcome::value, .payload = "1", .error = {},
               .at_ms = 3000};
  EXPECT_EQ(store_->resolve(r), resolve_result::resolved);
  EXPECT_FALSE(store_->get_run("in-memory")->wake_at_ms.has_value());
  EXPECT_EQ(store_->get_run("passivated")->wake_at_ms,
            delivered_while_passivated);
  EXPECT_EQ(store_->get_run("revived")->wake_at_ms, 1000);
  EXPECT_EQ(store_->awake_runs("exec-a"), std::vector<std::string>{"passivated"});
  EXPECT_TRUE(store_->awake_runs("exec-b").empty());
  EXPECT_FALSE(store_->send_message("no-such-run", "t", "x", 3000));
  // Passivating again replaces the mark.
  ASSERT_TRUE(store_->set_wake_at(owner, "passivated", 9000));
  EXPECT_TRUE(store_->awake_runs("exec-a").empty());
}

// On both write paths (a small batch is one statement, a large one COPY).
TEST_F(store_test, a_completed_child_marks_its_passivated_parent_in_the_same_batch) {
  for (std::size_t appends : {std::size_t{0}, std::size_t{40}}) {
    SCOPED_TRACE(appends);
    auto n = std::to_string(appends);
    fence owner{"exec-a", 1};
    for (auto parent : {"waiting-" + n, "busy-" + n}) {
      ASSERT_TRUE(store_->create_run(make_run(parent)).created);
      auto child = make_run(parent + ".0");
      child.parent_id = parent;
      ASSERT_TRUE(store_->create_run(child).created);
    }
    ASSERT_TRUE(store_->set_wake_at(owner, "waiting-" + n,
                                    std::numeric_limits<std::int64_t>::max()));
    write_batch batch;
    for (std::size_t i = 0; i < appends; ++i)
      batch.appends.push_back(append("busy-" + n, static_cast<int>(i), owner));
    for (auto child : {"waiting-" + n + ".0", "busy-" + n + ".0"})
      batch.completions.push_back({.run_id = child,
                                   .owner = owner,
                                   .status = run_status::success,
                                   .output = std::string{"1"},
                                   .error = std::nullopt,
                                   .at_ms = 3000});
    auto result = store_->write_batch(batch);
    EXPECT_EQ(result.completions, (std::vector<bool>{true, true}));
    EXPECT_EQ(store_->get_run("waiting-" + n)->wake_at_ms,
              delivered_while_passivated);
    EXPECT_FALSE(store_->get_run("busy-" + n)->wake_at_ms.has_value())
      << "a parent in memory was marked";
    EXPECT_EQ(store_->awake_runs("exec-a"),
              std::vector<std::string>{"waiting-" + n});
    ASSERT_TRUE(store_->set_wake_at(owner, "waiting-" + n, std::nullopt));
  }
}

TEST_F(store_test, cancelling_a_child_marks_its_passivated_parent) {
  fence owner{"exec-a", 1};
  ASSERT_TRUE(store_->create_run(make_run("parent")).created);
  auto child = make_run("parent.0");
  child.parent_id = "parent";
  ASSERT_TRUE(store_->create_run(child).created);
  auto grandchild = make_run("parent.0.0");
  grandchild.parent_id = "parent.0";
  ASSERT_TRUE(store_->create_run(grandchild).created);
  ASSERT_TRUE(store_->set_wake_at(owner, "parent",
                                  std::numeric_limits<std::int64_t>::max()));
  std::vector<std::string> ids;
  for (auto& c : store_->cancel_run("parent.0", 3000)) {
    EXPECT_FALSE(c.signalled) << c.id;
    ids.push_back(c.id);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{"parent.0", "parent.0.0"}));
  EXPECT_EQ(store_->get_run("parent")->status, run_status::pending);
  EXPECT_EQ(store_->get_run("parent")->wake_at_ms, delivered_while_passivated);
  EXPECT_EQ(store_->awake_runs("exec-a"), std::vector<std::string>{"parent"});
  // Cancelling again changes nothing.
  ASSERT_TRUE(store_->set_wake_at(owner, "parent", 9000));
  EXPECT_TRUE(store_->cancel_run("parent.0", 4000).empty());
  EXPECT_EQ(store_->get_run("parent")->wake_at_ms, 9000);
}

// Store-wide gauges: computed by whoever comes first once the interval
// passed (one process at a time), read by everyone meanwhile.
TEST_F(store_test, store_gauges_are_computed_once_an_interval) {
  auto a = make_run("g1");
  a.app_version = "v1";
  ASSERT_TRUE(store_->create_run(a).created);
  auto b = make_run("g2");
  b.app_version = "v1";
  b.created_at_ms = 500;
  ASSERT_TRUE(store_->create_run(b).created);
  auto done = make_run("g3");
  done.status = run_status::success;
  ASSERT_TRUE(store_->create_run(done).created);
  auto first = store_->refresh_store_gauges(100'000, 15'000, "exec-a");
  EXPECT_EQ(first.computed_by, "exec-a");
  EXPECT_EQ(first.computed_at_ms, 100'000);
  std::map<std::string, std::int64_t> seen;
  for (auto& g : first.readings)
    seen[g.gauge + "|" + g.label_a + "|" + g.label_b] = g.value;
  EXPECT_EQ(seen, (std::map<std::string, std::int64_t>{
                    {"runs|PENDING|v1", 2},
                    {"runs|SUCCESS|", 1},
                    {"oldest_pending_ms||", 500},
                    {"passivated||", 0}}));
  // Within the interval another process reads what the first computed.
  ASSERT_TRUE(store_->create_run(make_run("g4")).created);
  auto other = open_store(db_.store_options());
  auto second = other->refresh_store_gauges(110'000, 15'000, "exec-b");
  EXPECT_EQ(second.computed_by, "exec-a");
  EXPECT_EQ(second.readings.size(), first.readings.size());
  // Past it, the next caller computes them again. (A run created at 1000
  // and PENDING, not asleep: the oldest waiting.)
  auto third = other->refresh_store_gauges(115'001, 15'000, "exec-b");
  EXPECT_EQ(third.computed_by, "exec-b");
  std::int64_t pending = 0;
  for (auto& g : third.readings)
    if (g.gauge == "runs" && g.label_a == "PENDING")
      pending += g.value;
  EXPECT_EQ(pending, 3);
}

// An operator's bulk cancel: many runs in one transaction, their trees as
// cancel_run does them, a saga signalled, what ended or is unknown skipped.
TEST_F(store_test, cancelling_in_bulk_is_cancel_run_of_each) {
  fence owner{"exec-a", 1};
  ASSERT_TRUE(store_->create_run(make_run("b1")).created);
  auto child = make_run("b1.0");
  child.parent_id = "b1";
  ASSERT_TRUE(store_->create_run(child).created);
  ASSERT_TRUE(store_->create_run(make_run("b2")).created);
  auto ended = make_run("b3");
  ended.status = run_status::success;
  ASSERT_TRUE(store_->create_run(ended).created);
  ASSERT_TRUE(store_->create_run(make_run("saga")).created);
  ASSERT_TRUE(store_->record_phase(owner,
                                   {.run_id = "saga", .seq = 0,
                                    .kind = entry_kind::phase, .name = "saga"},
                                   saga_phase::forward));
  auto got = store_->cancel_runs({"b1", "b2", "b3", "nobody", "saga"}, 3000);
  std::map<std::string, bool> by_id;
  for (auto& c : got)
    by_id[c.id] = c.signalled;
  EXPECT_EQ(by_id, (std::map<std::string, bool>{{"b1", false},
                                                {"b1.0", false},
                                                {"b2", false},
                                                {"saga", true}}));
  for (auto* id : {"b1", "b1.0", "b2"})
    EXPECT_EQ(store_->get_run(id)->status, run_status::cancelled) << id;
  EXPECT_EQ(store_->get_run("b3")->status, run_status::success);
  EXPECT_EQ(store_->get_run("saga")->status, run_status::pending);
  EXPECT_TRUE(store_->get_run("saga")->cancel_requested);
  EXPECT_TRUE(store_->cancel_runs({"b1", "b2"}, 4000).empty())
    << "cancelling again changes nothing";
}

// A BLOCKED run (its code no longer replays it) is cancelled, and so is a
// BLOCKED child of a run cancelled.
TEST_F(store_test, cancelling_reaches_blocked_runs_and_blocked_children) {
  fence owner{"exec-a", 1};
  ASSERT_TRUE(store_->create_run(make_run("top")).created);
  auto child = make_run("top.0");
  child.parent_id = "top";
  ASSERT_TRUE(store_->create_run(child).created);
  ASSERT_TRUE(store_->block_run(owner, "top.0", "diverged", 1000, 2000));
  EXPECT_FALSE(store_->block_run(owner, "top.0", "again", 1000, 2000))
    << "fenced: its epoch moved on";
  auto blocked = store_->get_run("top.0");
  EXPECT_EQ(blocked->status, run_status::blocked);
  EXPECT_EQ(blocked->error.value_or(""), "diverged");
  store_->cancel_run("top", 3000);
  EXPECT_EQ(store_->get_run("top")->status, run_status::cancelled);
  EXPECT_EQ(store_->get_run("top.0")->status, run_status::cancelled)
    << "the BLOCKED child is cancelled with its parent";
}

// A review found this: resuming a BLOCKED saga that was asked to cancel
// cleared the request (it went forward, its cancel lost).
TEST_F(store_test, resuming_a_blocked_saga_keeps_its_cancel_request) {
  fence owner{"exec-a", 1};
  ASSERT_TRUE(store_->create_run(make_run("saga")).created);
  ASSERT_TRUE(store_->record_phase(owner,
                                   {.run_id = "saga", .seq = 0,
                                    .kind = entry_kind::phase, .name = "saga"},
                                   saga_phase::forward));
  ASSERT_TRUE(store_->block_run(owner, "saga", "diverged", 1000, 2000));
  auto signalled = store_->cancel_run("saga", 3000);
  ASSERT_EQ(signalled.size(), 1u);
  EXPECT_TRUE(signalled[0].signalled);
  EXPECT_EQ(store_->get_run("saga")->status, run_status::blocked);
  auto out = store_->resume_run("saga", std::nullopt, 4000, "test");
  EXPECT_TRUE(out.resumed);
  auto run = store_->get_run("saga");
  EXPECT_EQ(run->status, run_status::pending);
  EXPECT_TRUE(run->cancel_requested) << "it compensates once it runs";
  EXPECT_EQ(store_->load_journals({"saga"}).size(), 1u) << "nothing failed";
}

TEST_F(store_test, cancelling_signals_a_saga_going_forward_and_leaves_a_compensating_one) {
  fence owner{"exec-a", 1};
  auto enter = [&](const std::string& run, std::int32_t seq, const char* phase) {
    journal_entry cp{.run_id = run, .seq = seq, .kind = entry_kind::phase,
                     .name = "saga"};
    auto e = store_->record_phase(owner, cp, phase);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->payload, phase);
  };
  ASSERT_TRUE(store_->create_run(make_run("forward")).created);
  // An ordinary child (what a task step in flight waits for) is left: the
  // step finishes, and is compensated like any completed one.
  auto child = make_run("forward.0");
  child.parent_id = "forward";
  ASSERT_TRUE(store_->create_run(child).created);
  enter("forward", 0, saga_phase::forward);
  ASSERT_TRUE(store_->set_wake_at(owner, "forward", 9000)); // passivated
  auto runs = store_->cancel_run("forward", 3000);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, "forward");
  EXPECT_TRUE(runs[0].signalled);
  auto saga = store_->get_run("forward");
  EXPECT_EQ(saga->status, run_status::pending) << "a saga is signalled";
  EXPECT_TRUE(saga->cancel_requested);
  EXPECT_EQ(saga->saga_phase, saga_phase::forward);
  EXPECT_EQ(saga->wake_at_ms, delivered_while_passivated)
    << "a passivated saga is due at once, to observe it";
  EXPECT_EQ(store_->get_run("forward.0")->status, run_status::pending);

  // A saga whose body returned (DONE) keeps its effects: signalled too,
  // never ended CANCELLED by the store (its run ends as its code does).
  ASSERT_TRUE(store_->create_run(make_run("done")).created);
  enter("done", 0, saga_phase::forward);
  enter("done", 1, saga_phase::done);
  runs = store_->cancel_run("done", 3000);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_TRUE(runs[0].signalled);
  auto done = store_->get_run("done");
  EXPECT_EQ(done->status, run_status::pending);
  EXPECT_TRUE(done->cancel_requested);
  auto signalled = store_->signalled_sagas("exec-a");
  EXPECT_NE(std::find(signalled.begin(), signalled.end(), "done"),
            signalled.end())
    << "the sweep signals it again";
  ASSERT_TRUE(store_->set_wake_at(owner, "done", 9000));
  EXPECT_EQ(store_->get_run("done")->wake_at_ms, delivered_while_passivated)
    << "a passivation cannot hide the request: due at once";

  ASSERT_TRUE(store_->create_run(make_run("undoing")).created);
  enter("undoing", 0, saga_phase::forward);
  enter("undoing", 1, saga_phase::compensating);
  EXPECT_TRUE(store_->cancel_run("undoing", 3000).empty());
  auto undoing = store_->get_run("undoing");
  EXPECT_EQ(undoing->status, run_status::pending);
  EXPECT_FALSE(undoing->cancel_requested);
  auto page = store_->list_runs({.status = run_status::compensating});
  ASSERT_EQ(page.runs.size(), 1u);
  EXPECT_EQ(page.runs[0].id, "undoing");
  EXPECT_FALSE(store_->record_phase({"exec-a", 9},
                                    {.run_id = "undoing", .seq = 2,
                                     .kind = entry_kind::phase,
                                     .name = "saga"},
                                    saga_phase::done))
    << "fenced";
}

TEST_F(store_test, a_delivery_commits_with_its_checkpoint_once_and_fenced) {
  fence owner{"exec-a", 1};
  ASSERT_TRUE(store_->create_run(make_run("sender")).created);
  ASSERT_TRUE(store_->create_run(make_run("receiver")).created);
  auto checkpoint = [](int seq) {
    journal_entry e;
    e.run_id = "sender";
    e.seq = seq;
    e.kind = entry_kind::send;
    e.name = "t";
    e.created_at_ms = 2000;
    return e;
  };
  delivery to_receiver{outgoing_message{"receiver", "t", "1", 2000},
                       "workflow run 'receiver'"};
  auto sent = store_->deliver(owner, checkpoint(0), to_receiver);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->outcome, outcome::value);
  // The same index again (a retried in-doubt commit): recorded, not resent.
  sent = store_->deliver(owner, checkpoint(0), to_receiver);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->outcome, outcome::value);
  EXPECT_TRUE(store_->next_message("receiver", "t", 0));
  EXPECT_FALSE(store_->next_message("receiver", "t",
                                    store_->next_message("receiver", "t", 0)->id))
    << "sent twice";
  // A zombie owner delivers nothing.
  EXPECT_FALSE(store_->deliver({"exec-a", 0}, checkpoint(1), to_receiver));
  EXPECT_TRUE(store_->load_journals({"sender"}).size() == 1);
  // Deliveries that cannot happen are recorded as terminal errors.
  auto lost = store_->deliver(owner, checkpoint(1),
                              {outgoing_message{"nobody", "t", "1", 2000},
                               "workflow run 'nobody'"});
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->outcome, outcome::terminal);
  EXPECT_EQ(lost->error, "no workflow run 'nobody'");
  resolution promise{.id = "prm-r", .run_id = "receiver", .seq = -1,
                     .result = outcome::value, .payload = "1", .error = {},
                     .at_ms = 2000};
  auto first = store_->deliver(owner, checkpoint(2), {promise, "promise 'p'"});
  auto second = store_->deliver(owner, checkpoint(3), {promise, "promise 'p'"});
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->outcome, outcome::value);
  EXPECT_EQ(second->outcome, outcome::terminal);
  EXPECT_EQ(second->error, "promise 'p' was already resolved or rejected");
  auto journal = store_->load_journals({"sender"});
  ASSERT_EQ(journal.size(), 4u);
  EXPECT_EQ(journal[1].error, "no workflow run 'nobody'");
  EXPECT_EQ(journal[3].outcome, outcome::terminal);
}

TEST_F(store_test, a_transaction_commits_user_rows_and_checkpoint_together) {
  test::sql_client sql{db_};
  create_accounts(sql);
  store_->create_run(make_run("t"));
  journal_entry cp;
  cp.run_id = "t";
  cp.seq = 0;
  cp.kind = entry_kind::transaction;
  cp.name = "open";
  auto outcome = store_->run_transaction({"exec-a", 1}, cp, [&](sql_session& s) {
    auto r = s.exec_params("INSERT INTO " + sql.table("accounts")
                             + " (id, balance) VALUES ($1, $2)",
                           "alice", 100);
    EXPECT_EQ(r.affected, 1);
    auto rows = s.exec_params("SELECT balance FROM " + sql.table("accounts")
                                + " WHERE id = $1",
                              "alice");
    EXPECT_EQ(rows.rows.at(0).at(0), "100");
    return std::string{"opened"};
  });
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->payload, "opened");
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("accounts")), "1");
  auto j = store_->load_journals({"t"});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].kind, entry_kind::transaction);
  EXPECT_EQ(j[0].payload, "opened");
}

TEST_F(store_test, a_failing_transaction_leaves_neither_rows_nor_checkpoint) {
  test::sql_client sql{db_};
  create_accounts(sql);
  store_->create_run(make_run("t"));
  journal_entry cp{.run_id = "t", .seq = 0, .kind = entry_kind::transaction,
                   .name = "open"};
  EXPECT_ANY_THROW(store_->run_transaction({"exec-a", 1}, cp, [&](sql_session& s) {
    s.exec_params("INSERT INTO " + sql.table("accounts")
                    + " (id, balance) VALUES ($1, $2)",
                  "alice", 100);
    throw std::runtime_error("user code fails after writing");
    return std::string{};
  }));
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("accounts")), "0");
  EXPECT_TRUE(store_->load_journals({"t"}).empty());
}

TEST_F(store_test, a_fenced_transaction_rolls_back_the_user_rows) {
  test::sql_client sql{db_};
  create_accounts(sql);
  store_->create_run(make_run("t"));
  journal_entry cp{.run_id = "t", .seq = 0, .kind = entry_kind::transaction,
                   .name = "open"};
  bool body_ran = false;
  auto outcome = store_->run_transaction({"exec-a", 99}, cp, [&](sql_session& s) {
    body_ran = true;
    s.exec_params("INSERT INTO " + sql.table("accounts")
                    + " (id, balance) VALUES ($1, $2)",
                  "alice", 100);
    return std::string{};
  });
  EXPECT_FALSE(outcome.has_value()) << "fenced";
  EXPECT_FALSE(body_ran) << "a zombie must not even run the user's SQL";
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("accounts")), "0");
}

TEST_F(store_test, user_sql_binds_injection_like_values_as_data) {
  test::sql_client sql{db_};
  sql.exec("CREATE TABLE " + sql.table("notes") + " (body TEXT)");
  store_->create_run(make_run("t"));
  std::string evil = "'); DROP TABLE notes; --";
  journal_entry cp{.run_id = "t", .seq = 0, .kind = entry_kind::transaction,
                   .name = "note"};
  store_->run_transaction({"exec-a", 1}, cp, [&](sql_session& s) {
    s.exec_params("INSERT INTO " + sql.table("notes") + " (body) VALUES ($1)",
                  evil);
    return std::string{};
  });
  EXPECT_EQ(sql.scalar("SELECT body FROM " + sql.table("notes")), evil);
}

TEST_F(store_test, bad_urls_are_clear_errors) {
  try {
    open_store({.url = "mysql://x"});
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::invalid_argument);
  }
}

TEST_F(store_test, transient_failures_are_retried_inside_the_store) {
  test::sql_client sql{db_};
  if (db_.postgres) {
    // Lose the connection (as on a server restart): the next calls reconnect.
    auto opts = db_.store_options();
    auto app = "victim_" + db_.schema;
    opts.url += (opts.url.find('?') == std::string::npos ? "?" : "&")
                + std::string{"application_name="} + app;
    auto victim = open_store(opts);
    ASSERT_TRUE(victim->create_run(make_run("before")).created);
    auto killed = sql.exec("SELECT pg_terminate_backend(pid) FROM "
                           "pg_stat_activity WHERE application_name = $1",
                           {app});
    ASSERT_EQ(killed.rows.size(), 1u);
    EXPECT_TRUE(victim->get_run("before").has_value());
    EXPECT_TRUE(victim->create_run(make_run("after")).created);
    EXPECT_TRUE(victim
                  ->write_batch({.appends = {append("after", 0, {"exec-a", 1})},
                                 .completions = {}})
                  .appends.at(0));
  } else {
    // Another connection holds the write lock for a while: writers wait.
    sql.exec("BEGIN IMMEDIATE");
    std::thread releaser{[&] {
      std::this_thread::sleep_for(std::chrono::milliseconds{300});
      sql.exec("COMMIT");
    }};
    EXPECT_TRUE(store_->create_run(make_run("waited")).created);
    releaser.join();
  }
}

TEST_F(store_test, a_large_batch_keeps_every_byte_and_can_be_sent_again) {
  // Large batches take another path on PostgreSQL (COPY); same contract.
  std::string bytes;
  for (int i = 0; i < 256; ++i)
    bytes.push_back(static_cast<char>(i));
  write_batch batch;
  for (int r = 0; r < 50; ++r) {
    auto id = "big-" + std::to_string(r);
    store_->create_run(make_run(id));
    auto w = append(id, 0, {"exec-a", 1}, bytes + std::to_string(r));
    w.entry.error = "tab\there, newline\nthere, back\\slash";
    batch.appends.push_back(w);
  }
  batch.appends.push_back(append("no-such-run", 0, {"exec-a", 1}));
  auto first = store_->write_batch(batch);
  EXPECT_EQ(std::count(first.appends.begin(), first.appends.end(), true), 50);
  EXPECT_FALSE(first.appends.back());
  // Sent again (as after an in-doubt commit), with other payloads.
  for (auto& w : batch.appends)
    w.entry.payload = "second";
  auto again = store_->write_batch(batch);
  EXPECT_EQ(again.appends, first.appends);
  for (int r = 0; r < 50; ++r) {
    auto j = store_->load_journals({"big-" + std::to_string(r)});
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0].payload, bytes + std::to_string(r));
    EXPECT_EQ(j[0].error, "tab\there, newline\nthere, back\\slash");
  }
}
