// Forks: a new run from another's journal up to a point (run_store.hpp).

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/detail/sql/run_events.hpp"
#include "perdure/persistence/detail/sql/sql_tx.hpp"
#include "perdure/persistence/notice.hpp"
#include "perdure/persistence/sql_store.hpp"

namespace perdure::persistence {

using detail::sql_dialect;
using detail::sql_query;
using detail::sql_row;
using detail::sql_tx;

namespace {

/// What a fork reads of the source's journal: every entry but payloads
/// (a saga phase's and a patch's excepted), in order.
struct entry_head {
  std::int32_t seq = 0;
  std::string kind, name, small_payload;
  std::int64_t outcome = 0;
};

/// The index to fork from, or why not (empty `why`: fine).
struct cut {
  std::int32_t from = 0;
  std::string why;
};

/// The source's journal changed between reading and copying it.
struct journal_changed {};

/// A retry's jump (a queue item's new attempt, a resume): the attempt
/// marker at `marker` says the indexes from `from` on were forgotten
/// (but committed transactions, kept and taken by name); the new attempt
/// records after the marker.
struct jump {
  std::int32_t from = 0, marker = 0;
};

std::vector<jump> jumps_of(const std::vector<entry_head>& journal) {
  std::vector<jump> out;
  for (auto& e : journal)
    if (e.seq >= 0 && e.kind == "phase" && e.name == "attempt")
      out.push_back({std::atoi(e.small_payload.c_str()), e.seq});
  return out;
}

cut choose_cut(const run_store::fork_request& req,
               const std::vector<entry_head>& journal) {
  std::int32_t end = 0;
  for (auto& e : journal)
    if (e.seq >= 0)
      end = e.seq + 1;
  auto jumps = jumps_of(journal);
  auto forgotten = [&](std::int32_t seq) {
    return std::any_of(jumps.begin(), jumps.end(), [&](const jump& j) {
      return seq >= j.from && seq < j.marker;
    });
  };
  // Only what the run's last attempt replays: a transaction a retry kept
  // is taken by name, not where it sits.
  auto op = [&](const entry_head& e) {
    return e.seq >= 0 && (e.kind == "step" || e.kind == "transaction")
           && !forgotten(e.seq);
  };
  if (req.from_step) {
    if (*req.from_step < 0 || *req.from_step > end)
      return {0, "index " + std::to_string(*req.from_step)
                   + " is outside its journal (indexes 0 to "
                   + std::to_string(end) + "): see its history"};
    for (auto& j : jumps)
      if (*req.from_step > j.from && *req.from_step <= j.marker)
        return {0, "indexes " + std::to_string(j.from) + " to "
                     + std::to_string(j.marker - 1)
                     + " were forgotten by a retry or resume (its marker is "
                       "at index "
                     + std::to_string(j.marker) + "): fork from index "
                     + std::to_string(j.from) + " or before, or after "
                     + std::to_string(j.marker)};
    return {*req.from_step, {}};
  }
  if (req.from_step_name) {
    for (auto& e : journal)
      if (op(e) && e.name == *req.from_step_name)
        return {e.seq, {}};
    return {0, "it recorded no step named '" + *req.from_step_name
                 + "': see its history"};
  }
  if (req.from_last_failure) {
    std::optional<std::int32_t> last;
    for (auto& e : journal)
      if (op(e) && e.outcome != 0)
        last = e.seq;
    if (!last)
      return {0, "it recorded no failed step: fork from an index or a step "
                 "name"};
    return {*last, {}};
  }
  return {end, {}};
}

/// Why the journal cannot be cut at `from`, if it cannot.
std::string cut_refusal(const std::vector<entry_head>& journal,
                        std::int32_t from) {
  // An awakeable, child or call created before the cut whose outcome is
  // not: the fork would wait for what is delivered to the source (or
  // started by it). Each wait names what it waited for (an awakeable's id,
  // `child:` and a child's or call's id); a wait for several (a select)
  // closes none, which only refuses more.
  std::map<std::string, std::int32_t> open;
  for (auto& e : journal) {
    if (e.seq < 0 || e.seq >= from)
      continue;
    if (e.kind == "phase" && e.name == "saga"
        && e.small_payload == "COMPENSATING")
      return "index " + std::to_string(from)
             + " is inside its saga's compensation, which began at index "
             + std::to_string(e.seq) + ": fork from there or before";
    if (e.kind == "awakeable")
      open.emplace(e.name, e.seq);
    else if (e.kind == "child")
      open.emplace("child:" + e.name, e.seq);
    else if (e.kind == "await")
      open.erase(e.name);
  }
  if (!open.empty()) {
    auto first = from;
    for (auto& [name, seq] : open)
      first = std::min(first, seq);
    return "the operation at index " + std::to_string(first)
           + " (an awakeable, child or call) has no outcome before index "
           + std::to_string(from) + " (it would go to the source): fork "
           + "from index " + std::to_string(first) + " or before, or after "
           + "its outcome";
  }
  return {};
}

/// One try of `fork_run` in `tx`; throws `journal_changed` if the source
/// wrote meanwhile.
run_store::fork_outcome fork_in(sql_tx& tx,
                                const run_store::fork_request& req) {
  using fork_outcome = run_store::fork_outcome;
  // PostgreSQL: the source's row held (shared) while its journal is
  // copied: retention cannot collect it meanwhile.
  static const sql_query source{
    "fork_source",
    "SELECT CASE WHEN object_type IS NOT NULL THEN 1 WHEN collected_at IS "
    "NOT NULL THEN 2 ELSE 0 END FROM {s}runs WHERE id = $1"};
  static const sql_query source_pg{
    "fork_source_held",
    "SELECT CASE WHEN object_type IS NOT NULL THEN 1 WHEN collected_at IS "
    "NOT NULL THEN 2 ELSE 0 END FROM {s}runs WHERE id = $1 FOR SHARE"};
  static const sql_query heads{
    "fork_heads",
    "SELECT seq, kind, name, outcome, CASE WHEN kind IN ('phase', 'patch') "
    "THEN payload END FROM {s}journal WHERE run_id = $1 ORDER BY seq"};
  static const sql_query create{
    "fork_create",
    "INSERT INTO {s}runs (id, name, status, inputs, executor, epoch, "
    "app_version, created_at, updated_at, saga_phase) SELECT $2, name, "
    "'PENDING', inputs, '', 0, COALESCE($3, app_version), $4, $4, $5 FROM "
    "{s}runs WHERE id = $1 ON CONFLICT (id) DO NOTHING"};
  // Names derived from the run's id (children, calls, awakeables and the
  // waits for them) are derived from the fork's, as its replay derives
  // them (as an undo run's copy does).
  static const sql_query copy{
    "fork_copy",
    "INSERT INTO {s}journal (run_id, seq, kind, name, outcome, payload, "
    "error, created_at) SELECT $2, seq, kind, "
      + detail::undo_entry_name("$1::text", "$2::text")
      + ", outcome, payload, error, created_at FROM {s}journal WHERE run_id "
        "= $1 AND seq >= $3 AND seq < $4"};
  // The events it published before the cut (`set_event` is an operation:
  // replayed, not run again, so its row is the copy's): each key's last.
  static const sql_query events{
    "fork_events",
    "INSERT INTO {s}events (run_id, key, value, updated_at) SELECT $2::text, "
    "j.name, j.payload, j.created_at FROM {s}journal j WHERE j.run_id = "
    "$1::text AND j.kind = 'event' AND j.outcome = 0 AND j.seq >= 0 AND "
    "j.seq < $3 AND NOT EXISTS (SELECT 1 FROM {s}journal k WHERE k.run_id = "
    "$1::text AND k.kind = 'event' AND k.outcome = 0 AND k.name = j.name AND "
    "k.seq > j.seq AND k.seq < $3)"};
  fork_outcome out;
  auto invocation = tx.first(tx.dialect() == sql_dialect::postgresql
                               ? source_pg
                               : source,
                             {std::string_view{req.source_id}},
                             [](const sql_row& r) { return r.int64(0); });
  if (!invocation)
    return out;
  out.what = fork_outcome::result::refused;
  if (*invocation == 1) {
    out.why = "it is an object invocation: call the object again";
    return out;
  }
  if (*invocation == 2) {
    out.why = "retention collected it (its journal is gone): start the "
              "workflow anew";
    return out;
  }
  std::vector<entry_head> journal;
  tx.run(heads, {std::string_view{req.source_id}}, [&](const sql_row& r) {
    journal.push_back({static_cast<std::int32_t>(r.int64(0)), r.text(1),
                       r.text(2), r.is_null(4) ? std::string{} : r.bytes(4),
                       r.int64(3)});
  });
  auto at = choose_cut(req, journal);
  if (at.why.empty())
    at.why = cut_refusal(journal, at.from);
  if (!at.why.empty()) {
    out.why = std::move(at.why);
    return out;
  }
  // The saga phase at the cut, and the patches taken before it (taken
  // in order, so the markers to copy are -2 down to the lowest).
  std::optional<std::string> phase;
  std::int32_t lowest = 0;
  for (auto& e : journal) {
    if (e.seq >= 0 && e.seq < at.from && e.kind == "phase"
        && e.name == "saga")
      phase = e.small_payload;
    if (e.kind == "patch" && std::atoi(e.small_payload.c_str()) < at.from)
      lowest = std::min(lowest, e.seq);
  }
  std::optional<std::string> version = req.app_version;
  if (tx.run(create, {std::string_view{req.source_id},
                      std::string_view{req.new_id}, detail::or_null(version),
                      req.at_ms, detail::or_null(phase)})
      != 1) {
    out.what = fork_outcome::result::id_taken;
    return out;
  }
  out.copied = tx.run(copy, {std::string_view{req.source_id},
                             std::string_view{req.new_id}, lowest, at.from});
  // The copy reads the journal again (a statement of its own on
  // PostgreSQL): rows committed since `heads` (parallel operations of a
  // running source) would be copied unchecked. Then try again.
  auto read = std::count_if(journal.begin(), journal.end(), [&](auto& e) {
    return e.seq >= lowest && e.seq < at.from;
  });
  if (out.copied != read)
    throw journal_changed{};
  tx.run(events, {std::string_view{req.source_id},
                  std::string_view{req.new_id}, at.from});
  out.from = at.from;
  out.what = fork_outcome::result::forked;
  auto before = " before index " + std::to_string(at.from) + " ("
                + std::to_string(out.copied) + " journal entries copied)";
  detail::record_run_event(tx, req.new_id, req.at_ms, "fork",
                           "forked from '" + req.source_id + "'" + before,
                           req.reason, at.from);
  detail::record_run_event(tx, req.source_id, req.at_ms, "forked",
                           "forked as '" + req.new_id + "'" + before,
                           req.reason);
  tx.notify(notice::created(req.new_id).encode());
  return out;
}

} // namespace

run_store::fork_outcome sql_store::fork_run(const fork_request& req) {
  for (int attempt = 0;; ++attempt) {
    try {
      fork_outcome out;
      write([&](sql_tx& tx) { out = fork_in(tx, req); });
      return out;
    } catch (const journal_changed&) {
      if (attempt == 2)
        return {fork_outcome::result::refused,
                "its journal kept changing while it was copied (it runs): "
                "fork it again, or once it waits or has ended"};
    }
  }
}

} // namespace perdure::persistence
