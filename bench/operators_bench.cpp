// The operators scenario: what the CLI does against a large store.
//   list_first_page_ms  `runs list --status ERROR`'s first page over
//                       `--workflows` runs (1 % of them ERROR)
//   bulk_cancel_s       `runs cancel` by filter of 100 000 PENDING runs
//                       (a tenth of `--workflows`), progress counted
//   show_ms             `runs show` (its document) of a 10 000-step run

#include "operators_bench.hpp"

#include <algorithm>

#include "perdure/cli/documents.hpp"
#include "perdure/perdure.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/persistence/store.hpp"
#include "support/test_support.hpp"

namespace perdure::bench {

namespace {

/// Inserts `n` runs named `name` with ids `<prefix><i>` in one statement:
/// every 100th ERROR (if `mixed`), the rest SUCCESS, or all PENDING and
/// unowned. Created one ms apart, ending at `end_ms`.
void insert_runs(test::sql_client& sql, const char* prefix, const char* name,
                 long n, bool pending, std::int64_t end_ms) {
  auto status = pending ? std::string{"'PENDING'"}
                        : std::string{"CASE WHEN g % 100 = 0 THEN 'ERROR' "
                                      "ELSE 'SUCCESS' END"};
  auto cols = "(id, name, status, inputs, error, executor, epoch, "
              "created_at, updated_at)";
  auto values = "'" + std::string{prefix} + "' || g, '" + name + "', " + status
                + ", " + (sql.dialect() == std::string{"sqlite"} ? "X''" : "''::bytea")
                + ", CASE WHEN g % 100 = 0 THEN 'the bug' END, '', 0, "
                + std::to_string(end_ms - n) + " + g, "
                + std::to_string(end_ms - n) + " + g";
  if (sql.dialect() == std::string{"sqlite"})
    sql.exec("INSERT INTO runs " + std::string{cols}
             + " WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM "
               "s WHERE g < " + std::to_string(n) + ") SELECT " + values
             + " FROM s");
  else
    sql.exec("INSERT INTO " + sql.table("runs") + " " + cols + " SELECT "
             + values + " FROM generate_series(1, " + std::to_string(n)
             + ") g");
}

template <class F>
double best_ms_of(int tries, F&& f) {
  double best = 1e18;
  for (int i = 0; i < tries; ++i) {
    auto t0 = bench_clock::now();
    f();
    best = std::min(best, seconds_since(t0) * 1000);
  }
  return best;
}

} // namespace

void operators(const options& o) {
  auto db = database_for(o);
  runtime rt{runtime_config(db)}; // registers nothing: the runs stay put
  rt.start();
  test::sql_client sql{db};
  auto now = test::wall_ms();
  long runs = o.workflows;
  long stuck = std::max<long>(1, runs / 10);
  insert_runs(sql, "done-", "report", runs - stuck, false, now - stuck - 10);
  insert_runs(sql, "stuck-", "stuck", stuck, true, now);
  sql.exec(db.postgres ? "ANALYZE " + sql.table("runs") : "ANALYZE");
  client ops{db.runtime_config("bench-cli")};
  // The first page, as `runs list --status ERROR` asks for it: the best of
  // five (a first read of cold pages is the disk's, not the query's).
  auto list_ms = best_ms_of(5, [&] {
    auto page = ops.list_runs({.status = run_status::error, .limit = 20});
    if (page.runs.size() != 20)
      throw std::runtime_error("expected a full page of ERROR runs");
  });
  auto unfiltered_ms = best_ms_of(5, [&] { (void)ops.list_runs({.limit = 20}); });
  // A 10 000-step run, shown.
  auto store = persistence::open_store(db.store_options());
  persistence::run_record r;
  r.id = "long-run";
  r.name = "long";
  r.owner = {"bench", 1};
  store->create_run(r);
  persistence::write_batch batch;
  for (int i = 0; i < 10'000; ++i) {
    persistence::append_write w;
    w.owner = r.owner;
    w.entry.run_id = r.id;
    w.entry.seq = i;
    w.entry.name = "step-" + std::to_string(i);
    w.entry.payload = persistence::encode(i);
    batch.appends.push_back(std::move(w));
  }
  store->write_batch(batch);
  std::size_t shown = 0;
  auto show_ms = best_ms_of(3, [&] {
    shown = cli::run_document(ops, "long-run")["journal"].size();
  });
  // Bulk cancel by filter, pages of 500 as the CLI walks them.
  std::int64_t progressed = 0;
  auto t0 = bench_clock::now();
  auto did = ops.cancel_matching(
    {.status = run_status::pending, .name = "stuck", .limit = 500}, false,
    [&](std::int64_t n) { progressed = n; });
  auto cancel_s = seconds_since(t0);
  if (did.done != stuck || progressed != stuck)
    throw std::runtime_error("bulk cancel did " + std::to_string(did.done)
                             + " of " + std::to_string(stuck));
  header(o)
    .add("runs", static_cast<double>(runs))
    .add("list_first_page_ms", list_ms)
    .add("list_unfiltered_first_page_ms", unfiltered_ms)
    .add("cancelled", static_cast<double>(did.done))
    .add("bulk_cancel_s", cancel_s)
    .add("journal_entries", static_cast<double>(shown))
    .add("show_ms", show_ms)
    .print();
}

} // namespace perdure::bench
