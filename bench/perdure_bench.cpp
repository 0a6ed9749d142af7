// perdure-bench: end-to-end scenarios against a live database, one JSON line
// per run. Throughput scenarios report their ratio to `baseline`, the plainest
// batched insert of the same number of journal-sized rows on the same
// database, measured in the same run.
//
//   perdure-bench <scenario> --store pg|sqlite [--url URL] [--schema S]
//                 [--workflows W] [--steps S] [--baseline-rows-per-s R]
//
// Scenarios: baseline, step_throughput (--processes N: N runtimes on one
// database), step_throughput_sustained (--in-flight N), takeover (pg),
// step_latency (with ratio_to_commit), recovery,
// sleeping_memory (--workflows N runs sleeping an hour), timer_lateness
// (--workflows N timers spread over --steps S seconds).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pqxx/pqxx>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <malloc.h>
#include <mutex>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/persistence/store.hpp"
#include "perdure/sagas/saga.hpp"
#include "support/test_support.hpp"
#include "bench_support.hpp"
#include "db_counters.hpp"
#include "operators_bench.hpp"
#include "retention_bench.hpp"
#include "schedule_bench.hpp"
#ifdef PERDURE_BENCH_OBSERVABILITY
#include "observability_bench.hpp"
#endif
#include "queue_scenarios.hpp"

using namespace perdure;
using namespace std::chrono_literals;

using namespace perdure::bench;

