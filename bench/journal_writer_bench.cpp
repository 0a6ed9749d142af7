// Group commit: appends from many threads (each waiting for its ack before
// the next append, as a workflow does) against one writer on a SQLite file.
// items_per_second is acknowledged appends; the "rows_per_commit" counter
// shows how many appends shared a commit.

#include <benchmark/benchmark.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>

#include "perdure/persistence/journal_writer.hpp"
#include "perdure/persistence/store.hpp"

using namespace perdure::persistence;

namespace {

constexpr int max_threads = 64;

struct shared_writer {
  std::unique_ptr<journal_writer> writer;
  std::vector<int> next_seq = std::vector<int>(max_threads, 0);

  shared_writer() {
    auto dir = std::filesystem::temp_directory_path() / "perdure-bench";
    std::filesystem::create_directories(dir);
    auto path = dir / "journal_writer_bench.db";
    std::filesystem::remove(path);
    store_options opts{.url = "sqlite://" + path.string()};
    auto setup = open_store(opts);
    setup->migrate();
    for (int t = 0; t < max_threads; ++t) {
      run_record r;
      r.id = "run-" + std::to_string(t);
      r.name = "bench";
      r.owner = {"bench", 1};
      setup->create_run(r);
    }
    writer = std::make_unique<journal_writer>(open_store(opts));
  }
};

shared_writer& fixture() {
  static shared_writer instance;
  return instance;
}

void group_commit_appends(benchmark::State& state) {
  auto& f = fixture();
  auto t = state.thread_index();
  auto before = f.writer->batches_committed();
  for (auto _ : state) {
    append_write w;
    w.owner = {"bench", 1};
    w.entry.run_id = "run-" + std::to_string(t);
    w.entry.seq = f.next_seq[static_cast<size_t>(t)]++;
    w.entry.name = "s";
    w.entry.payload = "{\"value\":42}";
    std::mutex m;
    std::condition_variable cv;
    std::optional<write_ack> ack;
    f.writer->append(std::move(w), [&](write_result r) {
      auto a = r.ack;
      std::lock_guard g{m};
      ack = a;
      cv.notify_one();
    });
    std::unique_lock g{m};
    cv.wait(g, [&] { return ack.has_value(); });
    if (*ack != write_ack::committed)
      state.SkipWithError("append not committed");
  }
  state.SetItemsProcessed(state.iterations());
  if (t == 0) {
    auto commits = f.writer->batches_committed() - before;
    state.counters["rows_per_commit"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * state.threads()
      / static_cast<double>(std::max<std::uint64_t>(commits, 1)));
  }
}

} // namespace

BENCHMARK(group_commit_appends)->Threads(1)->Threads(16)->Threads(64)->UseRealTime();
