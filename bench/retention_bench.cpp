// The retention scenario: collection speed under a steady workload, what it
// costs the workload, and whether retention keeps the tables flat.
//   deleted_per_s     --workflows ended runs (3 journal entries, an event
//                     and a message each, ended an hour ago) collected
//                     while the workload runs, over the wall time from the
//                     collector's start to the last one gone (its pauses
//                     included)
//   step_p99_ratio    the workload's step p99 while collecting, over the
//                     mean of its p99 in the seconds before and after
//   <table>_start/end, <table>_rows_start/end
//                     with --rounds N: the workload for N minutes with
//                     retention on (runs kept 10 s, ids 20 more), each
//                     table's bytes (indexes included) and rows after the
//                     first minute and at the end
// BENCH_RETENTION_BATCH and BENCH_RETENTION_DUTY_PCT override the
// collector's batch (1 000) and duty (50 %).

#include "retention_bench.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/retention/collector.hpp"

namespace perdure::bench {

namespace {

namespace ret = perdure::retention;

std::mutex latency_mtx;
std::vector<double> step_us;
std::atomic<bool> recording{false};

task<int> job(workflow_context& ctx, int n) {
  // Timing outside steps is not deterministic; fine for a benchmark that
  // is never replayed.
  auto last = bench_clock::now();
  for (int i = 0; i < 5; ++i) {
    co_await ctx.step("s", [n, i] { return n + i; });
    auto now = bench_clock::now();
    if (recording) {
      std::lock_guard guard{latency_mtx};
      step_us.push_back(
        std::chrono::duration<double, std::micro>(now - last).count());
    }
    last = now;
  }
  co_return n;
}

/// The p99 of the steps recorded during `seconds` (or until `done`).
template <class Done>
double p99_while(Done&& done) {
  {
    std::lock_guard guard{latency_mtx};
    step_us.clear();
  }
  recording = true;
  while (!done())
    std::this_thread::sleep_for(50ms);
  recording = false;
  std::lock_guard guard{latency_mtx};
  auto v = step_us;
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(0.99 * static_cast<double>(v.size())))];
}

std::function<bool()> for_seconds(int s) {
  auto end = bench_clock::now() + std::chrono::seconds{s};
  return [end] { return bench_clock::now() >= end; };
}

/// Inserts `n` ended runs of workflow "seeded" with what hangs off them.
void seed(test::sql_client& sql, int n, std::int64_t ended_at) {
  bool pg = std::string{sql.dialect()} == "postgresql";
  auto bytes = std::string{pg ? "'\\x01'::bytea" : "X'01'"};
  auto at = std::to_string(ended_at);
  for (int from = 1; from <= n; from += 50000) {
    auto to = std::to_string(std::min(n, from + 49999));
    auto series = [&](const std::string& table, const std::string& columns,
                      const std::string& select) {
      auto f = std::to_string(from);
      if (pg)
        sql.exec("INSERT INTO " + sql.table(table) + " (" + columns
                 + ") SELECT " + select + " FROM generate_series(" + f + ", "
                 + to + ") AS s(g)");
      else
        sql.exec("WITH RECURSIVE s(g) AS (SELECT " + f
                 + " UNION ALL SELECT g + 1 FROM s WHERE g < " + to
                 + ") INSERT INTO " + sql.table(table) + " (" + columns
                 + ") SELECT " + select + " FROM s");
    };
    series("runs",
           "id, name, status, inputs, executor, epoch, app_version, "
           "created_at, updated_at",
           "'seed-' || g, 'seeded', 'SUCCESS', " + bytes + ", '', 0, '', "
             + at + ", " + at);
    for (int seq = 0; seq < 3; ++seq)
      series("journal", "run_id, seq, kind, name, outcome, payload, created_at",
             "'seed-' || g, " + std::to_string(seq) + ", 'step', 's', 0, "
               + bytes + ", " + at);
    series("events", "run_id, key, value, updated_at",
           "'seed-' || g, 'k', " + bytes + ", " + at);
    series("messages", "run_id, topic, payload, created_at",
           "'seed-' || g, 'm', " + bytes + ", " + at);
  }
}