namespace {

long count_rows(test::sql_client& sql, const std::string& table,
                const std::string& where = "") {
  return std::stol(sql.scalar("SELECT COUNT(*) FROM " + sql.table(table)
                              + (where.empty() ? "" : " WHERE " + where)));
}

// -- baseline ---------------------------------------------------------------------

/// Rows of each side of a two-sided baseline: about a second of COPY here
/// (`BENCH_BASELINE_ROWS`, default 160 000).
long baseline_rows() {
  auto v = std::getenv("BENCH_BASELINE_ROWS");
  return v ? std::stol(v) : 160'000;
}

// -- step_throughput --------------------------------------------------------------

/// Client threads starting workflows (`BENCH_START_THREADS`, default 8).
int start_threads() {
  if (auto v = std::getenv("BENCH_START_THREADS"))
    return std::max(1, std::stoi(v));
  return 8;
}

task<int> trivial_steps(workflow_context& ctx, int steps) {
  int sum = 0;
  for (int i = 0; i < steps; ++i)
    sum += co_await ctx.step("s" + std::to_string(i), [i] { return i; });
  co_return sum;
}

void step_throughput(const options& o) {
  auto db = database_for(o);
  // --processes N: N runtimes (executor leases of their own) on one
  // database, each starting its share.
  std::vector<std::unique_ptr<runtime>> runtimes;
  for (int p = 0; p < std::max(1, o.processes); ++p) {
    auto cfg = runtime_config(db);
    cfg.executor_id = "bench-" + std::to_string(p);
    runtimes.push_back(std::make_unique<runtime>(cfg));
    runtimes.back()->register_workflow("trivial", trivial_steps);
    runtimes.back()->start();
  }
  // Workflows are started the way a server starts them: from several
  // request threads at once (each start is durable before it returns).
  auto clients = std::min(o.workflows, start_threads());
  auto t0 = bench_clock::now();
  std::vector<std::vector<workflow_handle<int>>> handles(
    static_cast<size_t>(clients));
  {
    std::vector<std::jthread> starters;
    for (int c = 0; c < clients; ++c)
      starters.emplace_back([&, c] {
        for (int w = c; w < o.workflows; w += clients)
          handles[static_cast<size_t>(c)].push_back(
            runtimes[static_cast<size_t>(w) % runtimes.size()]
              ->start_workflow<int>("trivial", o.steps));
      });
  }
  auto start_secs = seconds_since(t0);
  int expected = o.steps * (o.steps - 1) / 2;
  for (auto& mine : handles)
    for (auto& h : mine)
      if (h.get(300s) != expected)
        throw std::runtime_error("wrong workflow output");
  auto secs = seconds_since(t0);
  test::sql_client sql{db};
  auto rows = count_rows(sql, "journal");
  double steps = static_cast<double>(o.workflows) * o.steps;
  auto j = header(o);
  j.add("workflows", o.workflows)
    .add("steps", o.steps)
    .add("processes", static_cast<double>(runtimes.size()))
    .add("start_threads", clients)
    .add("seconds", secs)
    .add("start_seconds", start_secs)
    .add("steps_per_s", steps / secs)
    .add("workflows_per_s", o.workflows / secs)
    .add("journal_rows", static_cast<double>(rows))
    .add("journal_rows_ok", rows == static_cast<long>(steps) ? 1.0 : 0.0);
  if (o.baseline_rows_per_s > 0)
    j.add("baseline_rows_per_s", o.baseline_rows_per_s)
      .add("ratio_to_baseline", steps / secs / o.baseline_rows_per_s);
  j.print();
}

// -- step_throughput_sustained ------------------------------------------------------

/// `o.workflows` workflows of `o.steps` steps, `o.in_flight` of them in
/// flight at all times (a lane starts the next when its last one ends),
/// starts included: how the peers are measured.
void step_throughput_sustained(const options& o) {
  auto db = database_for(o);
  two_sided_baseline base;
  base.before = copy_baseline(db, baseline_rows());
  db_counters before, after;
  double secs = 0;
  int expected = o.steps * (o.steps - 1) / 2;
  std::atomic<int> wrong{0};
  {
    runtime rt{runtime_config(db)};
    rt.register_workflow("trivial", trivial_steps);
    rt.start();
    before = read_counters(db, {"runs", "journal"});
    std::atomic<int> next{0};
    auto t0 = bench_clock::now();
    {
      std::vector<std::jthread> lanes;
      for (int l = 0; l < o.in_flight; ++l)
        lanes.emplace_back([&] {
          while (next.fetch_add(1) < o.workflows)
            if (rt.start_workflow<int>("trivial", o.steps).get(300s)
                != expected)
              ++wrong;
        });
    }
    secs = seconds_since(t0);
  } // the runtime's connections close: their statistics are reported
  after = read_counters(db, {"runs", "journal"});
  base.after = copy_baseline(db, baseline_rows());
  if (wrong > 0)
    throw std::runtime_error("wrong workflow output");
  double steps = static_cast<double>(o.workflows) * o.steps;
  auto j = header(o);
  j.add("workflows", o.workflows)
    .add("steps", o.steps)
    .add("in_flight", o.in_flight)
    .add("seconds", secs)
    .add("steps_per_s", steps / secs)
    .add("workflows_per_s", o.workflows / secs);
  base.add_to(j, steps / secs);
  add_per(j, before, after, steps, "step");
  j.print();
}

// -- step_latency -----------------------------------------------------------------

/// Returns the median time of committing one plain one-row INSERT (the
/// floor under any durable step), measured `n` times.
double commit_p50_us(const test::database& db, int n) {
  test::sql_client sql{db};
  auto table = sql.table("commit_probe");
  sql.exec("CREATE TABLE " + table + " (id INTEGER, payload TEXT)");
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    auto t = bench_clock::now();
    sql.exec("INSERT INTO " + table + " VALUES ($1, 'x')", {std::int64_t{i}});
    v.push_back(std::chrono::duration<double, std::micro>(bench_clock::now() - t)
                  .count());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<double> latencies_us;

task<int> timed_steps(workflow_context& ctx, int steps) {
  // Timing outside steps is not deterministic; fine for a benchmark that is
  // never replayed.
  auto last = bench_clock::now();
  for (int i = 0; i < steps; ++i) {
    co_await ctx.step("s" + std::to_string(i), [i] { return i; });
    auto now = bench_clock::now();
    latencies_us.push_back(
      std::chrono::duration<double, std::micro>(now - last).count());
    last = now;
  }
  co_return steps;
}

void step_latency(const options& o) {
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  rt.register_workflow("timed", timed_steps);
  rt.start();
  latencies_us.reserve(static_cast<size_t>(o.steps));
  rt.start_workflow<int>("timed", o.steps).get(300s);
  auto v = latencies_us;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
  };
  auto commit = commit_p50_us(db, 500);
  header(o)
    .add("steps", o.steps)
    .add("commit_p50_us", commit)
    .add("ratio_to_commit", pct(0.50) / commit)
    .add("p50_us", pct(0.50))
    .add("p90_us", pct(0.90))
    .add("p99_us", pct(0.99))
    .add("max_us", v.back())
    .print();
}

// -- recovery ---------------------------------------------------------------------

std::atomic<long> reexecuted{0};

/// The recovery child: incarnation 0 holds every run in step 5 (the kill
/// comes while all are there); incarnation 1 counts steps 0-4 that run again.
int recovery_child(const options& o) {
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  runtime rt{cfg};
  int incarnation = o.incarnation;
  rt.register_workflow("ten", [incarnation](workflow_context& ctx,
                                            int steps) -> task<int> {
    int sum = 0;
    for (int i = 0; i < steps; ++i) {
      // In incarnation 0, step 5 fails and waits an hour for its retry:
      // in flight, not checkpointed, holding no thread, until the kill.
      auto body = [i, incarnation] {
        if (incarnation > 0 && i < 5)
          ++reexecuted;
        if (incarnation == 0 && i == 5)
          throw std::runtime_error("held until the kill");
        return i;
      };
      sum += co_await ctx.step("s" + std::to_string(i), body,
                               retry_policy{.max_attempts = 2,
                                            .initial_delay = 1h,
                                            .backoff = 1.0,
                                            .max_delay = 1h});
    }
    co_return sum;
  });
  rt.start();
  if (incarnation == 0) {
    for (int w = 0; w < o.workflows; ++w)
      rt.start_workflow<int>("ten", o.steps, {.id = "r" + std::to_string(w)});
    test::sql_client sql{db};
    while (count_rows(sql, "journal", "seq = 4") < o.workflows)
      std::this_thread::sleep_for(5ms);
    std::cout << "ALL_IN_STEP_5" << std::endl;
    std::this_thread::sleep_for(1h);
    return 1;
  }
  for (int w = 0; w < o.workflows; ++w)
    rt.retrieve_workflow<int>("r" + std::to_string(w)).get(300s);
  std::cout << "DONE " << reexecuted.load() << std::endl;
  return 0;
}

/// Runs the child, returns the pid; its stdout arrives on `out_fd`.
pid_t spawn_child(const options& o, const test::database& db, int incarnation,
                  int& out_fd) {
  int fds[2];
  if (pipe(fds) != 0)
    throw std::runtime_error("pipe");
  auto pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    auto w = std::to_string(o.workflows), s = std::to_string(o.steps),
         inc = std::to_string(incarnation);
    execl(o.self.c_str(), o.self.c_str(), "recovery-child", "--store",
          o.store.c_str(), "--url", db.url.c_str(), "--schema", db.schema.c_str(),
          "--workflows", w.c_str(), "--steps", s.c_str(), "--incarnation",
          inc.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  out_fd = fds[0];
  return pid;
}

std::string read_until(int fd, const std::string& word) {
  std::string buf;
  char chunk[4096];
  while (buf.find(word) == std::string::npos) {
    auto n = read(fd, chunk, sizeof chunk);
    if (n <= 0)
      throw std::runtime_error("child ended before printing " + word + ": " + buf);
    buf.append(chunk, static_cast<size_t>(n));
  }
  return buf.substr(buf.find(word));
}

void recovery(const options& o) {
  auto db = database_for(o);
  {
    // Create the schema up front so the child's poll finds the tables.
    runtime rt{runtime_config(db)};
    rt.start();
  }
  int out = -1;
  auto first = spawn_child(o, db, 0, out);
  read_until(out, "ALL_IN_STEP_5");
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  close(out);
  auto t0 = bench_clock::now();
  auto second = spawn_child(o, db, 1, out);
  auto line = read_until(out, "DONE");
  auto ms = seconds_since(t0) * 1000;
  int status = 0;
  waitpid(second, &status, 0);
  close(out);
  std::istringstream in{line.substr(5)};
  long again = -1;
  in >> again;
  test::sql_client sql{db};
  auto ok = count_rows(sql, "runs", "status = 'SUCCESS'");
  header(o)
    .add("workflows", o.workflows)
    .add("steps", o.steps)
    .add("recover_ms", ms)
    .add("reexecuted_checkpointed_steps", static_cast<double>(again))
    .add("success_runs", static_cast<double>(ok))
    .print();
}

// -- takeover ---------------------------------------------------------------------

std::mutex executed_mtx;
std::vector<std::pair<std::string, int>> executed; // by the live process

/// Set by the victim once every run is started: runs wait for it, so the
/// kill finds them mid-way however fast starts and steps are.
std::atomic<bool> takeover_go{false};

/// A run of the takeover scenario: steps of about a millisecond, so that
/// the kill finds runs mid-way.
task<int> slow_steps(workflow_context& ctx, int steps) {
  int sum = 0;
  for (int i = 0; i < steps; ++i)
    sum += co_await ctx.step("s" + std::to_string(i), [i] {
      while (!takeover_go)
        std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(1ms);
      return i;
    });
  co_return sum;
}

/// The victim: starts the runs (owned by its executor), prints STARTED,
/// runs until killed.
int takeover_child(const options& o) {
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  cfg.executor_id = "victim";
  runtime rt{cfg};
  rt.register_workflow("ten", slow_steps);
  rt.start();
  for (int w = 0; w < o.workflows; ++w)
    rt.start_workflow<int>("ten", o.steps, {.id = "t" + std::to_string(w)});
  takeover_go = true;
  std::cout << "STARTED" << std::endl;
  std::this_thread::sleep_for(1h);
  return 1;
}

/// A process running `o.workflows` x `o.steps` is SIGKILLed mid-run while
/// this one is live: how long until none of its runs is left to it
/// (`running_again_ms`), until every run is SUCCESS here (`takeover_ms`),
/// and how many steps checkpointed before the kill ran again.
void takeover(const options& o) {
  if (o.store != "pg")
    throw std::runtime_error("takeover needs --store pg (SQLite runs one "
                             "runtime per file)");
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  cfg.executor_id = "live";
  runtime live{cfg};
  live.register_workflow("ten", [](workflow_context& ctx, int steps) -> task<int> {
    int sum = 0;
    for (int i = 0; i < steps; ++i)
      sum += co_await ctx.step("s" + std::to_string(i), [&ctx, i] {
        {
          std::lock_guard guard{executed_mtx};
          executed.emplace_back(ctx.workflow_id(), i);
        }
        std::this_thread::sleep_for(1ms);
        return i;
      });
    co_return sum;
  });
  live.start();
  int out = -1;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0)
    throw std::runtime_error("pipe");
  auto pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    auto w = std::to_string(o.workflows), s = std::to_string(o.steps);
    execl(o.self.c_str(), o.self.c_str(), "takeover-child", "--store", "pg",
          "--url", db.url.c_str(), "--schema", db.schema.c_str(),
          "--workflows", w.c_str(), "--steps", s.c_str(), nullptr);
    _exit(127);
  }
  close(pipe_fds[1]);
  out = pipe_fds[0];
  read_until(out, "STARTED");
  test::sql_client sql{db};
  // Mid-run: a third of the steps checkpointed.
  auto third = static_cast<long>(o.workflows) * o.steps / 3;
  while (count_rows(sql, "journal") < third)
    std::this_thread::sleep_for(1ms);
  kill(pid, SIGKILL);
  auto killed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  auto t0 = bench_clock::now();
  waitpid(pid, nullptr, 0);
  close(out);
  auto unfinished = count_rows(sql, "runs", "status = 'PENDING'");
  // Running again: no PENDING run left with the dead executor.
  while (count_rows(sql, "runs",
                    "status = 'PENDING' AND executor = 'victim'")
         > 0)
    std::this_thread::sleep_for(1ms);
  auto claimed_ms = seconds_since(t0) * 1000;
  for (int w = 0; w < o.workflows; ++w)
    live.retrieve_workflow<int>("t" + std::to_string(w)).get(300s);
  auto ms = seconds_since(t0) * 1000;
  // A step the victim checkpointed (before the kill) that ran here again.
  std::set<std::pair<std::string, int>> before;
  for (auto& row : sql.exec("SELECT run_id, seq FROM " + sql.table("journal")
                            + " WHERE created_at < "
                            + std::to_string(killed_ms))
                     .rows)
    before.emplace(*row[0], std::stoi(*row[1]));
  long again = 0;
  {
    std::lock_guard guard{executed_mtx};
    for (auto& e : executed)
      again += before.count(e) > 0 ? 1 : 0;
  }
  header(o)
    .add("workflows", o.workflows)
    .add("steps", o.steps)
    .add("unfinished_at_kill", static_cast<double>(unfinished))
    .add("running_again_ms", claimed_ms)
    .add("takeover_ms", ms)
    .add("reexecuted_checkpointed_steps", static_cast<double>(again))
    .add("success_runs",
         static_cast<double>(count_rows(sql, "runs", "status = 'SUCCESS'")))
    .print();
}

} // namespace

