// Fork: a new run from another's journal up to a point; what came before
// is replayed, the rest runs on today's code; the source is untouched.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <vector>
#include <string>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

class fork_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    store_ = persistence::open_store(db_.store_options());
    store_->migrate();
  }

  /// "abc": steps a, b, c, each counted; c fails until `fixed_`.
  void register_abc(runtime& rt) {
    rt.register_workflow("abc", [this](workflow_context& ctx) -> task<int> {
      auto a = co_await ctx.step("a", [this] { return ++a_; });
      auto b = co_await ctx.step("b", [this] { return ++b_; });
      auto c = co_await ctx.step("c", [this] {
        ++c_;
        if (!fixed_)
          throw terminal_error("c failed (the bug)");
        return 100;
      });
      co_return a + b + c;
    });
  }

  /// Appends `e` to run `id`'s journal as owner ("local", 1).
  void append(const std::string& id, persistence::journal_entry e) {
    persistence::append_write w;
    w.owner = {"local", 1};
    e.run_id = id;
    w.entry = std::move(e);
    ASSERT_TRUE(store_->write_batch({.appends = {w}, .completions = {}})
                  .appends.at(0));
  }

  void seed(const std::string& id) {
    persistence::run_record r;
    r.id = id;
    r.name = "abc";
    r.owner = {"local", 1};
    ASSERT_TRUE(store_->create_run(r).created);
  }

  test::database db_;
  std::unique_ptr<persistence::store> store_;
  std::atomic<int> a_{0}, b_{0}, c_{0};
  std::atomic<bool> fixed_{false};
};

TEST_F(fork_test, a_failed_run_forked_at_its_failure_runs_only_the_rest) {
  runtime rt{db_.runtime_config("local")};
  register_abc(rt);
  rt.start();
  auto h = rt.start_workflow<int>("abc");
  EXPECT_THROW(h.get(10s), perdure::error);
  fixed_ = true;
  client ops{db_.runtime_config("ops")};
  auto id = ops.fork(h.id(), {.from_last_failure = true, .id = "again"});
  EXPECT_EQ(id, "again");
  EXPECT_EQ(rt.retrieve_workflow<int>(id).get(10s), 102);
  EXPECT_EQ(a_.load(), 1);
  EXPECT_EQ(b_.load(), 1);
  EXPECT_EQ(c_.load(), 2);
  EXPECT_EQ(h.status(), run_status::error) << "the source is untouched";
}

TEST_F(fork_test, failed_runs_fork_by_filter_after_a_dry_run) {
  runtime rt{db_.runtime_config("local")};
  register_abc(rt);
  rt.start();
  std::vector<workflow_handle<int>> failed;
  for (int i = 0; i < 12; ++i)
    failed.push_back(rt.start_workflow<int>("abc"));
  for (auto& h : failed)
    EXPECT_THROW(h.get(10s), perdure::error);
  fixed_ = true;
  run_filter errors{.status = run_status::error, .limit = 5};
  auto look = rt.fork_matching(errors, {.from_last_failure = true}, true);
  EXPECT_EQ(look.matched, 12);
  EXPECT_EQ(look.done, 0);
  EXPECT_EQ(look.sample.size(), 10u);
  EXPECT_TRUE(look.created.empty()) << "a dry run changes nothing";
  EXPECT_THROW(rt.fork_matching(errors, {.id = "same"}), perdure::error)
    << "forks by filter take fresh ids";
  auto did = rt.fork_matching(
    errors, {.from_last_failure = true, .reason = "c fixed"});
  EXPECT_EQ(did.done, 12);
  ASSERT_EQ(did.created.size(), 12u);
  for (auto& [source, fork] : did.created) {
    EXPECT_GT(rt.retrieve_workflow<int>(fork).get(10s), 100) << fork;
    EXPECT_EQ(rt.retrieve_workflow<int>(source).status(), run_status::error);
    // Both histories say so, with the reason.
    auto of_fork = rt.history(fork);
    auto ev = std::find_if(of_fork.begin(), of_fork.end(),
                           [](auto& s) { return s.outcome == "event"; });
    ASSERT_NE(ev, of_fork.end());
    EXPECT_EQ(ev->kind, "fork");
    EXPECT_EQ(ev->payload, "c fixed");
    EXPECT_NE(ev->name.find("forked from '" + source + "' before index 2"),
              std::string::npos)
      << ev->name;
    auto of_source = rt.history(source);
    ev = std::find_if(of_source.begin(), of_source.end(),
                      [](auto& s) { return s.outcome == "event"; });
    ASSERT_NE(ev, of_source.end());
    EXPECT_EQ(ev->kind, "forked");
    EXPECT_NE(ev->name.find("'" + fork + "'"), std::string::npos) << ev->name;
  }
  EXPECT_EQ(a_.load(), 12) << "each fork replayed a and b";
  EXPECT_EQ(c_.load(), 24);
}

