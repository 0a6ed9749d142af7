// A full disk under the embedded SQLite store: a small filesystem of the
// test's own (tmpfs) filled up while runs write. What users rely on: a
// distinct error (`store_full`) for a start that cannot be recorded, no
// crash, runs that wait and then finish by themselves once there is room
// (no process restart), and a write-ahead log that gives its space back.

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "perdure/perdure.hpp"
#include "support/small_disk.hpp"
#include "support/test_support.hpp"

using namespace perdure;
using namespace std::chrono_literals;

namespace {

using test::small_disk;

class disk_full_test : public ::testing::Test {
protected:
  void SetUp() override {
    if (test::store_under_test() != "sqlite")
      GTEST_SKIP() << "PostgreSQL's disk is its server's (see outage_test)";
    disk_ = std::make_unique<small_disk>(8);
    if (!disk_->mounted())
      GTEST_SKIP() << "cannot mount a small tmpfs here (needs root, as "
                      "scripts/test runs)";
    db_.url = "sqlite://" + (disk_->dir() / "full.db").string();
    auto cfg = db_.runtime_config();
    cfg.db_retry_budget = 300ms;
    cfg.orphan_retry = 100ms;
    rt_ = std::make_unique<runtime>(cfg);
    rt_->register_workflow("writer", [](workflow_context& ctx,
                                        int n) -> task<long> {
      long total = 0;
      for (int i = 0; i < 40; ++i) {
        auto bytes = co_await ctx.step("s" + std::to_string(i), [&] {
          std::this_thread::sleep_for(2ms);
          return std::string(4096, static_cast<char>('a' + n % 26));
        });
        total += static_cast<long>(bytes.size());
      }
      co_return total + n;
    });
    // What expect_full starts: next to nothing to write.
    rt_->register_workflow("probe", [](workflow_context&) -> task<int> {
      co_return 0;
    });
    rt_->start();
  }

  void TearDown() override {
    if (rt_)
      rt_->stop();
  }

  static long expected(int n) {
    return 40 * 4096 + n;
  }

  /// Expects starts to fail with `store_full` once the disk is full (a few
  /// may be stored first: a full disk makes the store checkpoint and
  /// truncate its log, which gives some room back).
  void expect_full() {
    for (int i = 0; i < 200; ++i) {
      try {
        rt_->start_workflow<int>("probe");
      } catch (const perdure::error& ex) {
        EXPECT_EQ(ex.code(), errc::store_full) << ex.what();
        return;
      }
    }
    FAIL() << "200 starts were acknowledged on a full disk";
  }

  std::uintmax_t wal_size() const {
    auto wal = disk_->dir() / "full.db-wal";
    return std::filesystem::exists(wal) ? std::filesystem::file_size(wal) : 0;
  }

  std::unique_ptr<small_disk> disk_;
  test::database db_;
  std::unique_ptr<runtime> rt_;
};

TEST_F(disk_full_test, runs_wait_for_room_and_then_finish_by_themselves) {
  constexpr int runs = 10;
  std::vector<workflow_handle<long>> handles;
  for (int n = 0; n < runs; ++n)
    handles.push_back(rt_->start_workflow<long>("writer", n));
  std::this_thread::sleep_for(50ms);
  auto filler = disk_->fill();
  expect_full();
  std::this_thread::sleep_for(1s);
  int pending = 0;
  for (auto& h : handles)
    pending += h.status() == run_status::pending ? 1 : 0;
  EXPECT_GT(pending, 0) << "the disk filled up after every run had finished";
  std::filesystem::remove(filler);
  for (int n = 0; n < runs; ++n)
    EXPECT_EQ(handles[static_cast<size_t>(n)].get(30s), expected(n));
  EXPECT_EQ(rt_->start_workflow<long>("writer", 7).get(30s), expected(7));
}

TEST_F(disk_full_test, the_log_gives_back_the_space_it_took_once_room_returns) {
  // At the store, with no other writer: the log grows into the last free
  // space, the disk is full, room returns, and the next commit truncates
  // the log instead of keeping its size for good.
  rt_->stop();
  rt_.reset();
  auto store = persistence::open_store(
    {.url = db_.url, .schema = "", .retry_budget = 200ms});
  store->migrate();
  persistence::run_record run;
  run.id = "r";
  run.name = "writer";
  run.owner = {"local", 1};
  ASSERT_TRUE(store->create_run(run).created);
  auto filler = disk_->fill();
  std::filesystem::resize_file(filler, std::filesystem::file_size(filler)
                                         - 1024 * 1024); // 1 MiB left
  int seq = 0;
  auto batch = [&](int appends) {
    persistence::write_batch b;
    for (int i = 0; i < appends; ++i) {
      persistence::append_write w;
      w.owner = run.owner;
      w.entry.run_id = "r";
      w.entry.seq = seq++;
      w.entry.name = "s";
      w.entry.payload = std::string(4096, 'x');
      b.appends.push_back(std::move(w));
    }
    return store->write_batch(b);
  };
  bool full = false;
  for (int i = 0; i < 100 && !full; ++i) {
    try {
      batch(20);
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), errc::store_full) << ex.what();
      full = true;
    }
  }
  ASSERT_TRUE(full) << "1 MiB never filled up";
  auto when_full = wal_size();
  std::filesystem::remove(filler);
  EXPECT_TRUE(batch(1).appends.at(0));
  auto after = wal_size();
  std::cout << "[ measured ] WAL when the disk was full: " << when_full
            << " bytes; after the next commit: " << after << " bytes\n";
  EXPECT_GT(when_full, 512u * 1024);
  EXPECT_LT(after, 64u * 1024) << "the log kept the size it had when full";
}

} // namespace