// -- sleeping_memory ------------------------------------------------------------

/// Returns the bytes malloc has handed out and not taken back.
double heap_bytes() {
  return static_cast<double>(mallinfo2().uordblks);
}

/// Returns the threads of this process.
double thread_count() {
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0)
      return std::stod(line.substr(8));
  return 0;
}

task<int> sleep_an_hour(workflow_context& ctx) {
  co_await ctx.sleep(1h);
  co_return 0;
}

/// Starts `n` runs sleeping an hour from `clients` threads.
void start_sleepers(runtime& rt, int n) {
  auto clients = std::min(n, start_threads());
  std::vector<std::jthread> starters;
  for (int c = 0; c < clients; ++c)
    starters.emplace_back([&, c] {
      for (int w = c; w < n; w += clients)
        rt.start_workflow<int>("sleeper");
    });
}

/// Waits until `query` (a COUNT) reaches `n`.
void wait_for_count(test::sql_client& sql, const std::string& query, long n) {
  auto until = bench_clock::now() + 600s;
  while (std::stol(sql.scalar(query)) < n) {
    if (bench_clock::now() > until)
      throw std::runtime_error("timed out waiting for: " + query);
    std::this_thread::sleep_for(50ms);
  }
}

/// Heap bytes per run: `n` runs sleeping an hour, kept in memory or
/// passivated (`passivate_after` 0).
double bytes_per_sleeping_run(const options& o, bool passivated,
                              double& threads) {
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  cfg.passivate_after = passivated ? 0ms : 24h;
  runtime rt{cfg};
  rt.register_workflow("sleeper", sleep_an_hour);
  rt.start();
  test::sql_client sql{db};
  malloc_trim(0);
  auto before = heap_bytes();
  start_sleepers(rt, o.workflows);
  auto query = passivated
                 ? "SELECT COUNT(*) FROM " + sql.table("runs")
                     + " WHERE wake_at IS NOT NULL"
                 : "SELECT COUNT(*) FROM " + sql.table("journal")
                     + " WHERE kind = 'sleep'";
  wait_for_count(sql, query, o.workflows);
  std::this_thread::sleep_for(500ms); // the last acks and passivations land
  malloc_trim(0);
  auto after = heap_bytes();
  threads = thread_count();
  return (after - before) / o.workflows;
}

