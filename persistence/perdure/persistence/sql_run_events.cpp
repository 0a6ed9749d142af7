// Run events: the operator's part of a run's history (run_store.hpp).

#include <string>
#include <vector>

#include "perdure/persistence/detail/sql/run_events.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

namespace detail {

void record_run_event(sql_tx& tx, std::string_view run_id, std::int64_t at_ms,
                      std::string_view kind, std::string_view what,
                      std::string_view reason) {
  static const sql_query q{
    "record_run_event",
    "INSERT INTO {s}run_events (run_id, at, kind, detail, reason) VALUES "
    "($1, $2, $3, $4, $5)"};
  tx.run(q, {run_id, at_ms, kind, what, reason});
}

} // namespace detail

std::vector<run_store::run_event>
sql_store::run_events(std::string_view run_id) {
  static const detail::sql_query q{
    "run_events",
    "SELECT at, kind, detail, reason FROM {s}run_events WHERE run_id = $1 "
    "ORDER BY at, kind"};
  std::vector<run_event> out;
  read([&](detail::sql_tx& tx) {
    out.clear();
    tx.run(q, {run_id}, [&](const detail::sql_row& r) {
      out.push_back({r.int64(0), r.text(1), r.text(2), r.text(3)});
    });
  });
  return out;
}

} // namespace perdure::persistence
