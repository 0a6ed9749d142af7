// One behaviour per question, on both stores: what an index that holds an
// outcome already means, that a batch is one transaction, re-sent
// completions, fenced child creation, claims, and rows Perdure cannot have
// written.

#include <gtest/gtest.h>

#include "conformance/store_fixture.hpp"
#include "perdure/error.hpp"

using namespace perdure;
using namespace perdure::persistence;
using perdure::test::store_test;

namespace {

bool postgres() {
  return test::store_under_test() == "postgres";
}

/// Makes every journal insert named 'boom' fail, as a refusing database
/// would.
void refuse_booms(test::sql_client& sql) {
  if (postgres()) {
    sql.exec("CREATE FUNCTION " + sql.table("boom")
             + "() RETURNS trigger AS $$ BEGIN IF NEW.name = 'boom' THEN "
               "RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$ LANGUAGE "
               "plpgsql");
    sql.exec("CREATE TRIGGER boom BEFORE INSERT ON " + sql.table("journal")
             + " FOR EACH ROW EXECUTE FUNCTION " + sql.table("boom") + "()");
  } else {
    sql.exec("CREATE TRIGGER boom BEFORE INSERT ON journal WHEN NEW.name = "
             "'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END");
  }
}

} // namespace

TEST_F(store_test, an_append_to_an_index_holding_an_outcome_reports_that_outcome) {
  store_->create_run(make_run("r"));
  fence f{"exec-a", 1};
  auto first = store_->write_batch({.appends = {append("r", 0, f, "first")}});
  EXPECT_TRUE(first.appends.at(0));
  EXPECT_TRUE(first.recorded.empty() || !first.recorded.at(0));
  auto again = store_->write_batch({.appends = {append("r", 0, f, "second")}});
  EXPECT_TRUE(again.appends.at(0));
  ASSERT_EQ(again.recorded.size(), 1u);
  ASSERT_TRUE(again.recorded[0]);
  EXPECT_EQ(again.recorded[0]->payload, "first");
  EXPECT_EQ(store_->load_journals({"r"}).at(0).payload, "first");
}

TEST_F(store_test, a_large_batch_reports_an_index_holding_an_outcome_too) {
  // 40 appends: PostgreSQL's COPY path, which falls back on a conflict.
  store_->create_run(make_run("r"));
  fence f{"exec-a", 1};
  store_->write_batch({.appends = {append("r", 7, f, "first")}});
  write_batch batch;
  for (int i = 0; i < 40; ++i)
    batch.appends.push_back(append("r", i, f, "v" + std::to_string(i)));
  auto result = store_->write_batch(batch);
  ASSERT_EQ(result.recorded.size(), 40u);
  ASSERT_TRUE(result.recorded[7]);
  EXPECT_EQ(result.recorded[7]->payload, "first");
  EXPECT_EQ(store_->load_journals({"r"}).size(), 40u);
}

TEST_F(store_test, a_batch_commits_its_creations_with_its_other_writes_or_none) {
  test::sql_client sql{db_};
  refuse_booms(sql);
  store_->create_run(make_run("r"));
  for (int appends : {1, 40}) { // one statement; COPY on PostgreSQL
    auto id = "new-" + std::to_string(appends);
    write_batch batch;
    batch.creates.push_back(make_run(id));
    for (int i = 0; i < appends; ++i) {
      auto w = append("r", 100 * appends + i, {"exec-a", 1});
      if (i == appends - 1)
        w.entry.name = "boom";
      batch.appends.push_back(std::move(w));
    }
    EXPECT_ANY_THROW(store_->write_batch(batch));
    EXPECT_FALSE(store_->get_run(id))
      << "a run created by a batch that failed (" << appends << " appends)";
  }
  auto ok = store_->write_batch({.creates = {make_run("fine")},
                                 .appends = {append("r", 0, {"exec-a", 1})}});
  EXPECT_EQ(ok.created, std::vector<bool>{true});
  EXPECT_TRUE(store_->get_run("fine"));
}