void sleeping_memory(const options& o) {
  double threads_in_memory = 0, threads_passivated = 0;
  auto in_memory = bytes_per_sleeping_run(o, false, threads_in_memory);
  auto passivated = bytes_per_sleeping_run(o, true, threads_passivated);
  header(o)
    .add("runs", o.workflows)
    .add("bytes_per_run_in_memory", in_memory)
    .add("bytes_per_run_passivated", passivated)
    .add("threads", std::max(threads_in_memory, threads_passivated))
    .print();
}

// -- timer_lateness ----------------------------------------------------------------

struct lateness_log {
  std::mutex mtx;
  std::vector<double> late_ms;
};

lateness_log lateness;

/// Sleeps until the time given (ms since the epoch), then notes how late
/// it woke (on the actor, right after the sleep).
task<int> wake_at(workflow_context& ctx, std::int64_t due_ms) {
  co_await ctx.sleep_until(
    std::chrono::system_clock::time_point{std::chrono::milliseconds{due_ms}});
  auto now = std::chrono::duration<double, std::milli>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  {
    std::lock_guard guard{lateness.mtx};
    lateness.late_ms.push_back(now - static_cast<double>(due_ms));
  }
  co_return 0;
}

void timer_lateness(const options& o) {
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  rt.register_workflow("wake_at", wake_at);
  rt.start();
  // Timers spread evenly over `window`, the first due `lead` after its
  // run starts: every sleep is recorded before it is due.
  auto window = std::chrono::milliseconds{o.steps * 1000};
  auto lead = 5s;
  auto clients = std::min(o.workflows, start_threads());
  auto t0 = std::chrono::system_clock::now() + lead;
  auto ms = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
             t.time_since_epoch())
      .count();
  };
  std::vector<std::vector<workflow_handle<int>>> handles(
    static_cast<size_t>(clients));
  {
    std::vector<std::jthread> starters;
    for (int c = 0; c < clients; ++c)
      starters.emplace_back([&, c] {
        for (int w = c; w < o.workflows; w += clients) {
          auto due = t0 + window * w / o.workflows;
          due = std::max(due, std::chrono::system_clock::now() + lead);
          handles[static_cast<size_t>(c)].push_back(
            rt.start_workflow<int>("wake_at", ms(due)));
        }
      });
  }
  for (auto& mine : handles)
    for (auto& h : mine)
      h.get(600s);
  auto& late = lateness.late_ms;
  std::sort(late.begin(), late.end());
  auto pct = [&](double p) {
    return late[std::min(late.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(late.size())))];
  };
  header(o)
    .add("timers", o.workflows)
    .add("window_s", static_cast<double>(o.steps))
    .add("p50_ms", pct(0.50))
    .add("p99_ms", pct(0.99))
    .add("max_ms", late.back())
    .print();
}

