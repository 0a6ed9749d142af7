// The group-commit writer against both stores: every write acknowledged
// only after it is visible to another connection, many writes per commit.

#include <gtest/gtest.h>

#include <future>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace perdure::persistence;

namespace {

/// Collects the acks of `n` writes, in submission order, and waits for all.
class ack_collector {
public:
  explicit ack_collector(int n) : acks_(static_cast<size_t>(n)) {
  }

  journal_writer::callback slot(int i) {
    return [this, i](write_result r) {
      auto a = r.ack;
      std::lock_guard g{m_};
      acks_[static_cast<size_t>(i)] = a;
      ++received_;
      cv_.notify_one();
    };
  }

  const std::vector<std::optional<write_ack>>& wait() {
    std::unique_lock g{m_};
    cv_.wait(g, [&] { return received_ == acks_.size(); });
    return acks_;
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::optional<write_ack>> acks_;
  size_t received_ = 0;
};

class journal_writer_test : public ::testing::Test {
protected:
  void SetUp() override {
    db_ = test::database::fresh();
    control_ = open_store(db_.store_options());
    control_->migrate();
  }

  void create_runs(int n) {
    for (int i = 0; i < n; ++i) {
      run_record r;
      r.id = "run-" + std::to_string(i);
      r.name = "wf";
      r.owner = {"me", 1};
      control_->create_run(r);
    }
  }

  static append_write entry(int run, int seq, std::int64_t epoch = 1) {
    append_write w;
    w.owner = {"me", epoch};
    w.entry.run_id = "run-" + std::to_string(run);
    w.entry.seq = seq;
    w.entry.name = "s";
    w.entry.payload = std::to_string(run * 1000 + seq);
    return w;
  }

  test::database db_;
  std::unique_ptr<store> control_;
};

} // namespace

TEST_F(journal_writer_test, batches_concurrent_writers_into_few_commits) {
  constexpr int runs = 64;
  constexpr int steps = 20;
  create_runs(runs);
  // Two connections, as the runtime uses on PostgreSQL.
  std::vector<std::unique_ptr<store>> connections;
  connections.push_back(open_store(db_.store_options()));
  connections.push_back(open_store(db_.store_options()));
  journal_writer writer{std::move(connections), journal_writer::options{}};
  std::atomic<int> committed{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < runs; ++r)
    threads.emplace_back([&, r] {
      for (int s = 0; s < steps; ++s) {
        // Like a workflow: the next write only after the previous ack.
        std::mutex m;
        std::condition_variable cv;
        std::optional<write_ack> ack;
        writer.append(entry(r, s), [&](write_result r) {
          auto a = r.ack;
          std::lock_guard g{m};
          ack = a;
          cv.notify_one();
        });
        std::unique_lock g{m};
        cv.wait(g, [&] { return ack.has_value(); });
        if (*ack == write_ack::committed)
          ++committed;
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(committed.load(), runs * steps);
  std::vector<std::string> ids;
  for (int r = 0; r < runs; ++r)
    ids.push_back("run-" + std::to_string(r));
  EXPECT_EQ(control_->load_journals(ids).size(),
            static_cast<size_t>(runs * steps));
  EXPECT_LT(writer.batches_committed(), static_cast<uint64_t>(runs * steps))
    << "group commit should put several writes into one transaction";
}

TEST_F(journal_writer_test, acks_only_after_the_write_is_visible_elsewhere) {
  create_runs(1);
  journal_writer writer{open_store(db_.store_options())};
  auto reader = open_store(db_.store_options());
  std::mutex m;
  std::condition_variable cv;
  bool seen_in_callback = false, done = false;
  writer.append(entry(0, 0), [&](write_result r) {
          auto a = r.ack;
    EXPECT_EQ(a, write_ack::committed);
    // Runs on the writer thread right after the commit.
    auto j = reader->load_journals({"run-0"});
    std::lock_guard g{m};
    seen_in_callback = j.size() == 1;
    done = true;
    cv.notify_one();
  });
  std::unique_lock g{m};
  cv.wait(g, [&] { return done; });
  EXPECT_TRUE(seen_in_callback);
}

TEST_F(journal_writer_test, rejects_fenced_writes_individually) {
  create_runs(2);
  journal_writer writer{open_store(db_.store_options())};
  ack_collector acks{2};
  writer.append(entry(0, 0, 1), acks.slot(0));
  writer.append(entry(1, 0, 5), acks.slot(1)); // wrong epoch
  auto& got = acks.wait();
  EXPECT_EQ(got[0], write_ack::committed);
  EXPECT_EQ(got[1], write_ack::rejected);
}

TEST_F(journal_writer_test, a_keys_calls_commit_in_the_order_submitted) {
  // Threads store calls to shared keys without waiting for acks, mixed
  // with other runs' creations: each thread's calls to a key take inbox
  // places in the order it submitted them, on two connections too (one on
  // SQLite, as the runtime uses), and every write is acknowledged.
  constexpr int threads = 4;
  constexpr int keys = 6;
  constexpr int calls = 400; // per thread
  std::vector<std::unique_ptr<store>> connections;
  connections.push_back(open_store(db_.store_options()));
  if (db_.postgres)
    connections.push_back(open_store(db_.store_options()));
  journal_writer writer{std::move(connections), journal_writer::options{}};
  std::mutex m;
  std::condition_variable all_acked;
  int acked = 0;
  // [thread][key]: inbox places in submission order.
  std::vector<std::vector<std::vector<std::int64_t>>> places(
    threads, std::vector<std::vector<std::int64_t>>(keys));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int n = 0; n < calls; ++n) {
        run_record r;
        r.id = "call-" + std::to_string(t) + "-" + std::to_string(n);
        r.name = "add";
        r.owner = {"me", 1};
        if (n % 5 != 4) { // every fifth a workflow, of no key
          r.object_type = "counter";
          r.object_key = "k" + std::to_string(n % keys);
        }
        auto key = n % keys;
        auto keyed = !r.object_type.empty();
        std::size_t at = 0;
        if (keyed) {
          std::lock_guard g{m};
          at = places[t][key].size();
          places[t][key].push_back(-1);
        }
        writer.create(std::move(r), [&, t, key, keyed, at](write_result w) {
          std::lock_guard g{m};
          EXPECT_EQ(w.ack, write_ack::committed);
          if (keyed)
            places[t][key][at] = w.inbox_seq;
          ++acked;
          all_acked.notify_one();
        });
      }
    });
  for (auto& w : workers)
    w.join();
  std::unique_lock g{m};
  ASSERT_TRUE(all_acked.wait_for(g, std::chrono::seconds(60), [&] {
    return acked == threads * calls;
  })) << acked << " of " << threads * calls << " writes acknowledged";
  int out_of_order = 0;
  for (auto& by_key : places)
    for (auto& seqs : by_key)
      for (std::size_t i = 1; i < seqs.size(); ++i)
        if (seqs[i] <= seqs[i - 1])
          ++out_of_order;
  EXPECT_EQ(out_of_order, 0) << "calls stored before one submitted earlier";
}

TEST_F(journal_writer_test, drains_queued_writes_on_destruction) {
  create_runs(1);
  std::atomic<int> acked{0};
  {
    journal_writer writer{open_store(db_.store_options())};
    for (int s = 0; s < 100; ++s)
      writer.append(entry(0, s), [&](write_result r) {
          auto a = r.ack;
        if (a == write_ack::committed)
          ++acked;
      });
  }
  EXPECT_EQ(acked.load(), 100);
  EXPECT_EQ(control_->load_journals({"run-0"}).size(), 100u);
}

TEST_F(journal_writer_test, a_write_the_database_refuses_fails_alone) {
  constexpr int goods = 30;
  create_runs(goods + 1);
  journal_writer writer{open_store(db_.store_options())};
  ack_collector acks{goods + 1};
  auto bad = entry(0, 0);
  bad.entry.name = std::string{"nul\0inside", 10}; // PostgreSQL refuses NUL
  bad.entry.error = "\xff\xfe not UTF-8";
  // Queued back to back, the good writes share batches with the bad one.
  writer.append(bad, acks.slot(0));
  for (int r = 1; r <= goods; ++r)
    writer.append(entry(r, 0), acks.slot(r));
  auto& got = acks.wait();
  for (int r = 1; r <= goods; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)], write_ack::committed) << r;
    EXPECT_EQ(control_->load_journals({"run-" + std::to_string(r)}).size(), 1u);
  }
}