namespace {

// A small volume (2 MiB, as a probe used) filled while 300 runs write, then
// only a little room returned: less than the log grew to before the disk
// filled. Progress resumes by itself (the log is checkpointed and truncated
// when the disk is full, and checkpointed often enough on a small disk
// that it never outgrows the room there is).
TEST(disk_full_small_volume, runs_resume_when_little_room_returns) {
  if (test::store_under_test() != "sqlite")
    GTEST_SKIP() << "PostgreSQL's disk is its server's (see outage_test)";
  small_disk disk{2};
  if (!disk.mounted())
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root, as "
                    "scripts/test runs)";
  test::database db;
  db.url = "sqlite://" + (disk.dir() / "small.db").string();
  auto cfg = db.runtime_config();
  cfg.db_retry_budget = 300ms;
  cfg.orphan_retry = 100ms;
  runtime rt{cfg};
  rt.register_workflow("small", [](workflow_context& ctx, int n) -> task<int> {
    int total = 0;
    for (int i = 0; i < 10; ++i)
      total += static_cast<int>((co_await ctx.step("s" + std::to_string(i), [&] {
                                  std::this_thread::sleep_for(1ms);
                                  return std::string(200, 'a');
                                })).size());
    co_return total + n;
  });
  rt.start();
  std::vector<workflow_handle<int>> handles;
  for (int n = 0; n < 300; ++n)
    handles.push_back(rt.start_workflow<int>("small", n));
  auto filler = disk.fill();
  std::this_thread::sleep_for(1s);
  int pending = 0;
  for (auto& h : handles)
    pending += h.status() == run_status::pending ? 1 : 0;
  EXPECT_GT(pending, 0) << "the disk filled up after every run had finished";
  // Little room back: 1 MiB of the filler goes.
  auto size = std::filesystem::file_size(filler);
  std::filesystem::resize_file(
    filler, size > 1024 * 1024 ? size - 1024 * 1024 : 0);
  // Where the room went, if the runs do not finish (seen once under the
  // sanitizers' load: the file stayed full for a minute).
  auto room = [&] {
    std::string out;
    for (auto& e : std::filesystem::directory_iterator(disk.dir()))
      out += e.path().filename().string() + " "
             + std::to_string(e.is_regular_file() ? e.file_size() : 0) + "; ";
    auto space = std::filesystem::space(disk.dir());
    return out + "free " + std::to_string(space.available);
  };
  for (int n = 0; n < 300; ++n) {
    try {
      ASSERT_EQ(handles[static_cast<size_t>(n)].get(60s), 2000 + n)
        << "run " << n << " did not finish after room returned (" << room()
        << ")";
    } catch (const perdure::error& ex) {
      FAIL() << "run " << n << ": " << ex.what() << " (" << room() << ")";
    }
  }
}

} // namespace
