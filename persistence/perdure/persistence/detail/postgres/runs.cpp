// Creating, claiming, cancelling and taking over runs on PostgreSQL
// (one statement each, with data-modifying CTEs).

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

create_result postgres_store::create_run(const run_record& run) {
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    // A null `const char*` is bound as SQL NULL (libpqxx 6 has no
    // std::optional parameters).
    auto deadline = run.deadline_ms ? std::to_string(*run.deadline_ms)
                                    : std::string{};
    auto res = w.exec_prepared(
      "create_run", run.id, run.name, std::string{to_string(run.status)},
      pqxx::binarystring{run.inputs.data(), run.inputs.size()},
      run.owner.executor, run.owner.epoch, run.app_version, run.created_at_ms,
      run.parent_id ? run.parent_id->c_str() : nullptr,
      run.deadline_ms ? deadline.c_str() : nullptr,
      run.object_type.empty() ? nullptr : run.object_type.c_str(),
      run.object_type.empty() ? nullptr : run.object_key.c_str(),
      run.call_chain.empty() ? nullptr : run.call_chain.c_str(),
      run.traceparent.empty() ? nullptr : run.traceparent.c_str());
    if (res.empty()) {
      // Another transaction inserted it and has not committed yet: retry.
      throw pqxx::serialization_failure("run row not yet visible");
    }
    create_result result;
    result.created = res[0][0].as<bool>();
    result.run = read_run(res[0], 1);
    return result;
  });
}

std::optional<create_result>
postgres_store::create_child(const fence& parent, const run_record& child) {
  auto deadline = child.deadline_ms ? std::to_string(*child.deadline_ms)
                                    : std::string{};
  return with_retry([&]() -> std::optional<create_result> {
    pqxx::work w{*conn_};
    if (!child.parent_id || !owns(w, parent, *child.parent_id, lease()))
      return std::nullopt; // rolls back
    auto res = w.exec_prepared(
      "create_run", child.id, child.name, std::string{to_string(child.status)},
      pqxx::binarystring{child.inputs.data(), child.inputs.size()},
      child.owner.executor, child.owner.epoch, child.app_version,
      child.created_at_ms, child.parent_id->c_str(),
      child.deadline_ms ? deadline.c_str() : nullptr,
      child.object_type.empty() ? nullptr : child.object_type.c_str(),
      child.object_type.empty() ? nullptr : child.object_key.c_str(),
      child.call_chain.empty() ? nullptr : child.call_chain.c_str(),
      child.traceparent.empty() ? nullptr : child.traceparent.c_str());
    if (res.empty())
      throw pqxx::serialization_failure("run row not yet visible");
    create_result result;
    result.created = res[0][0].as<bool>();
    if (result.created && !child.undo_of.empty()) {
      w.exec_prepared("copy_journal_for_undo", child.id, child.undo_of);
      auto set = w.exec_prepared("request_undo", child.id, child.undo_of,
                                 child.created_at_ms);
      if (set.empty())
        return std::nullopt; // no such saga: rolls back (never: fenced)
      result.run = read_run(set[0]);
    } else {
      result.run = read_run(res[0], 1);
      if (!res[0][1 + run_column_count].is_null())
        result.run.inbox_seq = res[0][1 + run_column_count].as<std::int64_t>();
    }
    w.commit();
    return result;
  });
}

std::optional<run_record> postgres_store::claim_run(std::string_view id,
                                                    std::string_view executor,
                                                    const claim_filter& filter,
                                                    bool count_attempt,
                                                    bool new_epoch) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  return with_retry([&]() -> std::optional<run_record> {
    pqxx::nontransaction w{*conn_};
    auto res = w.exec_prepared("claim_run", std::string{id},
                               std::string{executor}, count_attempt ? 1 : 0,
                               names.str(), filter.app_version, lease(),
                               new_epoch ? 1 : 0);
    if (res.empty())
      return std::nullopt;
    return read_run(res[0]);
  });
}

std::vector<cancelled_run>
postgres_store::cancel_run(std::string_view run_id, std::int64_t at_ms,
                           std::optional<std::int64_t> deadline_ms) {
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    std::vector<cancelled_run> runs;
    detail::opt_param deadline{deadline_ms};
    for (const auto& row : w.exec_prepared("cancel_run", std::string{run_id},
                                           at_ms, deadline.get()))
      runs.push_back({row[0].as<std::string>(), row[1].as<bool>()});
    return runs;
  });
}

std::vector<cancelled_run>
postgres_store::cancel_runs(const std::vector<std::string>& run_ids,
                            std::int64_t at_ms) {
  detail::pg_array ids;
  for (auto& id : run_ids)
    ids.add(id);
  return with_retry([&] {
    // One statement: the trees, the parents' wake-ups and the notices.
    pqxx::work w{*conn_};
    std::vector<cancelled_run> runs;
    for (const auto& row : w.exec_prepared(
           "cancel_runs", ids.str(), at_ms, detail::delivery_channel(schema_),
           notice::prefix(notice::kind::run_cancelled),
           notice::prefix(notice::kind::saga_cancelling)))
      runs.push_back({row[0].as<std::string>(), row[1].as<bool>()});
    w.commit();
    return runs;
  });
}

std::vector<run_record>
postgres_store::take_over(std::string_view executor, const claim_filter& filter,
                          std::optional<std::string_view> only,
                          std::int64_t now_ms) {
  detail::pg_array names;
  for (auto& n : filter.names)
    names.add(n);
  auto one = only ? std::string{*only} : std::string{};
  return with_retry([&] {
    pqxx::work w{*conn_};
    std::vector<run_record> result;
    for (const auto& row : w.exec_prepared(
           "take_over", std::string{executor}, names.str(), filter.app_version,
           only ? one.c_str() : nullptr, now_ms, lease()))
      result.push_back(read_run(row));
    w.commit();
    if (result.empty() && !only) { // nothing left to take
      pqxx::nontransaction n{*conn_};
      n.exec_prepared("forget_executors");
    }
    std::sort(result.begin(), result.end(), [](auto& a, auto& b) {
      return std::tie(a.created_at_ms, a.id) < std::tie(b.created_at_ms, b.id);
    });
    return result;
  });
}

} // namespace perdure::persistence
