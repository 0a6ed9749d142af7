#include "perdure/persistence/store.hpp"

#include "perdure/error.hpp"
#include "perdure/persistence/postgres_store.hpp"
#include "perdure/persistence/sqlite_store.hpp"

namespace perdure::persistence {

std::unique_ptr<store> open_store(const store_options& opts) {
  const auto& url = opts.url;
  auto starts_with = [&](std::string_view prefix) {
    return url.rfind(prefix, 0) == 0;
  };
  if (starts_with("sqlite://")) {
    // sqlite:///abs/path.db -> /abs/path.db; sqlite://rel.db -> rel.db
    auto path = url.substr(std::string_view{"sqlite://"}.size());
    if (path.empty())
      throw perdure::error(errc::invalid_argument,
                           "database URL names no SQLite file: " + url);
    auto db = std::make_unique<sqlite_store>(path, opts.retry_budget);
    db->count_on(opts.metrics);
    return db;
  }
  if (starts_with("postgresql://") || starts_with("postgres://")) {
    auto db = std::make_unique<postgres_store>(opts);
    db->count_on(opts.metrics);
    return db;
  }
  throw perdure::error(errc::invalid_argument,
                       "unsupported database URL (use postgresql://... or "
                       "sqlite:///path): "
                         + url);
}

} // namespace perdure::persistence