// -- object_throughput ---------------------------------------------------------------

struct tally {
  std::int64_t total = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(total));
  }
};

/// `o.workflows` calls of an exclusive "add" handler over `o.steps` keys by
/// `o.in_flight` callers, each waiting for its reply (`--mode async`:
/// `o.in_flight` calls kept in flight with `call_async`, each end starting
/// the next, as Restate's load generator does), after every key was
/// called once (untimed: `activation_s`). Keys drawn uniformly at random
/// (seed 42, as Restate's load generator), or in turn with
/// `BENCH_KEYS=round_robin` (then, with at least as many keys as callers,
/// no two calls in flight share a key).
/// calls/s against a COPY baseline run right before and after, reply
/// latency, what each call cost (db_counters.hpp), and whether every key's
/// total is exact.
void object_throughput(const options& o) {
  auto db = database_for(o);
  auto keys = std::max(1, o.steps);
  bool round_robin = std::getenv("BENCH_KEYS")
                     && std::string{std::getenv("BENCH_KEYS")} == "round_robin";
  std::vector<int> key_of(static_cast<size_t>(o.workflows));
  std::vector<std::int64_t> expected(static_cast<size_t>(keys), 1);
  std::mt19937 draw{42};
  std::uniform_int_distribution<int> any_key{0, keys - 1};
  for (int n = 0; n < o.workflows; ++n) {
    key_of[static_cast<size_t>(n)] = round_robin ? n % keys : any_key(draw);
    ++expected[static_cast<size_t>(key_of[static_cast<size_t>(n)])];
  }
  two_sided_baseline base;
  base.before = copy_baseline(db, baseline_rows());
  std::vector<std::vector<double>> latencies(static_cast<size_t>(o.in_flight));
  db_counters before, after;
  double secs = 0, activation_s = 0;
  bool exact = true;
  {
    runtime rt{runtime_config(db)};
    rt.register_object<tally>("tally").handler(
      "add",
      [](object_context<tally>& ctx, std::int64_t n) -> task<std::int64_t> {
        ctx.state().total += n;
        co_return ctx.state().total;
      });
    rt.start();
    auto callers = [&](int count, auto key, bool timed) {
      std::atomic<int> next{0};
      std::vector<std::jthread> threads;
      for (int c = 0; c < o.in_flight; ++c)
        threads.emplace_back([&, c] {
          auto& mine = latencies[static_cast<size_t>(c)];
          for (int n; (n = next.fetch_add(1)) < count;) {
            auto t = bench_clock::now();
            rt.call<std::int64_t>("tally", "k" + std::to_string(key(n)), "add",
                                  std::int64_t{1});
            if (timed)
              mine.push_back(std::chrono::duration<double, std::micro>(
                               bench_clock::now() - t)
                               .count());
          }
        });
    };
    auto async_calls = [&](int count, auto key, bool timed) {
      std::mutex mtx;
      std::condition_variable all_done;
      int ended = 0, failed = 0;
      std::atomic<int> next{0};
      std::vector<bench_clock::time_point> started(static_cast<size_t>(count));
      auto& mine = latencies[0]; // one callback thread appends
      std::function<void()> issue = [&] {
        auto n = next.fetch_add(1);
        if (n >= count)
          return;
        started[static_cast<size_t>(n)] = bench_clock::now();
        rt.call_async<std::int64_t>(
          "tally", "k" + std::to_string(key(n)), "add", std::int64_t{1},
          [&, n](call_result<std::int64_t> r) {
            bool ok = r.ok();
            if (timed)
              mine.push_back(std::chrono::duration<double, std::micro>(
                               bench_clock::now()
                               - started[static_cast<size_t>(n)])
                               .count());
            issue();
            std::lock_guard guard{mtx};
            failed += ok ? 0 : 1;
            // The waiting thread wakes once, at the last end: a load
            // generator that woke it per call spent the cores it measures.
            if (++ended == count)
              all_done.notify_one();
          });
      };
      for (int c = 0; c < o.in_flight; ++c)
        issue();
      std::unique_lock guard{mtx};
      all_done.wait(guard, [&] { return ended == count; });
      if (failed > 0)
        throw std::runtime_error(std::to_string(failed) + " calls failed");
    };
    bool async = o.mode == "async";
    if (!async && o.mode != "blocking")
      throw std::runtime_error("--mode is blocking or async");
    auto t0 = bench_clock::now();
    callers(keys, [](int n) { return n; }, false);
    activation_s = seconds_since(t0);
    before = read_counters(db, {"runs", "objects"});
    t0 = bench_clock::now();
    auto drawn = [&](int n) { return key_of[static_cast<size_t>(n)]; };
    if (async)
      async_calls(o.workflows, drawn, true);
    else
      callers(o.workflows, drawn, true);
    secs = seconds_since(t0);
  } // the runtime's connections close: their statistics are reported
  after = read_counters(db, {"runs", "objects"});
  {
    client reader{runtime_config(db)}; // after the counters: not counted
    for (int k = 0; k < keys; ++k) {
      auto state =
        reader.object_state<tally>("tally", "k" + std::to_string(k));
      if (!state || state->total != expected[static_cast<size_t>(k)])
        exact = false;
    }
  }
  base.after = copy_baseline(db, baseline_rows());
  std::vector<double> all;
  for (auto& l : latencies)
    all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0
                       : all[std::min(all.size() - 1,
                                      static_cast<size_t>(
                                        p * static_cast<double>(all.size())))];
  };
  auto rate = o.workflows / secs;
  auto j = header(o);
  j.add("calls", o.workflows)
    .add("keys", keys)
    .add("key_choice", round_robin ? "round_robin" : "random")
    .add("mode", o.mode)
    .add("callers", o.in_flight)
    .add("activation_s", activation_s)
    .add("seconds", secs)
    .add("calls_per_s", rate)
    .add("p50_us", pct(0.50))
    .add("p99_us", pct(0.99))
    .add("totals_ok", exact ? 1.0 : 0.0);
  base.add_to(j, rate);
  add_per(j, before, after, o.workflows, "call");
  j.print();
}

