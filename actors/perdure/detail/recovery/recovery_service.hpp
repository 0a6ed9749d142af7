#pragma once

// Bringing this process's share of the PENDING runs into memory: its own
// runs at start and after regaining its lease, the runs of stopped or
// lapsed processes (takeovers, one at a time, another asked for meanwhile
// runs after), and now and then a look for work this process holds in the
// store but not in memory (stranded: a claim whose commit reply was lost).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::detail {

struct runtime_services;

class recovery_service {
public:
  explicit recovery_service(runtime_services& svc) : svc_(svc) {}

  /// A start: nothing of the last life counts.
  void reset();

  /// Claims this executor's PENDING runs (after giving up those it cannot
  /// run) and brings them in, then takes over what died elsewhere
  /// meanwhile. Throws on a store failure.
  void recover();

  /// Claims, in the background, the runs nobody live holds that this
  /// process can run (see `store::take_over`): run `only`, or its share.
  void take_over(std::optional<std::string> only = std::nullopt);

  /// Returns how many PENDING runs the last recovery or takeover left for
  /// processes that can run them.
  std::int64_t left_pending() const noexcept {
    return left_pending_.load();
  }

  /// Runs of app versions no live executor runs, at the last look.
  std::int64_t stranded_runs() const noexcept { return stranded_.load(); }

  /// Whether the start's recovery is yet to end: what it brings in is not
  /// to be claimed beside it (see `recover`).
  bool recovering();

  /// Whether a look for stranded work is due now; if so it is under way
  /// until `check_stranded` returns.
  bool stranded_check_due(std::chrono::steady_clock::time_point now);

  /// Looks for this executor's PENDING runs and invocations that should be
  /// in memory and have no actor here (on the control executor): a count
  /// over an index, and only if it says something is missing, the list;
  /// what is missing at two looks in a row is brought back.
  void check_stranded();

private:
  /// Loads the journals of `runs`, claimed by this process, and spawns
  /// their actors (passivated ones stay out of memory until due).
  void bring_in(std::vector<persistence::run_record> runs);
  void take_over_now(const std::optional<std::string>& only);
  /// Claims runs BLOCKED by processes started before this one (its code
  /// may be fixed) and brings them in.
  void retry_blocked();
  void count_left();
  /// Notes this process's app version and warns of stranded runs (once per
  /// change of their count).
  void watch_versions();

  runtime_services& svc_;
  std::atomic<std::int64_t> left_pending_{0};
  std::atomic<std::int64_t> stranded_{0};
  std::mutex mtx_;
  bool taking_over_ = false;
  bool take_over_again_ = false;
  /// From `reset` until the start's `recover` ends: takeovers asked for
  /// wait for it (one would claim a run the recovery then claims again),
  /// runs to adopt by id here.
  bool recovering_ = false;
  std::vector<std::string> adopt_after_recovery_;
  /// Held by `recover` throughout: recoveries take turns.
  std::mutex recovery_mtx_;
  /// Work found without an actor at the last stranded check, with its
  /// epoch (brought back if still so at the next one).
  std::unordered_map<std::string, std::int64_t> stranded_suspects_;
  std::chrono::steady_clock::time_point stranded_due_{};
  bool stranded_busy_ = false;
  /// When `watch_versions` is due next (takeover passes run one at a
  /// time: no lock).
  std::chrono::steady_clock::time_point versions_due_{};
};

} // namespace perdure::detail
