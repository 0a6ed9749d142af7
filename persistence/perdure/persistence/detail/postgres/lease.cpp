// The executor lease on PostgreSQL: a session advisory lock, an epoch
// from one sequence, heartbeats, and declaring a silent holder lapsed.

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

std::int64_t postgres_store::acquire_lease(const lease_request& r) {
  return with_retry([&]() -> std::int64_t {
    {
      pqxx::nontransaction n{*conn_};
      n.exec_prepared("lease_insert", r.executor);
    }
    // The row locked: a takeover of this id under way finishes first.
    pqxx::work w{*conn_};
    auto row = w.exec_prepared("lease_key", r.executor);
    if (row.empty())
      throw pqxx::serialization_failure{"executor row forgotten meanwhile"};
    auto key = row[0][0].as<std::int32_t>();
    if (!(lease_locked_ && lease_key_ == key)) {
      bool locked = lock_lease(w, key, false);
      if (!locked
          && !w.exec_prepared("lease_end_lapsed_holder", key, r.executor)
                .empty()) {
        // Its session ends within moments of the signal.
        for (int i = 0; i < 100 && !locked; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds{20});
          locked = lock_lease(w, key, false);
        }
      }
      if (!locked)
        throw perdure::error(
          errc::executor_in_use,
          "executor id '" + r.executor
            + "' is held by a live process (instance "
            + row[0][1].as<std::string>()
            + "); give each process its own executor id, or use "
              "perdure::client in processes that only start and signal work");
    }
    auto epoch = w.exec_prepared("lease_take", r.executor, r.instance,
                                 r.app_version, r.timeout_ms)[0][0]
                   .as<std::int64_t>();
    w.commit();
    return epoch;
  });
}

bool postgres_store::lock_lease(pqxx::transaction_base& t, std::int32_t key,
                                bool end_stale) {
  auto locked = t.exec_prepared("lease_lock", key)[0];
  if (!locked[0].as<bool>() && end_stale && !lease_session_.empty()) {
    // Our own previous connection may still hold it on the server (its
    // pid and start time, so never another process's session): end it;
    // the lock is free at a next beat.
    t.exec_prepared("lease_unlock_stale", key, lease_pid_, lease_session_);
    return false;
  }
  if (!locked[0].as<bool>())
    return false;
  lease_key_ = key;
  lease_locked_ = true;
  lease_pid_ = locked[1].as<std::int32_t>();
  lease_session_ = locked[2].as<std::string>();
  return true;
}

std::optional<lease_renewal>
postgres_store::renew_lease(std::string_view executor, std::int64_t epoch) {
  return with_retry([&]() -> std::optional<lease_renewal> {
    pqxx::nontransaction w{*conn_};
    // A new connection: the session lock went with the old one. If it is
    // still held, the epoch below says whose: the lock only speeds up the
    // detection of a dead holder, so this one tries again next beat (and
    // the caller acts as a holder without it: see `lease_renewal`).
    lease_renewal renewal;
    if (!lease_locked_) {
      renewal.relocked = true;
      lock_lease(w, lease_key_, true);
    }
    bool held = false;
    for (const auto& row :
         w.exec_prepared("lease_renew", std::string{executor}, epoch)) {
      if (row[0].as<std::string>() == "h")
        held = true;
      else
        renewal.lapsed.push_back(row[1].as<std::string>());
    }
    if (!held)
      return std::nullopt;
    renewal.locked = lease_locked_;
    return renewal;
  });
}

bool postgres_store::lapse_executor(std::string_view id) {
  return with_retry([&] {
    pqxx::nontransaction w{*conn_};
    return !w.exec_prepared("lease_lapse", std::string{id}).empty();
  });
}

void postgres_store::release_lease(std::string_view executor,
                                   std::int64_t epoch) {
  with_retry([&] {
    pqxx::nontransaction w{*conn_};
    w.exec_prepared("lease_release", std::string{executor}, epoch);
    if (lease_locked_)
      w.exec_prepared("lease_unlock", lease_key_);
    lease_locked_ = false;
    return 0;
  });
}

} // namespace perdure::persistence
