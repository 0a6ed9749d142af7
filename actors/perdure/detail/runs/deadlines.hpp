#pragma once

// Run deadlines in this process: one timer per deadline, however often its
// run is spawned (a queue item's next attempt has a new deadline, and a
// timer of its own), and the cancellations at a deadline that failed (the
// store away), tried again a second later on real time.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace perdure::detail {

class timer_service;

class run_deadlines {
public:
  explicit run_deadlines(timer_service& timers) : timers_(timers) {}

  /// Arms run `id`'s deadline timer for `due_ms` unless armed.
  void arm(const std::string& id, std::int64_t due_ms);

  /// The timer of run `id` for `due_ms` fired.
  void fired(const std::string& id, std::int64_t due_ms);

  /// Cancelling run `id` at deadline `due_ms` failed: try again later.
  void retry_later(const std::string& id, std::int64_t due_ms);

  /// The cancellations to try again now (none before they are due).
  std::vector<std::pair<std::string, std::int64_t>>
  take_due_retries(std::chrono::steady_clock::time_point now);

private:
  timer_service& timers_;
  std::mutex mtx_;
  std::unordered_map<std::string, std::int64_t> armed_;
  std::unordered_map<std::string, std::int64_t> retries_;
  std::chrono::steady_clock::time_point retry_due_{};
};

} // namespace perdure::detail
