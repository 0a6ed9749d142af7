#pragma once

// What the PostgreSQL store's files share: its connection type, its retry
// loop, the batch's creation arrays, and the SQL text builders and row
// readers its statements use.

#include <pqxx/pqxx>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/retry.hpp"
#include "perdure/persistence/detail/sql/pg_sql.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"
#include "perdure/persistence/postgres_store.hpp"

namespace perdure::persistence {

namespace detail::pg {

using detail::holds_lease;
using detail::qualified_run_columns;
using detail::read_entry;
using detail::read_run;
using detail::run_column_count;
using detail::run_columns;

inline detail::failure_kind classify(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const pqxx::broken_connection&) {
    return detail::failure_kind::reconnect;
  } catch (const pqxx::in_doubt_error&) {
    // Callers make their writes idempotent under the fence, so re-running
    // after re-checking on a fresh connection is safe.
    return detail::failure_kind::reconnect;
  } catch (const pqxx::transaction_rollback&) {
    return detail::failure_kind::retry; // serialization failure, deadlock
  } catch (const pqxx::sql_error& ex) {
    auto& state = ex.sqlstate();
    // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
    // 08xxx connection exceptions.
    if (state.rfind("57P0", 0) == 0 || state.rfind("08", 0) == 0)
      return detail::failure_kind::reconnect;
  } catch (...) {
  }
  return detail::failure_kind::permanent;
}


/// Fills `out`'s creation flags: for each of `runs`, whether its id is in
/// `inserted`, whether it was stored ENQUEUED though asked PENDING, and
/// its inbox place.
inline void creation_flags(const std::vector<run_record>& runs,
                    std::unordered_map<std::string, inserted_run>& inserted,
                    batch_result& out) {
  // A re-sent batch (in-doubt commit) finds its own runs: not "inserted"
  // by this call, which callers resolve by reading the run.
  out.created.reserve(runs.size());
  out.enqueued.reserve(runs.size());
  out.inbox_seqs.reserve(runs.size());
  for (auto& run : runs) {
    auto i = inserted.find(run.id);
    auto found = i != inserted.end();
    out.created.push_back(found);
    out.enqueued.push_back(found && i->second.enqueued
                           && run.status == run_status::pending);
    out.inbox_seqs.push_back(found ? i->second.inbox_seq : 0);
    if (found)
      inserted.erase(i);
  }
}

/// Reads a created run's tag row value, `<inbox_seq>:<id>`.
inline std::pair<std::string, std::int64_t> read_created(const std::string& value) {
  auto colon = value.find(':');
  return {value.substr(colon + 1), std::stoll(value.substr(0, colon))};
}


inline std::string bytes(const pqxx::field& f) {
  return pqxx::binarystring{f}.str();
}




/// Returns the UPDATE that records final statuses, fenced, its seven array
/// parameters numbered from `first`. Runs are found by primary key
/// (`= ANY`): a join alone lets the planner scan the whole runs table.
inline std::string complete_sql(const std::string& s, int first) {
  auto p = [&](int i, const char* type) {
    return "$" + std::to_string(first + i) + "::" + type + "[]";
  };
  return "UPDATE " + s
         + "runs r SET status = u.status, output = decode(u.output, 'hex'), "
           "error = u.error, updated_at = u.at FROM unnest("
         + p(0, "text") + ", " + p(1, "text") + ", " + p(2, "bigint") + ", "
         + p(3, "text") + ", " + p(4, "text") + ", " + p(5, "text") + ", "
         + p(6, "bigint")
         + ") AS u(id, executor, epoch, status, output, error, at) WHERE r.id "
           "= ANY("
         + p(0, "text")
         + ") AND r.id = u.id AND r.executor = u.executor AND r.epoch = "
           "u.epoch AND (r.status = 'PENDING' OR r.status = u.status) AND "
           "r.collected_at IS NULL RETURNING r.id, r.parent_id, u.at";
}

/// Returns how a batch's fence names a run it let through: `<epoch>:<id>`.
inline std::string owned_key(std::int64_t epoch, const std::string& id) {
  return std::to_string(epoch) + ":" + id;
}

/// Returns the INSERT of many runs (thirteen array parameters numbered from
/// `first`): new ids inserted, taken ones left alone; the inserted ids come
/// back.
inline std::string create_runs_sql(const std::string& s, int first) {
  auto p = [&](int i, const char* type) {
    return "$" + std::to_string(first + i) + "::" + type + "[]";
  };
  // An invocation takes the next inbox number in the batch's order. One to
  // hand to its key's actor (PENDING under the key's epoch) is stored
  // ENQUEUED if older calls of the key wait that the actor has not taken:
  // it follows them through the inbox (per-key order across processes).
  // Older calls of the same batch count too (`before_*`: the statement
  // cannot see its own rows): one stored ENQUEUED, or for another holder,
  // is followed, never overtaken.
  auto owner = std::string{"u.executor || ' ' || u.epoch::text"};
  auto before = std::string{" OVER (PARTITION BY u.otype, u.okey ORDER BY "
                            "u.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 "
                            "PRECEDING)"};
  return "INSERT INTO " + s
         + "runs (id, name, status, inputs, executor, epoch, app_version, "
           "created_at, updated_at, parent_id, deadline, object_type, "
           "object_key, traceparent, inbox_seq) SELECT i.id, i.name, CASE "
           "WHEN i.otype IS NOT NULL AND i.status = 'PENDING' AND "
           "(COALESCE(i.before_enqueued, false) OR i.before_lo <> i.owner OR "
           "i.before_hi <> i.owner OR EXISTS (SELECT 1 FROM "
         + s
         + "runs h WHERE h.object_type = i.otype AND h.object_key = i.okey "
           "AND h.status IN ('ENQUEUED', 'PENDING') AND (h.status = "
           "'ENQUEUED' OR h.executor <> i.executor OR h.epoch <> i.epoch))) "
           "THEN 'ENQUEUED' ELSE i.status END, "
           "decode(i.inputs, 'hex'), i.executor, i.epoch, i.app_version, "
           "i.created_at, i.created_at, i.parent, i.deadline, i.otype, i.okey, "
           "i.tp, CASE WHEN i.otype IS NULL THEN NULL ELSE nextval('"
         + s + "inbox_seq') END FROM (SELECT u.*, " + owner
         + " AS owner, bool_or(u.status <> 'PENDING')" + before
         + " AS before_enqueued, min(" + owner + ")" + before
         + " AS before_lo, max(" + owner + ")" + before
         + " AS before_hi FROM unnest("
         + p(0, "text") + ", " + p(1, "text") + ", " + p(2, "text") + ", "
         + p(3, "text") + ", " + p(4, "text") + ", " + p(5, "bigint") + ", "
         + p(6, "text") + ", " + p(7, "bigint") + ", " + p(8, "text") + ", "
         + p(9, "bigint") + ", " + p(10, "text") + ", " + p(11, "text")
         + ", " + p(12, "text")
         + ") WITH ORDINALITY AS u(id, name, status, inputs, executor, epoch, "
           "app_version, created_at, parent, deadline, otype, okey, tp, ord)) "
           "i ORDER BY i.ord ON CONFLICT (id) DO "
           "NOTHING RETURNING id, status, COALESCE(inbox_seq, 0) AS seq";
}

/// Adds `c` to the seven arrays a completion is written from.
inline void add_completion(const completion_write& c, detail::pg_array& ids,
                    detail::pg_array& execs, detail::pg_array& epochs,
                    detail::pg_array& statuses, detail::pg_array& outputs,
                    detail::pg_array& errors, detail::pg_array& ats) {
  ids.add(c.run_id);
  execs.add(c.owner.executor);
  epochs.add(c.owner.epoch);
  statuses.add(to_string(c.status));
  outputs.add_opt(c.output ? std::optional{detail::to_hex(*c.output)}
                           : std::nullopt);
  errors.add_opt(c.error);
  ats.add(c.at_ms);
}

using detail::claimable;



/// Returns the CTE that marks the passivated parents of the runs in CTE
/// `completed` as delivered to (a parent in memory is woken in-process and
/// is not locked here: its appends may be in another batch).
inline std::string wake_parents_sql(const std::string& s) {
  return "woken AS (UPDATE " + s
         + "runs p SET wake_at = 0 FROM completed c WHERE p.id = c.parent_id "
           "AND p.wake_at > c.at AND p.id NOT IN (SELECT id FROM completed))";
}


/// Returns whether `owner` holds run `run_id` (and locks its row FOR SHARE
/// until `w` ends, so no takeover commits in between).
inline bool owns(pqxx::transaction_base& w, const fence& owner,
          const std::string& run_id, std::int64_t lease) {
  detail::pg_array ids, execs, epochs;
  ids.add(run_id);
  execs.add(owner.executor);
  epochs.add(owner.epoch);
  return !w.exec_prepared("fence_check", ids.str(), execs.str(), epochs.str(),
                          lease)
            .empty();
}


/// Fills `result.recorded` if some owned append of `batch` met an index
/// holding an outcome (fewer than the owned appends were inserted).
inline void read_recorded(pqxx::transaction_base& w,
                   const persistence::write_batch& batch,
                   std::uint64_t appended, batch_result& result) {
  std::size_t owned = 0;
  for (bool ok : result.appends)
    owned += ok ? 1 : 0;
  if (appended == owned)
    return; // every owned append inserted: nothing stood in the way
  // Some index held an outcome already. Whatever is stored now stands;
  // report it for every owned append (rare: in-doubt writes sent again, or
  // two copies of a run).
  detail::pg_array r_ids, r_seqs;
  for (std::size_t i = 0; i < batch.appends.size(); ++i)
    if (result.appends[i]) {
      r_ids.add(batch.appends[i].entry.run_id);
      r_seqs.add(batch.appends[i].entry.seq);
    }
  std::map<std::pair<std::string, std::int32_t>, journal_entry> stored;
  for (const auto& row :
       w.exec_prepared("get_entries", r_ids.str(), r_seqs.str())) {
    auto e = read_entry(row);
    auto key = std::make_pair(e.run_id, e.seq);
    stored.emplace(std::move(key), std::move(e));
  }
  result.recorded.resize(batch.appends.size());
  for (std::size_t i = 0; i < batch.appends.size(); ++i) {
    auto& e = batch.appends[i].entry;
    auto found = stored.find({e.run_id, e.seq});
    if (result.appends[i] && found != stored.end())
      result.recorded[i] = found->second;
  }
}



/// Returns the first key of this schema's executor locks: a hash of the
/// schema's name (the second key is the executor's `lock_key`), so two
/// schemas in one database never share a lock.
inline std::uint32_t lock_class(const std::string& schema) {
  std::uint32_t h = 2166136261u; // FNV-1a
  for (unsigned char ch : schema) {
    h ^= ch;
    h *= 16777619u;
  }
  return h;
}


/// Whether the holder of object row `o` (an alias) has no live lease.
inline std::string holder_gone(const std::string& s, const std::string& o) {
  return "(" + o + ".executor = '' OR NOT EXISTS (SELECT 1 FROM " + s
         + "executors e WHERE e.id = " + o + ".executor AND e.state = "
           "'live'))";
}

/// Returns the condition that the oldest unended invocation of key
/// (`type`, `key`) is one a process may run, or that there is none:
/// `handlers` (a text[] parameter) names what it registered as
/// `type\x1fhandler`, `version` its app version (see object_claim_filter).
inline std::string oldest_admitted(const std::string& s, const std::string& type,
                            const std::string& key, const std::string& handlers,
                            const std::string& version) {
  return "COALESCE((SELECT (h.object_type || chr(31) || h.name) = ANY("
         + handlers + "::text[]) AND (h.app_version = '' OR h.app_version = "
         + version + ") FROM " + s + "runs h WHERE h.object_type = " + type
         + " AND h.object_key = " + key
         + " AND h.status IN ('ENQUEUED', 'PENDING') ORDER BY h.inbox_seq "
           "LIMIT 1), true)";
}

/// Returns what `can` registers as `oldest_admitted` takes it.
inline std::string handler_array(const object_claim_filter& can) {
  detail::pg_array out;
  for (auto& [type, handlers] : can.types)
    for (auto& h : handlers)
      out.add(type + '\x1f' + h);
  return out.str();
}

/// Reads invocations selected as the run columns then `inbox_seq`, of
/// key (`type`, `key`), oldest first.
inline std::vector<run_record> read_inbox(const pqxx::result& res,
                                   std::string_view type,
                                   std::string_view key) {
  std::vector<std::pair<std::int64_t, run_record>> rows;
  for (const auto& row : res) {
    auto run = read_run(row);
    run.object_type = type;
    run.object_key = key;
    if (!row[run_column_count].is_null())
      run.inbox_seq = row[run_column_count].as<std::int64_t>();
    rows.emplace_back(row[run_column_count].is_null()
                        ? 0
                        : row[run_column_count].as<std::int64_t>(),
                      std::move(run));
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<run_record> out;
  out.reserve(rows.size());
  for (auto& r : rows)
    out.push_back(std::move(r.second));
  return out;
}

inline std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

inline object_record read_object(const pqxx::row& row, std::string_view type,
                          std::string_view key) {
  object_record o;
  o.type = type;
  o.key = key;
  o.state = row[0].is_null() ? std::string{} : bytes(row[0]);
  o.version = row[1].as<std::int64_t>();
  o.owner.executor = row[2].as<std::string>();
  o.owner.epoch = row[3].as<std::int64_t>();
  o.updated_at_ms = row[4].as<std::int64_t>();
  return o;
}

} // namespace detail::pg

/// Wraps the libpqxx connection so the header needs no libpqxx.
struct postgres_store::connection : pqxx::connection {
  using pqxx::connection::connection;
};

/// A batch's run creations as the thirteen arrays of `create_runs_sql`.
struct postgres_store::creation_arrays {
  detail::pg_array ids, names, statuses, inputs, execs, epochs, versions, ats,
    parents, deadlines, object_types, object_keys, traceparents;

