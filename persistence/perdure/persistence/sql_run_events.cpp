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
                      std::string_view reason,
                      std::optional<std::int64_t> before) {
  static const sql_query q{
    "record_run_event",
    "INSERT INTO {s}run_events (run_id, at, seq, kind, detail, reason) "
    "SELECT $1::text, $2::bigint, COALESCE($6::bigint, (SELECT "
    "COALESCE(max(seq), -1) + 1 FROM {s}journal WHERE run_id = $1::text)), "
    "$3::text, $4::text, $5::text"};
  tx.run(q, {run_id, at_ms, kind, what, reason, or_null(before)});
}

} // namespace detail

std::vector<run_store::run_event>
sql_store::run_events(std::string_view run_id) {
  static const detail::sql_query q{
    "run_events",
    "SELECT at, seq, kind, detail, reason FROM {s}run_events WHERE run_id = "
    "$1 ORDER BY seq, at, kind"};
  std::vector<run_event> out;
  read([&](detail::sql_tx& tx) {
    out.clear();
    tx.run(q, {run_id}, [&](const detail::sql_row& r) {
      out.push_back({r.int64(0), static_cast<std::int32_t>(r.int64(1)),
                     r.text(2), r.text(3), r.text(4)});
    });
  });
  return out;
}

} // namespace perdure::persistence
