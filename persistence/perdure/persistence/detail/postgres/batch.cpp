// The journal writer's batch on PostgreSQL: one statement with the fence
// in autocommit for a small batch, COPY for a large one.

#include "perdure/persistence/postgres_store.hpp"
#include "perdure/persistence/detail/postgres/postgres_internal.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

using namespace detail::pg;

namespace {

/// A batch's invocation ends as the `commit_invocations` statement takes
/// them.
struct invocation_arrays {
  std::string types, keys, ids, execs, epochs, statuses, outputs, errors, ats,
    states, bases, checks;

  explicit invocation_arrays(const std::vector<invocation_commit>& all) {
    detail::pg_array t, k, i, x, e, st, o, er, a, s, b, c;
    for (auto& inv : all) {
      t.add(inv.object_type);
      k.add(inv.object_key);
      add_completion(inv.completion, i, x, e, st, o, er, a);
      s.add_opt(inv.state ? std::optional{detail::to_hex(*inv.state)}
                          : std::nullopt);
      b.add(inv.base_version);
      c.add(inv.checks_base ? "t" : "f");
    }
    types = t.str(), keys = k.str(), ids = i.str(), execs = x.str();
    epochs = e.str(), statuses = st.str(), outputs = o.str();
    errors = er.str(), ats = a.str(), states = s.str(), bases = b.str();
    checks = c.str();
  }

  /// Runs the statement in `w`: whether each end committed (with `w`).
  std::vector<bool> commit(pqxx::transaction_base& w, std::int64_t lease,
                           const std::vector<invocation_commit>& all) const {
    std::unordered_set<std::string> done;
    for (const auto& row :
         w.exec_prepared("commit_invocations", types, keys, ids, execs,
                         epochs, statuses, outputs, errors, ats, states,
                         lease, bases, checks))
      done.insert(row[0].as<std::string>());
    std::vector<bool> out;
    out.reserve(all.size());
    for (auto& i : all)
      out.push_back(done.count(i.completion.run_id) > 0);
    return out;
  }
};

} // namespace

batch_result postgres_store::write_batch(const persistence::write_batch& batch) {
  bool runs = !batch.creates.empty() || !batch.appends.empty()
              || !batch.completions.empty();
  if (runs && batch.appends.empty() && batch.completions.empty()
      && !batch.invocations.empty())
    return create_and_end(batch);
  if (!runs)
    return {.invocations = commit_invocations(batch.invocations)};
  auto result = write_runs(batch);
  if (batch.invocations.empty())
    return result;
  try {
    result.invocations = commit_invocations(batch.invocations);
  } catch (const std::exception& ex) {
    // The creations, appends and completions are committed: they stand,
    // reported as they are (a call reported failed though stored would
    // wait for the stranded check while later calls of its key run).
    auto* known = dynamic_cast<const perdure::error*>(&ex);
    result.invocations.assign(batch.invocations.size(), false);
    result.invocations_failed = known ? known->code() : errc::store_error;
  }
  return result;
}

batch_result
postgres_store::create_and_end(const persistence::write_batch& batch) {
  // Calls arriving and calls ending (a busy object's batches): one
  // transaction, one commit, one WAL flush for both. Only with creations
  // alone: the fence of appends and completions locks runs FOR SHARE, and
  // holding those while the ends lock their objects' rows would deadlock
  // with a claim, which locks an object's row and then updates its runs.
  creation_arrays n{batch.creates};
  invocation_arrays ends{batch.invocations};
  return with_retry([&] {
    pqxx::work w{*conn_};
    batch_outcome out;
    n.insert(w, out);
    auto result = make_result(batch, out);
    result.invocations = ends.commit(w, lease(), batch.invocations);
    w.commit();
    return result;
  });
}

/// Reads the batch statement's rows, each a tag and a value: "a" a run
/// whose fence held, "c" a run completed, "n"/"e" a run created (ENQUEUED
/// behind older calls for "e") with its inbox place, else how many entries
/// were appended.
void postgres_store::read_tagged(const pqxx::result& rows,
                                 batch_outcome& out) {
  for (const auto& row : rows) {
    auto tag = row[0].as<std::string>();
    auto value = row[1].as<std::string>();
    if (tag == "a")
      out.owned.insert(std::move(value));
    else if (tag == "c")
      out.done.insert(std::move(value));
    else if (tag == "n" || tag == "e") {
      auto [id, seq] = read_created(value);
      out.inserted.emplace(std::move(id), inserted_run{tag == "e", seq});
    }
    else
      out.appended = std::stoull(value);
  }
}