// -- saga_compensation -------------------------------------------------------------

/// `o.workflows` sagas of four steps, the last failing for good, all
/// started at once: sagas per second to COMPENSATED, and the time from each
/// failure (the failing step's body) to the saga fully compensated.
void saga_compensation(const options& o) {
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  std::mutex mtx;
  std::map<std::string, bench_clock::time_point> failed_at;
  std::vector<double> latencies;
  std::atomic<int> compensated{0};
  rt.register_workflow("saga4", [&](workflow_context& ctx) -> task<int> {
    auto id = ctx.workflow_id();
    co_return co_await sagas::run<int>(ctx, [&](sagas::saga& s) -> task<int> {
      for (int k = 1; k <= 4; ++k)
        co_await s.step(
          "s" + std::to_string(k),
          [&, k] {
            if (k == 4) {
              std::lock_guard guard{mtx};
              failed_at.emplace(id, bench_clock::now());
              throw terminal_error("the last step fails");
            }
            return k;
          },
          [](const int&) {});
      co_return 0;
    });
  });
  rt.start();
  std::vector<workflow_handle<int>> started;
  started.reserve(static_cast<size_t>(o.workflows));
  auto t0 = bench_clock::now();
  for (int n = 0; n < o.workflows; ++n) {
    started.push_back(rt.start_workflow<int>("saga4"));
    started.back().when_done([&](const workflow_handle<int>& h) {
      auto now = bench_clock::now();
      if (h.status() == run_status::compensated)
        ++compensated;
      std::lock_guard guard{mtx};
      if (auto i = failed_at.find(h.id()); i != failed_at.end())
        latencies.push_back(
          std::chrono::duration<double, std::micro>(now - i->second).count());
    });
  }
  for (auto& h : started) {
    try {
      h.get(std::chrono::minutes{5});
    } catch (const perdure::error&) {
    }
  }
  auto secs = seconds_since(t0);
  // The callbacks run on their own thread: wait for the last ones.
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard guard{mtx};
      if (latencies.size() >= started.size())
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  std::lock_guard guard{mtx};
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    return latencies.empty()
             ? 0.0
             : latencies[std::min(latencies.size() - 1,
                                  static_cast<size_t>(
                                    p * static_cast<double>(latencies.size())))];
  };
  auto j = header(o);
  j.add("sagas", o.workflows)
    .add("steps", 4)
    .add("seconds", secs)
    .add("sagas_per_s", o.workflows / secs)
    .add("compensated", compensated.load())
    .add("p50_us", pct(0.50))
    .add("p99_us", pct(0.99));
  j.print();
}

