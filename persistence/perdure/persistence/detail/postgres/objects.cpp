// Virtual objects' keys on PostgreSQL: claiming, holding, releasing and
// their inboxes.

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

std::optional<claimed_object>
postgres_store::claim_object(std::string_view type, std::string_view key,
                             std::string_view executor,
                             const object_claim_filter& can) {
  auto handlers = handler_array(can);
  return with_retry([&]() -> std::optional<claimed_object> {
    pqxx::work w{*conn_};
    auto res = w.exec_prepared("claim_object", std::string{type},
                               std::string{key}, std::string{executor},
                               wall_ms(), lease(), handlers, can.app_version);
    if (res.empty())
      return std::nullopt;
    if (res[0][5].as<bool>()) { // given up: its oldest call is not for us
      requeue_released(w, type, key, executor);
      w.commit();
      return std::nullopt;
    }
    claimed_object out;
    out.object = read_object(res[0], type, key);
    out.inbox = read_inbox(
      w.exec_prepared("claim_inbox", std::string{type}, std::string{key},
                      std::string{executor}, out.object.owner.epoch),
      type, key);
    w.commit();
    return out;
  });
}

void postgres_store::release_object(std::string_view type,
                                    std::string_view key, const fence& owner) {
  with_retry([&] {
    pqxx::work w{*conn_};
    if (!w.exec_prepared("release_object", std::string{type},
                         std::string{key}, owner.executor, owner.epoch,
                         wall_ms())
           .empty())
      requeue_released(w, type, key, owner.executor);
    w.commit();
  });
}

void postgres_store::requeue_released(pqxx::transaction_base& w,
                                      std::string_view type,
                                      std::string_view key,
                                      std::string_view executor) {
  w.exec_prepared("requeue_released", std::string{type}, std::string{key},
                  std::string{executor});
  w.exec_prepared("notify", detail::delivery_channel(schema_),
                  notice::calls(std::string{type}, std::string{key}).encode());
}

std::optional<std::vector<run_record>>
postgres_store::take_inbox(std::string_view type, std::string_view key,
                           const fence& owner) {
  return with_retry([&]() -> std::optional<std::vector<run_record>> {
    pqxx::work w{*conn_};
    if (w.exec_prepared("hold_object", std::string{type}, std::string{key},
                        owner.executor, owner.epoch, lease())
          .empty())
      return std::nullopt;
    auto out = read_inbox(w.exec_prepared("take_inbox", std::string{type},
                                          std::string{key}, owner.executor,
                                          owner.epoch),
                          type, key);
    w.commit();
    return out;
  });
}

std::vector<std::pair<std::string, std::string>>
postgres_store::claimable_objects(std::string_view executor,
                                  const object_claim_filter& can,
                                  std::int64_t limit, bool all_ours) {
  detail::pg_array names;
  for (auto& [type, handlers] : can.types)
    names.add(type);
  auto handlers = handler_array(can);
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& row : w.exec_prepared(
           "claimable_objects", std::string{executor}, names.str(), limit,
           all_ours, handlers, can.app_version))
      out.emplace_back(row[0].as<std::string>(), row[1].as<std::string>());
    return out;
  });
}

} // namespace perdure::persistence