TEST_F(store_test, a_batch_reports_its_creations_as_stored_when_its_call_ends_fail) {
  // PostgreSQL commits a batch's object call ends apart from its other
  // writes (review B2): ends the database refuses must not make the
  // creations committed before them read as failed.
  store_->create_run(make_run("r"));
  invocation_commit end;
  end.object_type = "counter";
  end.object_key = "k";
  end.completion.run_id = "a-call";
  end.completion.owner = {"exec-a", 1};
  end.completion.status = run_status::error;
  end.completion.error = std::string{"nul\0inside", 10}; // PostgreSQL refuses
  batch_result result;
  try {
    result = store_->write_batch({.creates = {make_run("new")},
                                  .appends = {append("r", 0, {"exec-a", 1})},
                                  .invocations = {end}});
  } catch (const std::exception& ex) {
    ADD_FAILURE() << "the batch failed whole (" << ex.what()
                  << ") though its creation is stored: "
                  << store_->get_run("new").has_value();
    return;
  }
  ASSERT_EQ(result.created.size(), 1u);
  EXPECT_TRUE(result.created[0]);
  EXPECT_TRUE(store_->get_run("new"));
  ASSERT_EQ(result.appends.size(), 1u);
  EXPECT_TRUE(result.appends[0]);
  EXPECT_EQ(store_->load_journals({"r"}).size(), 1u);
  ASSERT_EQ(result.invocations.size(), 1u);
  EXPECT_FALSE(result.invocations[0]);
  if (postgres()) {
    EXPECT_EQ(result.invocations_failed, errc::store_error);
  }
}

TEST_F(store_test, a_resent_completion_is_accepted_and_another_status_is_not) {
  store_->create_run(make_run("r"));
  completion_write c{.run_id = "r",
                     .owner = {"exec-a", 1},
                     .status = run_status::success,
                     .output = std::string{"out"},
                     .error = std::nullopt,
                     .at_ms = 5};
  EXPECT_TRUE(store_->write_batch({.completions = {c}}).completions.at(0));
  EXPECT_TRUE(store_->write_batch({.completions = {c}}).completions.at(0))
    << "the same completion again (its commit was in doubt)";
  c.status = run_status::error;
  EXPECT_FALSE(store_->write_batch({.completions = {c}}).completions.at(0));
  EXPECT_EQ(store_->get_run("r")->status, run_status::success);
}

TEST_F(store_test, a_transaction_at_an_index_holding_an_outcome_does_not_run) {
  test::sql_client sql{db_};
  create_accounts(sql);
  store_->create_run(make_run("t"));
  journal_entry cp{.run_id = "t", .seq = 0, .kind = entry_kind::transaction,
                   .name = "open"};
  int ran = 0;
  auto body = [&](sql_session& s) {
    ++ran;
    s.exec_params("INSERT INTO " + sql.table("accounts")
                    + " (id, balance) VALUES ($1, $2)",
                  "alice" + std::to_string(ran), 1);
    return "attempt " + std::to_string(ran);
  };
  auto first = store_->run_transaction({"exec-a", 1}, cp, body);
  auto second = store_->run_transaction({"exec-a", 1}, cp, body);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(second->payload, "attempt 1") << "the recorded outcome stands";
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(sql.scalar("SELECT COUNT(*) FROM " + sql.table("accounts")), "1");
  // A failure recorded there (by the writer, say) stands just the same.
  store_->create_run(make_run("u"));
  auto failed = append("u", 0, {"exec-a", 1});
  failed.entry.kind = entry_kind::transaction;
  failed.entry.outcome = outcome::failed;
  failed.entry.error = "gave up";
  store_->write_batch({.appends = {failed}});
  cp.run_id = "u";
  auto recorded = store_->run_transaction({"exec-a", 1}, cp, body);
  ASSERT_TRUE(recorded);
  EXPECT_EQ(recorded->outcome, outcome::failed);
  EXPECT_EQ(recorded->error, "gave up");
  EXPECT_EQ(ran, 1);
}

TEST_F(store_test, an_event_is_journaled_with_its_value_once) {
  store_->create_run(make_run("r"));
  journal_entry cp{.run_id = "r", .seq = 0, .kind = entry_kind::event,
                   .name = "status"};
  auto first = store_->record_event({"exec-a", 1}, cp, "status", "shipped");
  ASSERT_TRUE(first);
  EXPECT_EQ(store_->load_journals({"r"}).at(0).payload, "shipped");
  auto again = store_->record_event({"exec-a", 1}, cp, "status", "lost");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->payload, "shipped") << "the first record stands";
  EXPECT_EQ(store_->get_event("r", "status"), "shipped");
  EXPECT_FALSE(store_->record_event({"exec-a", 9}, cp, "status", "x"))
    << "fenced";
}