TEST_F(journal_writer_test, a_creation_stored_beside_call_ends_the_database_refuses_is_committed) {
  // On PostgreSQL a batch's object call ends commit apart from its other
  // writes (review B2): a creation committed before refused ends must be
  // acknowledged committed, not failed or rejected (a call stored but
  // reported otherwise waits unseen while later calls of its key run).
  create_runs(1);
  journal_writer writer{open_store(db_.store_options())};
  constexpr int rounds = 20;
  ack_collector acks{3 * rounds};
  for (int i = 0; i < rounds; ++i) {
    invocation_commit bad;
    bad.object_type = "counter";
    bad.object_key = "k";
    bad.completion.run_id = "call-" + std::to_string(i);
    bad.completion.owner = {"me", 1};
    bad.completion.status = run_status::error;
    bad.completion.error = std::string{"nul\0inside", 10};
    run_record made;
    made.id = "made-" + std::to_string(i);
    made.name = "wf";
    made.owner = {"me", 1};
    // Queued back to back, the three share batches.
    writer.submit(std::move(bad), acks.slot(3 * i));
    writer.create(std::move(made), acks.slot(3 * i + 1));
    writer.append(entry(0, i), acks.slot(3 * i + 2));
  }
  auto& got = acks.wait();
  for (int i = 0; i < rounds; ++i) {
    EXPECT_NE(got[static_cast<size_t>(3 * i)], write_ack::committed) << i;
    EXPECT_EQ(got[static_cast<size_t>(3 * i + 1)], write_ack::committed) << i;
    EXPECT_TRUE(control_->get_run("made-" + std::to_string(i))) << i;
    EXPECT_EQ(got[static_cast<size_t>(3 * i + 2)], write_ack::committed) << i;
  }
  EXPECT_EQ(control_->load_journals({"run-0"}).size(),
            static_cast<size_t>(rounds));
}

TEST_F(journal_writer_test, a_write_to_an_index_holding_another_outcome_is_superseded) {
  create_runs(1);
  journal_writer writer{open_store(db_.store_options())};
  auto write = [&](append_write w) {
    std::promise<write_result> done;
    writer.append(std::move(w), [&](write_result r) { done.set_value(r); });
    return done.get_future().get();
  };
  EXPECT_EQ(write(entry(0, 0)).ack, write_ack::committed);
  EXPECT_EQ(write(entry(0, 0)).ack, write_ack::committed)
    << "the same write again (its commit was in doubt)";
  auto other = entry(0, 0);
  other.entry.payload = "something else";
  auto r = write(other);
  EXPECT_EQ(r.ack, write_ack::superseded);
  ASSERT_TRUE(r.recorded);
  EXPECT_EQ(r.recorded->payload, "0") << "what is stored stands";
}