// -- object_memory -----------------------------------------------------------------

/// Heap bytes per idle object after one call each to `o.workflows` keys
/// (from `start_threads()` callers): kept in memory, or left (passivated).
double bytes_per_idle_object(const options& o, bool passivated) {
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  cfg.object_idle_timeout = passivated ? 50ms : 24h;
  runtime rt{cfg};
  rt.register_object<tally>("tally").handler(
    "add", [](object_context<tally>& ctx, std::int64_t n) -> task<std::int64_t> {
      ctx.state().total += n;
      co_return ctx.state().total;
    });
  rt.start();
  malloc_trim(0);
  auto before = heap_bytes();
  std::atomic<int> next{0};
  {
    std::vector<std::jthread> callers;
    for (int c = 0; c < start_threads() * 8; ++c)
      callers.emplace_back([&] {
        for (int n; (n = next.fetch_add(1)) < o.workflows;)
          rt.call<std::int64_t>("tally", "k" + std::to_string(n), "add",
                                std::int64_t{1});
      });
  }
  std::this_thread::sleep_for(passivated ? 2s : 500ms); // idle ones leave
  malloc_trim(0);
  auto after = heap_bytes();
  return (after - before) / o.workflows;
}

void object_memory(const options& o) {
  auto in_memory = bytes_per_idle_object(o, false);
  auto passivated = bytes_per_idle_object(o, true);
  header(o)
    .add("objects", o.workflows)
    .add("bytes_per_object_in_memory", in_memory)
    .add("bytes_per_object_passivated", passivated)
    .print();
}