TEST_F(store_test, a_child_is_not_created_under_a_stale_parent_fence) {
  store_->create_run(make_run("parent"));
  auto child = make_run("parent.1");
  child.parent_id = "parent";
  EXPECT_FALSE(store_->create_child({"exec-a", 2}, child));
  EXPECT_FALSE(store_->get_run("parent.1")) << "created outside the fence";
  auto created = store_->create_child({"exec-a", 1}, child);
  ASSERT_TRUE(created);
  EXPECT_TRUE(created->created);
  auto again = store_->create_child({"exec-a", 1}, child);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->run.parent_id, "parent");
}

TEST_F(store_test, claiming_a_run_fences_other_copies_and_wakes_it) {
  store_->create_run(make_run("r"));
  ASSERT_TRUE(store_->set_wake_at({"exec-a", 1}, "r", 5000));
  EXPECT_FALSE(store_->claim_run("r", "exec-b", wf_, true, true)) << "not its run";
  auto claimed = store_->claim_run("r", "exec-a", wf_, true, true);
  ASSERT_TRUE(claimed);
  EXPECT_EQ(claimed->owner.epoch, 2);
  EXPECT_EQ(claimed->recovery_attempts, 1);
  EXPECT_FALSE(claimed->wake_at_ms) << "claimed into memory";
  EXPECT_FALSE(store_->write_batch({.appends = {append("r", 0, {"exec-a", 1})}})
                 .appends.at(0))
    << "the copy at the old epoch is fenced";
  EXPECT_EQ(store_->claim_run("r", "exec-a", wf_, false, true)->recovery_attempts, 1);
  store_->cancel_run("r", 10);
  EXPECT_FALSE(store_->claim_run("r", "exec-a", wf_, false, true)) << "ended";
}

TEST_F(store_test, waking_a_run_into_memory_keeps_its_epoch) {
  // A passivated run woken has no other copy: the claim keeps the epoch, so
  // a copy this process brings in meanwhile at that epoch is not fenced.
  store_->create_run(make_run("r"));
  ASSERT_TRUE(store_->set_wake_at({"exec-a", 1}, "r", 5000));
  auto woken = store_->claim_run("r", "exec-a", wf_, false, false);
  ASSERT_TRUE(woken);
  EXPECT_EQ(woken->owner.epoch, 1);
  EXPECT_FALSE(woken->wake_at_ms) << "claimed into memory";
  EXPECT_TRUE(store_->write_batch({.appends = {append("r", 0, {"exec-a", 1})}})
                .appends.at(0))
    << "the copy at its epoch still writes";
  EXPECT_FALSE(store_->claim_run("r", "exec-b", wf_, false, false))
    << "not its run";
}

TEST_F(store_test, a_wake_claims_only_a_passivated_run) {
  // A run of ours in memory, or whose actor went without passivating (it
  // crashed, a body of it may still be in flight), is no wake's to claim
  // at its epoch: the body's checkpoint would commit, and the woken copy
  // run the step again. It comes back at a new epoch, as an orphan.
  store_->create_run(make_run("r"));
  EXPECT_FALSE(store_->claim_run("r", "exec-a", wf_, false, false))
    << "claimed at its epoch without having passivated";
  ASSERT_TRUE(store_->set_wake_at({"exec-a", 1}, "r", 5000));
  ASSERT_TRUE(store_->set_wake_at({"exec-a", 1}, "r", std::nullopt));
  EXPECT_FALSE(store_->claim_run("r", "exec-a", wf_, false, false))
    << "claimed at its epoch after it stayed awake";
  auto orphan = store_->claim_run("r", "exec-a", wf_, false, true);
  ASSERT_TRUE(orphan);
  EXPECT_EQ(orphan->owner.epoch, 2);
}