  explicit creation_arrays(const std::vector<run_record>& runs) {
    for (auto& run : runs) {
      parents.add_opt(run.parent_id);
      deadlines.add_opt(run.deadline_ms ? std::optional{std::to_string(
                                            *run.deadline_ms)}
                                        : std::nullopt);
      ids.add(run.id);
      names.add(run.name);
      statuses.add(to_string(run.status));
      inputs.add(detail::to_hex(run.inputs));
      execs.add(run.owner.executor);
      epochs.add(run.owner.epoch);
      versions.add(run.app_version);
      ats.add(run.created_at_ms);
      object_types.add_opt(run.object_type.empty()
                             ? std::nullopt
                             : std::optional{run.object_type});
      object_keys.add_opt(run.object_type.empty()
                            ? std::nullopt
                            : std::optional{run.object_key});
      traceparents.add_opt(run.traceparent.empty()
                             ? std::nullopt
                             : std::optional{run.traceparent});
    }
  }

  /// Inserts them (`create_runs`), noting the ids inserted in `out`.
  void insert(pqxx::transaction_base& w, batch_outcome& out) const {
    for (const auto& row : w.exec_prepared(
           "create_runs", ids.str(), names.str(), statuses.str(), inputs.str(),
           execs.str(), epochs.str(), versions.str(), ats.str(), parents.str(),
           deadlines.str(), object_types.str(), object_keys.str(),
           traceparents.str()))
      out.inserted.emplace(row[0].as<std::string>(),
                           inserted_run{row[1].as<std::string>() == "ENQUEUED",
                                        row[2].as<std::int64_t>()});
  }
};

template <class F>
auto postgres_store::with_retry(F&& attempt) {
  try {
    return detail::with_retry(
      retry_budget_,
      [&] {
        if (!conn_)
          connect(); // the first connection (the constructor's)
        return attempt();
      },
      detail::pg::classify, [this] { connect(); }, metrics_);
  } catch (const pqxx::failure& ex) {
    throw perdure::error(errc::store_error, ex.what());
  }
}

} // namespace perdure::persistence
