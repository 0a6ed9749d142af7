#pragma once

// Retrying transient database errors with capped exponential backoff and
// full jitter. The stores decide what is transient; this decides when.

#include <chrono>
#include <exception>
#include <random>
#include <thread>

#include "perdure/error.hpp"
#include "perdure/persistence/store_metrics.hpp"
#include "perdure/telemetry/metrics.hpp"

namespace perdure::persistence::detail {

/// What a store makes of a failed attempt.
enum class failure_kind {
  /// Not worth retrying: rethrow.
  permanent,
  /// Retry on the same connection (busy, serialization failure, deadlock).
  retry,
  /// Throw the connection away, open a new one, retry.
  reconnect,
  /// The database is out of space: run `reconnect` (which may free some,
  /// e.g. by checkpointing a write-ahead log) and retry; reported as
  /// `errc::store_full` when the budget is spent.
  full,
};

/// Runs `attempt` until it returns, retrying failures that `classify` deems
/// transient for at most `budget`. `reconnect` runs before retries of kind
/// `failure_kind::reconnect` (and may itself throw, which counts as another
/// failed attempt). Throws `errc::store_unavailable` (`errc::store_full` if
/// the last failure was of kind `full`) when the budget is spent. Each
/// retry and a spent budget are counted on `metrics` (if given).
template <class Attempt, class Classify, class Reconnect>
auto with_retry(std::chrono::milliseconds budget, Attempt&& attempt,
                Classify&& classify, Reconnect&& reconnect,
                const store_metrics* metrics = nullptr) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + budget;
  auto delay = std::chrono::milliseconds{2};
  thread_local std::minstd_rand rng{std::random_device{}()};
  bool need_reconnect = false;
  auto last = failure_kind::retry;
  for (;;) {
    try {
      if (need_reconnect) {
        reconnect();
        need_reconnect = false;
      }
      return attempt();
    } catch (...) {
      auto kind = need_reconnect ? failure_kind::reconnect
                                 : classify(std::current_exception());
      if (kind == failure_kind::permanent)
        throw;
      if (!need_reconnect)
        last = kind;
      if (clock::now() >= deadline) {
        if (metrics && metrics->unavailable)
          metrics->unavailable->add();
        std::string what = "unknown error";
        try {
          throw;
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        if (last == failure_kind::full)
          throw perdure::error(errc::store_full,
                               "database full after retrying: " + what);
        throw perdure::error(errc::store_unavailable,
                             "database unavailable after retrying: " + what);
      }
      need_reconnect = kind == failure_kind::reconnect
                       || kind == failure_kind::full;
      if (metrics) {
        auto* c = kind == failure_kind::full        ? metrics->full
                  : kind == failure_kind::reconnect ? metrics->reconnects
                                                    : metrics->retries;
        if (c)
          c->add();
      }
      std::uniform_int_distribution<long> jitter{0, delay.count()};
      std::this_thread::sleep_for(std::chrono::milliseconds{jitter(rng)} + delay / 2);
      delay = std::min(delay * 2, std::chrono::milliseconds{500});
    }
  }
}

} // namespace perdure::persistence::detail
