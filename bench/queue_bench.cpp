// The queue scenarios of perdure-bench: dispatch throughput, the rate
// limit as achieved, and what an idle process costs the database.

#include "queue_scenarios.hpp"

#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "perdure/perdure.hpp"
#include "perdure/queues/queue.hpp"

namespace perdure::bench {

namespace {

/// Enqueues `n` items of `workflow` (input: their number) in queue `queue`
/// in one transaction of the application's own: they appear at once. Item
/// i goes under partition `partition(i)` if given. Returns their ids.
std::vector<std::string>
enqueue_all(const test::database& db, const std::string& queue,
            const std::string& workflow, int n,
            const std::function<std::string(int)>& partition = {}) {
  std::vector<std::string> ids;
  test::in_one_transaction(db, [&](sql_session& s) {
    for (int i = 0; i < n; ++i)
      ids.push_back(queues::enqueue(
        s, queue, workflow, i,
        {.partition_key = partition ? partition(i) : std::string{}}));
  });
  return ids;
}

/// Waits until `done` reaches `n`.
void wait_for(const std::atomic<int>& done, int n) {
  while (done.load() < n)
    std::this_thread::sleep_for(1ms);
}

} // namespace

void queue_throughput(const options& o) {
  auto items = o.workflows > 0 ? o.workflows : 5000;
  auto workers = o.in_flight > 0 && o.in_flight != 256 ? o.in_flight : 10;
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  std::atomic<int> done{0};
  rt.register_workflow("trivial", [&](workflow_context&, int n) -> task<int> {
    ++done;
    co_return n;
  });
  queues::register_queue(rt, "bench", {.worker_concurrency = workers});
  rt.start();
  auto t0 = bench_clock::now();
  auto ids = enqueue_all(db, "bench", "trivial", items);
  auto enqueued = seconds_since(t0);
  auto t1 = bench_clock::now();
  wait_for(done, items);
  // Then until the last ends committed (the handle of the last item
  // enqueued returns once its end is durable; the others' are by then or
  // within a batch).
  rt.retrieve_workflow<int>(ids.back()).get();
  test::sql_client sql{db};
  while (std::stol(sql.scalar("SELECT COUNT(*) FROM " + sql.table("runs")
                              + " WHERE status = 'SUCCESS'"))
         < items)
    std::this_thread::sleep_for(1ms);
  auto secs = seconds_since(t1);
  header(o)
    .add("items", items)
    .add("workers", workers)
    .add("enqueue_seconds", enqueued)
    .add("seconds", secs)
    .add("items_per_s", items / secs)
    .print();
}

void queue_partitions(const options& o) {
  auto items = o.workflows > 0 ? o.workflows : 20000;
  auto partitions = o.steps > 0 ? o.steps : 1000;
  auto workers = o.in_flight > 0 && o.in_flight != 256 ? o.in_flight : 16;
  auto busy = o.mode == "busy";
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  std::atomic<int> done{0};
  rt.register_workflow("trivial", [&](workflow_context&, int n) -> task<int> {
    ++done;
    co_return n;
  });
  queues::register_queue(rt, "parts", {.worker_concurrency = workers,
                                       .partition_concurrency = 1});
  // The items of partition i % partitions, in turn; with --mode busy the
  // first half all in one partition (they fill the head of the queue).
  { client migrate{runtime_config(db)}; } // the schema, before the items
  auto ids = enqueue_all(db, "parts", "trivial", items, [&](int i) {
    if (busy && i < items / 2)
      return std::string{"busy"};
    return "p" + std::to_string(i % partitions);
  });
  auto t0 = bench_clock::now();
  rt.start();
  // Every item but the busy partition's (which runs one at a time).
  auto others = busy ? items - items / 2 : items;
  while (done.load() < others)
    std::this_thread::sleep_for(1ms);
  auto secs = seconds_since(t0);
  header(o)
    .add("items", others)
    .add("partitions", partitions)
    .add("workers", workers)
    .add("busy_partition_items", busy ? items / 2 : 0)
    .add("seconds", secs)
    .add("items_per_s", others / secs)
    .print();
}

void queue_rate(const options& o) {
  auto items = o.workflows > 0 ? o.workflows : 1000;
  auto limit = o.steps > 0 ? o.steps : 100;
  auto db = database_for(o);
  runtime rt{runtime_config(db)};
  std::mutex mtx;
  std::vector<std::int64_t> starts;
  rt.register_workflow("item", [&](workflow_context&, int n) -> task<int> {
    {
      std::lock_guard guard{mtx};
      starts.push_back(test::wall_ms());
    }
    co_return n;
  });
  queues::register_queue(rt, "rated",
                         {.worker_concurrency = 16,
                          .rate = queues::rate_limit{limit, 1000ms}});
  rt.start();
  enqueue_all(db, "rated", "item", items);
  for (;;) {
    {
      std::lock_guard guard{mtx};
      if (static_cast<int>(starts.size()) >= items)
        break;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::lock_guard guard{mtx};
  std::sort(starts.begin(), starts.end());
  long most = 0;
  for (std::size_t i = 0; i < starts.size(); ++i)
    most = std::max<long>(most, std::upper_bound(starts.begin(), starts.end(),
                                                 starts[i] + 999)
                                  - (starts.begin()
                                     + static_cast<std::ptrdiff_t>(i)));
  // The first `limit` go at once; the rest show the rate held.
  auto span = static_cast<double>(starts.back() - starts.front()) / 1000.0;
  header(o)
    .add("items", items)
    .add("limit_per_s", limit)
    .add("achieved_per_s", (items - limit) / std::max(span, 0.001))
    .add("max_in_any_1s_window", static_cast<double>(most))
    .print();
}

void queue_idle(const options& o) {
  auto seconds = o.steps > 0 ? o.steps : 10;
  auto db = database_for(o);
  if (!db.postgres)
    throw std::runtime_error("queue_idle counts statements on PostgreSQL");
  runtime rt{runtime_config(db)};
  rt.register_workflow("item", [](workflow_context&, int n) -> task<int> {
    co_return n;
  });
  for (int q = 0; q < 5; ++q)
    queues::register_queue(rt, "idle" + std::to_string(q));
  rt.start();
  std::this_thread::sleep_for(2s); // start-up statements are over
  pqxx::connection conn{db.url};
  pqxx::nontransaction w{conn};
  // pg_stat_statements (the bench's cluster preloads it) counts every
  // statement, BEGIN and COMMIT included; without it, transactions.
  bool statements = false;
  try {
    w.exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    w.exec("SELECT pg_stat_statements_reset()");
    statements = true;
  } catch (const std::exception&) {
  }
  auto count = [&](const char* filter) {
    if (statements)
      return w.exec(std::string{"SELECT COALESCE(sum(calls), 0) FROM "
                                "pg_stat_statements WHERE dbid = (SELECT oid "
                                "FROM pg_database WHERE datname = "
                                "current_database()) AND query NOT LIKE "
                                "'%pg_stat%' AND query NOT LIKE "
                                "'%pg_database%'"}
                    + filter)[0][0]
        .as<double>();
    return w.exec("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                  "WHERE datname = current_database()")[0][0]
      .as<double>();
  };
  w.exec("SELECT pg_stat_clear_snapshot()");
  auto before = count("");
  auto queue_before = statements ? count(" AND query LIKE '%queue%'") : 0.0;
  std::this_thread::sleep_for(std::chrono::seconds{seconds});
  w.exec("SELECT pg_stat_clear_snapshot()");
  auto total = count("") - before;
  auto queue = statements ? count(" AND query LIKE '%queue%'") - queue_before
                          : 0.0;
  header(o)
    .add("queues", 5)
    .add("seconds", seconds)
    .add("counted", statements ? "statements" : "transactions")
    .add("statements_per_s", total / seconds)
    .add("queue_statements_per_s", queue / seconds)
    .print();
}

} // namespace perdure::bench