TEST_F(fork_test, a_fork_starts_at_an_index_or_a_step_name_and_refuses_clearly) {
  fixed_ = true;
  runtime rt{db_.runtime_config("local")};
  register_abc(rt);
  rt.start();
  auto h = rt.start_workflow<int>("abc");
  EXPECT_EQ(h.get(10s), 102);
  EXPECT_EQ(rt.retrieve_workflow<int>(rt.fork(h.id(), {.from_step_name = "b"}))
              .get(10s),
            1 + 2 + 100);
  EXPECT_EQ(a_.load(), 1);
  EXPECT_EQ(b_.load(), 2);
  EXPECT_EQ(rt.retrieve_workflow<int>(rt.fork(h.id(), {.from_step = 0}))
              .get(10s),
            2 + 3 + 100);
  EXPECT_EQ(a_.load(), 2);
  // The whole journal: it replays to its end, nothing runs.
  EXPECT_EQ(rt.retrieve_workflow<int>(rt.fork(h.id())).get(10s), 102);
  EXPECT_EQ(c_.load(), 3);
  auto refused = [&](fork_options o, errc code, const char* says) {
    try {
      rt.fork(h.id(), o);
      ADD_FAILURE() << "forked: " << says;
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), code) << ex.what();
      EXPECT_NE(std::string{ex.what()}.find(says), std::string::npos)
        << ex.what();
    }
  };
  refused({.from_step = 9}, errc::invalid_argument, "outside its journal");
  refused({.from_step_name = "z"}, errc::invalid_argument, "no step named");
  refused({.from_last_failure = true}, errc::invalid_argument, "no failed");
  rt.fork(h.id(), {.id = "taken"});
  refused({.id = "taken"}, errc::conflicting_id, "exists");
  try {
    rt.fork("nobody");
    ADD_FAILURE();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::not_found);
  }
}

// A review found it: names derived from the source's id (a child's, an
// awakeable's, the waits for them) were copied as they were, and the
// fork's replay, deriving them from its own id, diverged.
TEST_F(fork_test, a_fork_replays_children_and_awakeables_it_copied) {
  runtime rt{db_.runtime_config("local")};
  std::atomic<int> after{0};
  rt.register_workflow("kid", [](workflow_context&, int x) -> task<int> {
    co_return x * 2;
  });
  rt.register_workflow("family", [&](workflow_context& ctx) -> task<int> {
    auto child = co_await ctx.start_child<int>("kid", 4);
    auto doubled = co_await child;
    auto a = co_await ctx.awakeable<int>();
    co_await ctx.set_event("awakeable", a.id());
    auto given = co_await a;
    co_await ctx.step("after", [&] { return ++after; });
    co_return doubled + given;
  });
  rt.start();
  auto h = rt.start_workflow<int>("family");
  auto awakeable_id = rt.get_event<std::string>(h.id(), "awakeable", 10s);
  ASSERT_TRUE(awakeable_id.has_value());
  rt.resolve_awakeable(*awakeable_id, 1);
  EXPECT_EQ(h.get(10s), 9);
  auto fork = rt.retrieve_workflow<int>(rt.fork(h.id(), {.from_step_name = "after"}));
  EXPECT_EQ(fork.get(10s), 9);
  EXPECT_EQ(fork.status(), run_status::success);
  EXPECT_EQ(after.load(), 2) << "only the step after the cut ran again";
}

TEST_F(fork_test, a_fork_is_refused_inside_compensation_or_before_an_outcome) {
  using persistence::entry_kind;
  seed("saga");
  append("saga", {.seq = 0, .kind = entry_kind::phase, .name = "saga",
                  .payload = "FORWARD"});
  append("saga", {.seq = 1, .name = "hold", .payload = "1"});
  append("saga", {.seq = 2, .kind = entry_kind::phase, .name = "saga",
                  .payload = "COMPENSATING"});
  append("saga", {.seq = 3, .name = "release", .payload = "1"});
  using result = persistence::run_store::fork_outcome::result;
  auto out = store_->fork_run({.source_id = "saga", .new_id = "f1",
                               .from_step = 3});
  EXPECT_EQ(out.what, result::refused);
  EXPECT_NE(out.why.find("compensation"), std::string::npos) << out.why;
  out = store_->fork_run({.source_id = "saga", .new_id = "f2", .from_step = 2});
  ASSERT_EQ(out.what, result::forked) << out.why;
  EXPECT_EQ(out.copied, 2);
  EXPECT_EQ(store_->get_run("f2")->saga_phase, "FORWARD");
  EXPECT_EQ(store_->get_run("f2")->status, run_status::pending);

  seed("waits");
  append("waits", {.seq = 0, .kind = entry_kind::awakeable, .name = "aw"});
  out = store_->fork_run({.source_id = "waits", .new_id = "f3", .from_step = 1});
  EXPECT_EQ(out.what, result::refused);
  EXPECT_NE(out.why.find("outcome"), std::string::npos) << out.why;
  out = store_->fork_run({.source_id = "waits", .new_id = "f4", .from_step = 0});
  EXPECT_EQ(out.what, result::forked) << out.why;
}

