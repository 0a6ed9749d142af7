#pragma once

// The runtime's own connection for its administration (migrations,
// recovery) and for application threads' single reads: one connection,
// one caller at a time.

#include <memory>
#include <mutex>

#include "perdure/error.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::detail {

class admin_store {
public:
  /// Opens the store and brings its schema up to date, or, without
  /// `migrate`, checks that it is (throws `errc::invalid_argument` saying
  /// what to do if not).
  void open(const persistence::store_options& opts, bool migrate = true) {
    auto db = persistence::open_store(opts);
    if (migrate)
      db->migrate();
    else
      check_schema(*db, opts);
    std::lock_guard guard{mtx_};
    db_ = std::move(db);
  }

  void close() {
    std::lock_guard guard{mtx_};
    db_.reset();
  }

  /// Runs `f(store&)` on the connection. Throws `errc::not_running` once
  /// the runtime has stopped.
  template <class F>
  auto with(F&& f) {
    std::lock_guard guard{mtx_};
    if (!db_)
      throw perdure::error(errc::not_running, "the runtime is not running");
    return f(*db_);
  }

private:
  static void check_schema(persistence::store& db,
                           const persistence::store_options& opts);

  std::mutex mtx_;
  std::unique_ptr<persistence::store> db_;
};

} // namespace perdure::detail
