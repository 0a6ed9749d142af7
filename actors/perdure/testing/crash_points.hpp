#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "perdure/config.hpp"
#include "perdure/persistence/codec.hpp"
#include "perdure/runtime.hpp"

namespace perdure::testing {

/// How `check_crash_points` runs.
struct crash_check_options {
  /// The configuration each runtime starts from; the check sets its
  /// database (a fresh embedded SQLite file per crash point), executor id
  /// and test hooks. A `manual_clock` here makes sleeps take no time.
  config base{};
  /// Where the SQLite files go (each removed after its check); empty: the
  /// system's temporary directory.
  std::string directory{};
  /// How long one run (uninterrupted, or recovered) may take to end.
  std::chrono::milliseconds timeout{30'000};
  /// Checks at most this many crash points (the first ones).
  int max_crash_points = 1000;
};

/// What `check_crash_points` found.
struct crash_check_result {
  /// Checkpoints the uninterrupted run committed (its children's and the
  /// object calls' it made included): one crash point each.
  int crash_points = 0;
  /// One line per crash point whose recovery went wrong: another status or
  /// output than the uninterrupted run, a run that did not end, or a step
  /// body run again after its checkpoint committed.
  std::vector<std::string> failures;

  /// Whether every crash point recovered right.
  bool ok() const noexcept {
    return crash_points > 0 && failures.empty();
  }

  /// Returns a report a person can read.
  std::string to_text() const;
};

namespace detail {

crash_check_result check_crash_points(const std::function<void(runtime&)>& setup,
                                      std::string_view workflow,
                                      std::string input, crash_check_options opts);

} // namespace detail

/// Tests that workflow `workflow` is crash-safe: runs it with `input` once
/// uninterrupted, then once per durable operation of that run, each time
/// killing the process that runs it (SIGKILL, in a forked child) right
/// after that operation's checkpoint committed, and recovering the run
/// from the store with a fresh runtime in this process. Every recovered
/// run must end with the uninterrupted run's status and output, and no
/// step body may run again once its checkpoint committed. `setup`
/// registers the workflows (objects, queues) on each runtime.
///
/// ~~~
/// auto result = perdure::testing::check_crash_points(
///   [](perdure::runtime& rt) { rt.register_workflow("order", order); },
///   "order", order_input{...});
/// EXPECT_TRUE(result.ok()) << result.to_text();
/// ~~~
///
/// Step bodies run again after a crash before their checkpoint (that is
/// at-least-once); what they do outside Perdure must be idempotent, and
/// side effects the test counts must be counted across processes (a file,
/// a table). Call it where forking is safe: no other runtime running.
template <class A>
crash_check_result check_crash_points(const std::function<void(runtime&)>& setup,
                                      std::string_view workflow, const A& input,
                                      crash_check_options opts = {}) {
  auto bytes = persistence::encode(input, opts.base.payload_encoding);
  return detail::check_crash_points(setup, workflow, std::move(bytes),
                                    std::move(opts));
}

/// `check_crash_points` for a workflow without input.
inline crash_check_result
check_crash_points(const std::function<void(runtime&)>& setup,
                   std::string_view workflow, crash_check_options opts = {}) {
  return detail::check_crash_points(setup, workflow, std::string{},
                                    std::move(opts));
}

} // namespace perdure::testing
