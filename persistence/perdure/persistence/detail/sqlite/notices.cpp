// Notices between processes sharing a SQLite file: a table they poll (SQLite
// has no NOTIFY).

#include "perdure/persistence/sqlite_store.hpp"
#include "perdure/persistence/detail/sqlite/sqlite_internal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "perdure/error.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

using detail::run_columns;
using namespace detail::sqlite;

void sqlite_store::notify(std::string_view payload) {
  in_transaction([&] {
    notice_in(payload);
    return 0;
  });
}

void sqlite_store::notice_in(std::string_view payload) {
  // No NOTIFY: another process sharing the file polls this table
  // (`delivery_listener`). Old notices go now and then.
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  prepare("INSERT INTO notices (payload, created_at) VALUES (?1, ?2)")
    .bind(1, payload)
    .bind(2, std::int64_t{now})
    .run();
  if (sqlite3_last_insert_rowid(db_) % 256 == 0)
    prepare("DELETE FROM notices WHERE created_at < ?1")
      .bind(1, std::int64_t{now - 60'000})
      .run();
}

std::vector<std::pair<std::int64_t, std::string>>
sqlite_store::notices_after(std::int64_t after) {
  return with_retry([&] {
    std::vector<std::pair<std::int64_t, std::string>> result;
    if (after < 0) {
      auto& st = prepare("SELECT COALESCE(MAX(id), 0) FROM notices");
      st.step();
      result.emplace_back(st.int64(0), std::string{});
      st.reset();
      return result;
    }
    auto& st = prepare("SELECT id, payload FROM notices WHERE id > ?1 ORDER "
                       "BY id LIMIT 1000");
    st.bind(1, after);
    while (st.step())
      result.emplace_back(st.int64(0), st.text(1));
    st.reset();
    return result;
  });
}

} // namespace perdure::persistence