// -- fork ---------------------------------------------------------------------------

/// A run with a `--workflows`-entry journal (written directly, in one
/// batch), forked whole from a client: the time of `client::fork`.
void fork_run(const options& o) {
  auto db = database_for(o);
  runtime rt{runtime_config(db)}; // registers nothing: the fork stays put
  rt.start();
  auto store = persistence::open_store(db.store_options());
  persistence::run_record r;
  r.id = "fork-source";
  r.name = "long";
  r.owner = {"bench", 1};
  store->create_run(r);
  persistence::write_batch batch;
  for (int i = 0; i < o.workflows; ++i) {
    persistence::append_write w;
    w.owner = r.owner;
    w.entry.run_id = r.id;
    w.entry.seq = i;
    w.entry.name = "step";
    w.entry.payload = persistence::encode(i);
    batch.appends.push_back(std::move(w));
  }
  store->write_batch(batch);
  auto t0 = bench_clock::now();
  rt.fork(r.id, {.id = "fork-copy"});
  auto ms = seconds_since(t0) * 1000;
  header(o)
    .add("journal_entries", o.workflows)
    .add("fork_ms", ms)
    .print();
}

/// `--workflows` runs that ended ERROR (stored so), resumed by filter
/// from a client: the time of `client::resume_matching`.
void resume_by_filter(const options& o) {
  auto db = database_for(o);
  runtime rt{runtime_config(db)}; // registers nothing: they stay put
  rt.start();
  auto store = persistence::open_store(db.store_options());
  for (int i = 0; i < o.workflows; ++i) {
    persistence::run_record r;
    r.id = "failed-" + std::to_string(i);
    r.name = "long";
    r.status = run_status::error;
    r.error = "the bug";
    store->create_run(r);
  }
  auto t0 = bench_clock::now();
  auto did = rt.resume_matching({.status = run_status::error, .limit = 1000});
  auto s = seconds_since(t0);
  header(o)
    .add("runs", static_cast<double>(did.done))
    .add("seconds", s)
    .print();
}

int main(int argc, char** argv) {
  try {
    auto o = parse(argc, argv);
    if (o.scenario == "baseline") {
      long rows = static_cast<long>(o.workflows) * o.steps;
      // As many journal-sized rows as step_throughput writes, by the
      // plainest batched insert there is (db_counters.hpp).
      auto rate = copy_baseline(database_for(o), rows);
      header(o).add("rows", static_cast<double>(rows)).add("rows_per_s", rate).print();
    } else if (o.scenario == "step_throughput") {
      step_throughput(o);
    } else if (o.scenario == "step_latency") {
      step_latency(o);
    } else if (o.scenario == "recovery") {
      recovery(o);
    } else if (o.scenario == "sleeping_memory") {
      sleeping_memory(o);
    } else if (o.scenario == "timer_lateness") {
      timer_lateness(o);
    } else if (o.scenario == "recovery-child") {
      return recovery_child(o);
    } else if (o.scenario == "step_throughput_sustained") {
      step_throughput_sustained(o);
    } else if (o.scenario == "queue_throughput") {
      queue_throughput(o);
    } else if (o.scenario == "queue_partitions") {
      queue_partitions(o);
    } else if (o.scenario == "queue_rate") {
      queue_rate(o);
    } else if (o.scenario == "queue_idle") {
      queue_idle(o);
    } else if (o.scenario == "saga_compensation") {
      saga_compensation(o);
    } else if (o.scenario == "object_memory") {
      object_memory(o);
    } else if (o.scenario == "object_throughput") {
      object_throughput(o);
    } else if (o.scenario == "resume_by_filter") {
      resume_by_filter(o);
    } else if (o.scenario == "operators") {
      operators(o);
#ifdef PERDURE_BENCH_OBSERVABILITY
    } else if (o.scenario == "observability_overhead") {
      observability_overhead(o);
#endif
    } else if (o.scenario == "schedule_lateness") {
      schedule_lateness(o);
    } else if (o.scenario == "retention") {
      retention(o);
    } else if (o.scenario == "fork") {
      fork_run(o);
    } else if (o.scenario == "takeover") {
      takeover(o);
    } else if (o.scenario == "takeover-child") {
      return takeover_child(o);
    } else {
      std::cerr << "unknown scenario " << o.scenario << "\n";
      return 2;
    }
  } catch (const std::exception& ex) {
    std::cerr << "perdure-bench: " << ex.what() << "\n";
    return 1;
  }
  return 0;
}