/// Bytes of each table, indexes included (SQLite: dbstat).
std::vector<std::pair<std::string, double>> table_bytes(test::sql_client& sql) {
  std::vector<std::pair<std::string, double>> out;
  bool pg = std::string{sql.dialect()} == "postgresql";
  for (auto t : {"runs", "journal", "events", "messages", "resolutions"}) {
    double b = 0;
    if (pg) {
      b = std::stod(sql.scalar("SELECT pg_total_relation_size(to_regclass($1))",
                               {sql.table(t)}));
    } else {
      // The table and its indexes (sqlite_autoindex_<t>_N, <t>_... named
      // by the migrations: every index name starts with the table's or
      // with "runs_" for runs).
      b = std::stod(sql.scalar(
        "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name = $1 OR name "
        "IN (SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name "
        "= $1)",
        {std::string{t}}));
    }
    out.emplace_back(t, b);
    // Rows too: bytes alone cannot tell dead space from rows kept.
    out.emplace_back(std::string{t} + "_rows",
                     std::stod(sql.scalar("SELECT COUNT(*) FROM " + sql.table(t))));
  }
  return out;
}

int env_int(const char* name, int fallback) {
  auto v = std::getenv(name);
  return v ? std::stoi(v) : fallback;
}

} // namespace

void retention(const options& o) {
  int seeded = o.workflows > 0 ? o.workflows : 200000;
  int minutes = o.rounds;
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  rt.register_workflow("job", job);
  rt.start();
  test::sql_client sql{db};
  auto hour_ago = test::wall_ms() - 3'600'000;
  seed(sql, seeded, hour_ago);
  if (std::string{sql.dialect()} == "postgresql")
    sql.exec("ANALYZE");

  // The steady workload: in-flight runs of five steps, started as others
  // end.
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> runs_done{0};
  std::vector<std::thread> load;
  int in_flight = std::min(o.in_flight, 64);
  for (int t = 0; t < in_flight; ++t)
    load.emplace_back([&, t] {
      for (int n = 0; !stop; ++n) {
        try {
          rt.start_workflow<int>("job", n).get(60s);
          ++runs_done;
        } catch (const std::exception&) {
        }
        (void)t;
      }
    });
  std::this_thread::sleep_for(3s); // warm
  auto p99_before = p99_while(for_seconds(10));

  ret::policies seeded_only;
  seeded_only.workflows["seeded"].succeeded = ret::keep{0ms, 24h};
  ret::collector_options opts;
  opts.interval = 10ms;
  opts.batch = env_int("BENCH_RETENTION_BATCH", 1000);
  opts.duty = env_int("BENCH_RETENTION_DUTY_PCT", 50) / 100.0;
  auto collected = [&] {
    return std::stoll(sql.scalar("SELECT runs_collected FROM "
                                 + sql.table("retention_state")));
  };
  double collect_s = 0;
  double p99_during = 0;
  {
    auto t0 = bench_clock::now();
    ret::collector gc{rt, seeded_only, opts};
    p99_during = p99_while([&] { return collected() >= seeded; });
    collect_s = seconds_since(t0);
  }
  auto p99_after = p99_while(for_seconds(10));
  double p99_base = (p99_before + p99_after) / 2;

  auto line = header(o);
  line.add("seeded", seeded)
    .add("batch", opts.batch)
    .add("duty", opts.duty)
    .add("deleted_per_s", seeded / collect_s)
    .add("collect_s", collect_s)
    .add("step_p99_us_before", p99_before)
    .add("step_p99_us_during", p99_during)
    .add("step_p99_us_after", p99_after)
    .add("step_p99_ratio", p99_base > 0 ? p99_during / p99_base : 0);

  if (minutes > 0) {
    ret::policies all;
    all.all = ret::policy{ret::keep{10s, 20s}, ret::keep{10s, 20s},
                          ret::keep{10s, 20s}};
    ret::collector_options flat;
    flat.interval = 1s;
    ret::collector gc{rt, all, flat};
    auto runs_at_start = runs_done.load();
    std::this_thread::sleep_for(60s);
    auto start = table_bytes(sql);
    std::this_thread::sleep_for(std::chrono::minutes{minutes} - 60s);
    auto end = table_bytes(sql);
    line.add("flat_minutes", minutes)
      .add("flat_runs", static_cast<double>(runs_done.load() - runs_at_start));
    for (std::size_t i = 0; i < start.size(); ++i)
      line.add(start[i].first + "_start", start[i].second)
        .add(end[i].first + "_end", end[i].second);
  }
  stop = true;
  for (auto& t : load)
    t.join();
  rt.stop();
  line.print();
}

} // namespace perdure::bench