// A review found forks ignored a retry's jump, and no case forked a run
// that took a patch.
TEST_F(fork_test, a_fork_keeps_patches_before_its_cut_and_refuses_a_forgotten_range) {
  using persistence::entry_kind;
  using result = persistence::run_store::fork_outcome::result;
  seed("retried");
  append("retried", {.seq = -2, .kind = entry_kind::patch, .name = "p",
                     .payload = "1"});
  append("retried", {.seq = 0, .name = "a", .payload = "1"});
  append("retried",
         {.seq = 1, .kind = entry_kind::transaction, .name = "tx", .payload = "1"});
  // A retry forgot index 1 on (the transaction kept, taken by name); the
  // new attempt went on after the marker.
  append("retried", {.seq = 2, .kind = entry_kind::phase, .name = "attempt",
                     .payload = "1"});
  append("retried", {.seq = 3, .name = "b", .payload = "1"});
  auto out = store_->fork_run({.source_id = "retried", .new_id = "f1",
                               .from_step = 2});
  EXPECT_EQ(out.what, result::refused);
  EXPECT_NE(out.why.find("forgotten by a retry"), std::string::npos)
    << out.why;
  out = store_->fork_run({.source_id = "retried", .new_id = "f2",
                          .from_step_name = "tx"});
  EXPECT_EQ(out.what, result::refused) << "a kept transaction is no cut";
  out = store_->fork_run({.source_id = "retried", .new_id = "f3",
                          .from_step = 1});
  ASSERT_EQ(out.what, result::forked) << out.why;
  EXPECT_EQ(out.copied, 1) << "index 0 only: the patch came before index 1";
  out = store_->fork_run({.source_id = "retried", .new_id = "f4",
                          .from_step_name = "b"});
  ASSERT_EQ(out.what, result::forked) << out.why;
  EXPECT_EQ(out.from, 3);
  EXPECT_EQ(out.copied, 4) << "the patch, a, the kept transaction, the marker";
  auto copied = store_->load_journals({"f4"});
  ASSERT_FALSE(copied.empty());
  EXPECT_EQ(copied.front().kind, entry_kind::patch);
}

// A review found a fork lost what its source published before the cut:
// set_event is replayed, not run again.
TEST_F(fork_test, a_fork_keeps_the_events_published_before_its_cut) {
  runtime rt{db_.runtime_config("local")};
  rt.register_workflow("publish", [this](workflow_context& ctx) -> task<int> {
    co_await ctx.set_event("stage", std::string{"reserved"});
    co_await ctx.set_event("stage", std::string{"paid"});
    co_await ctx.step("ship", [this] {
      if (!fixed_)
        throw terminal_error("no carrier (the bug)");
      return 1;
    });
    co_await ctx.set_event("stage", std::string{"shipped"});
    co_return 1;
  });
  rt.start();
  auto h = rt.start_workflow<int>("publish");
  EXPECT_THROW(h.get(10s), perdure::error);
  // Stamped with a version no process runs: it waits while we look.
  auto fork = rt.fork(h.id(), {.from_last_failure = true,
                               .app_version = "later"});
  EXPECT_EQ(rt.get_event<std::string>(fork, "stage", 0ms),
            std::optional<std::string>{"paid"})
    << "its last value before the cut";
  fixed_ = true;
  EXPECT_EQ(rt.move_runs("later", ""), 1);
  EXPECT_EQ(rt.retrieve_workflow<int>(fork).get(10s), 1);
  EXPECT_EQ(rt.get_event<std::string>(fork, "stage", 0ms),
            std::optional<std::string>{"shipped"});
}

TEST_F(fork_test, runs_that_gave_up_or_succeeded_resume_and_fork) {
  runtime rt{db_.runtime_config("local")};
  register_abc(rt);
  rt.start();
  fixed_ = true;
  // RETRIES_EXCEEDED (its process crashed on it too often), after step a.
  seed("gave-up");
  append("gave-up", {.seq = 0, .name = "a", .payload = persistence::encode(7)});
  ASSERT_TRUE(store_
                ->write_batch({.appends = {},
                               .completions = {{.run_id = "gave-up",
                                                .owner = {"local", 1},
                                                .status =
                                                  run_status::retries_exceeded,
                                                .error = "recovered too often",
                                                .at_ms = 5000}}})
                .completions.at(0));
  auto fork = rt.fork("gave-up", {.from_step = 1});
  rt.resume("gave-up", {.reason = "the crash is fixed"});
  // Each ran b (1 and 2, in either order) and c on its own.
  auto resumed = rt.retrieve_workflow<int>("gave-up").get(10s);
  auto forked = rt.retrieve_workflow<int>(fork).get(10s);
  EXPECT_EQ(resumed + forked, 2 * (7 + 100) + 1 + 2);
  EXPECT_EQ(a_.load(), 0) << "step a was replayed in both";
  // SUCCESS: forked (not resumed) from its last step.
  auto done = rt.start_workflow<int>("abc");
  auto total = done.get(10s);
  EXPECT_THROW(rt.resume(done.id()), perdure::error);
  auto again = rt.fork(done.id(), {.from_step_name = "c"});
  EXPECT_EQ(rt.retrieve_workflow<int>(again).get(10s), total);
  EXPECT_EQ(c_.load(), 4) << "c ran in each run, and once more in the fork";
}

} // namespace