TEST_F(store_test, a_row_perdure_cannot_have_written_comes_back_unreadable) {
  store_->create_run(make_run("r"));
  store_->write_batch({.appends = {append("r", 0, {"exec-a", 1})}});
  test::sql_client sql{db_};
  auto insert = "INSERT INTO " + sql.table("journal")
                + " (run_id, seq, kind, name, outcome, payload, error, "
                  "created_at) VALUES ('r', $1, $2, 'x', $3, NULL, NULL, 0)";
  sql.exec(insert, {std::int64_t{1}, std::string{"bogus"}, std::int64_t{0}});
  sql.exec(insert, {std::int64_t{2}, std::string{"step"}, std::int64_t{77}});
  sql.exec(insert, {std::int64_t{3}, std::string{"sleep"}, std::int64_t{0}});
  sql.exec(insert, {std::int64_t{4}, std::string{"await"}, std::int64_t{0}});
  auto j = store_->load_journals({"r"});
  ASSERT_EQ(j.size(), 5u);
  EXPECT_EQ(j[0].outcome, outcome::value);
  const char* why[] = {"unknown kind 'bogus'", "unknown outcome 77",
                       "malformed wake-up time", "malformed wait outcome"};
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(j[i].outcome, outcome::unreadable) << i;
    EXPECT_NE(j[i].error.find("journal row (run 'r', seq " + std::to_string(i)
                              + ")"),
              std::string::npos)
      << j[i].error;
    EXPECT_NE(j[i].error.find(why[i - 1]), std::string::npos) << j[i].error;
  }
}

TEST_F(store_test, a_batch_holding_two_copies_of_a_run_accepts_the_current_one) {
  // An actor replaced in memory by a newer claim may still have a write in
  // the same batch as its successor: the fence tells them apart by epoch,
  // in one statement and in PostgreSQL's COPY path alike.
  store_->create_run(make_run("r"));
  ASSERT_TRUE(store_->claim_run("r", "exec-a", wf_, false, true)); // now at epoch 2
  for (int appends : {1, 20}) { // 2 and 40 appends in all
    write_batch batch;
    for (int i = 0; i < appends; ++i) {
      auto seq = 100 * appends + 2 * i;
      batch.appends.push_back(append("r", seq, {"exec-a", 1}, "stale"));
      batch.appends.push_back(append("r", seq + 1, {"exec-a", 2}, "current"));
    }
    auto result = store_->write_batch(batch);
    for (std::size_t i = 0; i < batch.appends.size(); ++i)
      EXPECT_EQ(result.appends[i], i % 2 == 1) << appends << " / " << i;
  }
  for (auto& e : store_->load_journals({"r"}))
    EXPECT_EQ(e.payload, "current") << "seq " << e.seq;
  EXPECT_EQ(store_->load_journals({"r"}).size(), 21u);
}

TEST_F(store_test, a_call_never_overtakes_an_older_one_of_its_key_in_its_batch) {
  // One batch can hold a call stored ENQUEUED (its key was not held here
  // when it was made), or one for another holder, and a later call to hand
  // to the key's actor (PENDING under the key's epoch): the later one
  // follows the older through the inbox, as it would across batches.
  auto call = [&](std::string id, std::string key, run_status status,
                  fence owner) {
    auto r = make_run(std::move(id));
    r.name = "add";
    r.object_type = "counter";
    r.object_key = std::move(key);
    r.status = status;
    r.owner = std::move(owner);
    return r;
  };
  fence holder{"exec-a", 7};
  auto result = store_->write_batch(
    {.creates = {call("a1", "a", run_status::enqueued, {}),
                 call("a2", "a", run_status::pending, holder),
                 call("b1", "b", run_status::pending, {"exec-b", 3}),
                 call("b2", "b", run_status::pending, holder),
                 call("c1", "c", run_status::pending, holder),
                 call("c2", "c", run_status::pending, holder)}});
  ASSERT_EQ(result.enqueued.size(), 6u);
  EXPECT_TRUE(result.enqueued[1]) << "overtook an older ENQUEUED call";
  EXPECT_TRUE(result.enqueued[3]) << "overtook a call for another holder";
  EXPECT_FALSE(result.enqueued[4]);
  EXPECT_FALSE(result.enqueued[5]) << "a holder's calls in order go to it";
  EXPECT_EQ(store_->get_run("a2")->status, run_status::enqueued);
  EXPECT_EQ(store_->get_run("c2")->status, run_status::pending);
  for (std::size_t i = 0; i < 6; i += 2)
    EXPECT_LT(result.inbox_seqs[i], result.inbox_seqs[i + 1])
      << "inbox places follow the batch's order";
}