batch_result postgres_store::write_runs(const persistence::write_batch& batch) {
  detail::pg_array f_ids, f_execs, f_epochs;
  detail::pg_array ids, seqs, kinds, names, outcomes, payloads, errors, ats;
  for (auto& a : batch.appends) {
    auto& e = a.entry;
    f_ids.add(e.run_id);
    f_execs.add(a.owner.executor);
    f_epochs.add(a.owner.epoch);
    ids.add(e.run_id);
    seqs.add(e.seq);
    kinds.add(to_string(e.kind));
    names.add(e.name);
    outcomes.add(static_cast<long long>(e.outcome));
    payloads.add(detail::to_hex(e.payload));
    errors.add(e.error);
    ats.add(e.created_at_ms);
  }
  detail::pg_array c_ids, c_execs, c_epochs, c_status, c_out, c_err, c_at;
  for (auto& c : batch.completions)
    add_completion(c, c_ids, c_execs, c_epochs, c_status, c_out, c_err, c_at);
  creation_arrays n{batch.creates};
  // Re-running after an in-doubt commit is safe: a journal index written
  // already is kept (and reported), a completion to the same status is
  // accepted, a run created already is reported as taken.
  return with_retry([&] {
    batch_outcome out;
    if (batch.appends.size() >= copy_threshold) {
      try {
        copy_batch(batch, n, f_ids.str(), f_execs.str(), f_epochs.str(),
                   {c_ids.str(), c_execs.str(), c_epochs.str(), c_status.str(),
                    c_out.str(), c_err.str(), c_at.str()},
                   out);
        return make_result(batch, out);
      } catch (const pqxx::unique_violation&) {
        // An index written before (an in-doubt batch sent again): the
        // statement below keeps (and reports) what is stored.
        out = batch_outcome{};
      }
    }
    pqxx::nontransaction w{*conn_};
    if (batch.appends.empty() && batch.completions.empty()) {
      // Creations alone (calls, starts): the lean statement.
      n.insert(w, out);
      return make_result(batch, out);
    }
    auto rows = batch.creates.empty() && batch.completions.empty()
                  ? w.exec_prepared("write_batch_appending", f_ids.str(),
                                    f_execs.str(), f_epochs.str(), ids.str(),
                                    seqs.str(), kinds.str(), names.str(),
                                    outcomes.str(), payloads.str(),
                                    errors.str(), ats.str(), lease())
                : batch.creates.empty()
                  ? w.exec_prepared("write_batch", f_ids.str(), f_execs.str(),
                                    f_epochs.str(), ids.str(), seqs.str(),
                                    kinds.str(), names.str(), outcomes.str(),
                                    payloads.str(), errors.str(), ats.str(),
                                    c_ids.str(), c_execs.str(), c_epochs.str(),
                                    c_status.str(), c_out.str(), c_err.str(),
                                    c_at.str(), lease())
                  : w.exec_prepared(
                      "write_batch_creating", f_ids.str(), f_execs.str(),
                      f_epochs.str(), ids.str(), seqs.str(), kinds.str(),
                      names.str(), outcomes.str(), payloads.str(), errors.str(),
                      ats.str(), c_ids.str(), c_execs.str(), c_epochs.str(),
                      c_status.str(), c_out.str(), c_err.str(), c_at.str(),
                      n.ids.str(), n.names.str(), n.statuses.str(),
                      n.inputs.str(), n.execs.str(), n.epochs.str(),
                      n.versions.str(), n.ats.str(), n.parents.str(),
                      n.deadlines.str(), n.object_types.str(),
                      n.object_keys.str(), n.traceparents.str(), lease());
    read_tagged(rows, out);
    auto result = make_result(batch, out);
    read_recorded(w, batch, out.appended, result);
    return result;
  });
}

batch_result postgres_store::make_result(const persistence::write_batch& batch,
                                         batch_outcome& out) {
  batch_result result;
  creation_flags(batch.creates, out.inserted, result);
  result.appends.reserve(batch.appends.size());
  for (auto& a : batch.appends)
    result.appends.push_back(
      out.owned.count(owned_key(a.owner.epoch, a.entry.run_id)) > 0);
  for (auto& c : batch.completions)
    result.completions.push_back(out.done.count(c.run_id) > 0);
  return result;
}

void postgres_store::copy_batch(const persistence::write_batch& batch,
                                const creation_arrays& n,
                                const std::string& f_ids,
                                const std::string& f_execs,
                                const std::string& f_epochs,
                                const std::array<std::string, 7>& completions,
                                batch_outcome& out) {
  // A large batch: creations, fence, then COPY (several times cheaper per
  // row than INSERT ... SELECT), then completions, in one transaction.
  pqxx::work w{*conn_};
  if (!batch.creates.empty())
    n.insert(w, out);
  for (const auto& row : w.exec_prepared("fence_check", f_ids, f_execs, f_epochs,
                                          lease()))
    out.owned.insert(owned_key(row[1].as<std::int64_t>(),
                               row[0].as<std::string>()));
  if (!out.owned.empty()) {
    pqxx::stream_to stream{w, conn_->quote_name(schema_) + ".journal",
                           std::vector<std::string>{"run_id", "seq", "kind",
                                                    "name", "outcome", "payload",
                                                    "error", "created_at"}};
    for (auto& a : batch.appends) {
      auto& e = a.entry;
      if (out.owned.count(owned_key(a.owner.epoch, e.run_id)) == 0)
        continue;
      stream << std::make_tuple(e.run_id, e.seq, std::string{to_string(e.kind)},
                                e.name, static_cast<int>(e.outcome),
                                "\\x" + detail::to_hex(e.payload), e.error,
                                e.created_at_ms);
      ++out.appended; // COPY inserts every row or fails
    }
    stream.complete();
  }
  if (!batch.completions.empty()) {
    auto& c = completions;
    for (const auto& row : w.exec_prepared("complete_runs", c[0], c[1], c[2],
                                           c[3], c[4], c[5], c[6]))
      out.done.insert(row[0].as<std::string>());
  }
  w.commit();
}

std::vector<bool> postgres_store::commit_invocations(
  const std::vector<invocation_commit>& invocations) {
  invocation_arrays ends{invocations};
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    return ends.commit(w, lease(), invocations);
  });
}

} // namespace perdure::persistence
