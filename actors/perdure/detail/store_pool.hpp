#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "perdure/persistence/store.hpp"

namespace perdure::detail {

/// Store connections for transactional steps, opened on demand and reused:
/// one connection serves one step at a time.
class store_pool {
public:
  explicit store_pool(persistence::store_options opts) : opts_(std::move(opts)) {
  }

  /// Returns an idle connection, opening one if none is idle.
  std::unique_ptr<persistence::store> acquire() {
    {
      std::lock_guard guard{mtx_};
      if (!idle_.empty()) {
        auto result = std::move(idle_.back());
        idle_.pop_back();
        return result;
      }
    }
    return persistence::open_store(opts_);
  }

  /// Returns a connection to the pool.
  void release(std::unique_ptr<persistence::store> db) {
    std::lock_guard guard{mtx_};
    idle_.push_back(std::move(db));
  }

private:
  persistence::store_options opts_;
  std::mutex mtx_;
  std::vector<std::unique_ptr<persistence::store>> idle_;
};

} // namespace perdure::detail
