#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::detail {

/// Store connections for work that may run on many threads at once (starting
/// runs, transactional steps), opened on demand up to `max_open` and reused:
/// one connection serves one caller at a time; callers beyond the cap wait.
class store_pool {
public:
  store_pool(persistence::store_options opts, std::size_t max_open)
    : opts_(std::move(opts)), max_open_(max_open == 0 ? 1 : max_open) {
  }

  /// Returns an idle connection, opening one if none is idle and the cap
  /// allows, else waiting for one.
  std::unique_ptr<persistence::store> acquire() {
    std::unique_lock guard{mtx_};
    cv_.wait(guard, [this] { return !idle_.empty() || open_ < max_open_; });
    if (!idle_.empty()) {
      auto result = std::move(idle_.back());
      idle_.pop_back();
      return result;
    }
    ++open_;
    guard.unlock();
    try {
      return persistence::open_store(opts_);
    } catch (...) {
      forget();
      throw;
    }
  }

  /// Returns a connection to the pool.
  void release(std::unique_ptr<persistence::store> db) {
    {
      std::lock_guard guard{mtx_};
      idle_.push_back(std::move(db));
    }
    cv_.notify_one();
  }

  /// Accounts for a connection acquired and then dropped (closed).
  void forget() {
    {
      std::lock_guard guard{mtx_};
      --open_;
    }
    cv_.notify_one();
  }

  /// Runs `f(store&)` on a pooled connection. A connection the store gave
  /// up on (`store_unavailable`: lost past the retry budget) is closed
  /// rather than reused; after any other exception (a user's error in a
  /// transactional step, a constraint violation) the store has rolled back
  /// and the connection serves the next caller.
  template <class F>
  auto with(F&& f) {
    auto db = acquire();
    try {
      if constexpr (std::is_void_v<decltype(f(*db))>) {
        f(*db);
        release(std::move(db));
      } else {
        auto result = f(*db);
        release(std::move(db));
        return result;
      }
    } catch (const perdure::error& ex) {
      if (ex.code() == errc::store_unavailable) {
        db.reset();
        forget();
      } else {
        release(std::move(db));
      }
      throw;
    } catch (...) {
      release(std::move(db));
      throw;
    }
  }

private:
  persistence::store_options opts_;
  std::size_t max_open_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::size_t open_ = 0;
  std::vector<std::unique_ptr<persistence::store>> idle_;
};

} // namespace perdure::detail
