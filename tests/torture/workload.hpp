#pragma once

// What the torture run does: the workflows, objects, sagas and queues the
// runtimes register, and the load the client processes drive against them.
// Every id is derived from the client, its thread and a counter, so a call
// retried after a database fault is the same call (idempotent), and every
// body writes what it did to the process's effects log.

#include <atomic>
#include <cstdint>
#include <set>
#include <string>

#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>

#include "perdure/runtime.hpp"
#include "support/test_support.hpp"
#include "torture/effects.hpp"

namespace perdure::torture {

/// Accounts ("a0".."a<accounts-1>") each open with `opening`.
inline constexpr int accounts = 12;
inline constexpr std::int64_t opening = 1000;
/// Trips book one unit of each service at key "k0" or "k1".
inline constexpr const char* services[] = {"flight", "hotel", "car"};
inline constexpr int inventory_keys = 2;
inline constexpr std::int64_t capacity = 40;

/// The queues and their limits (the checker reads the same figures).
inline constexpr const char* jobs_queue = "jobs";
inline constexpr int jobs_concurrency = 6;
inline constexpr int jobs_partition_concurrency = 2;
inline constexpr int jobs_rate = 40;
inline constexpr int jobs_rate_period_ms = 1000;
inline constexpr const char* slow_queue = "slow";
inline constexpr int slow_concurrency = 2;

/// An account object's state.
struct account {
  std::int64_t balance = 0;
  bool opened = false;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(balance), CEREAL_NVP(opened));
  }
};

/// A service's inventory (one key of "flight", "hotel" or "car").
struct inventory {
  std::int64_t free = 0;
  std::int64_t capacity = 0;
  std::set<std::string> held_by;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(free), CEREAL_NVP(capacity), CEREAL_NVP(held_by));
  }
};

/// Where a process's bodies log, and the database they probe directly (not
/// through the relay) to see whether a step's checkpoint exists already.
struct workload_env {
  effects_log* log = nullptr;
  test::database direct;
};

/// Registers every workflow, object type and queue on `rt`.
void register_workload(runtime& rt, workload_env env);

/// Drives client load from `threads` threads until `stop` is set, then
/// finishes the operation each thread is in (so nothing waits for this
/// client afterwards) and returns. `index` and `seed` pick ids and choices.
void drive_client(client& c, effects_log& log, int index, std::uint64_t seed,
                  int threads, std::atomic<bool>& stop);

} // namespace perdure::torture
