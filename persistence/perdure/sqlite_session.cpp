#include "perdure/sqlite_session.hpp"

#include <sqlite3.h>

#include <memory>

#include "perdure/persistence/detail/sqlite/statement.hpp"

namespace perdure {

using persistence::detail::fail;

sql_rows sqlite_session::exec(const std::string& sql,
                              const std::vector<sql_param>& params) {
  sqlite3_stmt* raw = nullptr;
  auto rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK)
    fail(db_, rc, "cannot prepare user statement");
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt{raw,
                                                             sqlite3_finalize};
  for (size_t i = 0; i < params.size(); ++i) {
    auto name = "$" + std::to_string(i + 1);
    int idx = sqlite3_bind_parameter_index(raw, name.c_str());
    if (idx == 0)
      idx = static_cast<int>(i + 1);
    std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::nullptr_t>)
            rc = sqlite3_bind_null(raw, idx);
          else if constexpr (std::is_same_v<T, std::int64_t>)
            rc = sqlite3_bind_int64(raw, idx, x);
          else if constexpr (std::is_same_v<T, double>)
            rc = sqlite3_bind_double(raw, idx, x);
          else
            rc =
                sqlite3_bind_text(raw, idx, x.data(),
                                  static_cast<int>(x.size()), SQLITE_TRANSIENT);
        },
        params[i]);
    if (rc != SQLITE_OK)
      fail(db_, rc, "cannot bind parameter " + std::to_string(i + 1));
  }
  sql_rows result;
  int cols = sqlite3_column_count(raw);
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
    auto& row = result.rows.emplace_back();
    for (int c = 0; c < cols; ++c) {
      if (sqlite3_column_type(raw, c) == SQLITE_NULL) {
        row.emplace_back(std::nullopt);
      } else {
        auto ptr = sqlite3_column_text(raw, c);
        row.emplace_back(
            std::string{reinterpret_cast<const char*>(ptr),
                        static_cast<size_t>(sqlite3_column_bytes(raw, c))});
      }
    }
  }
  if (rc != SQLITE_DONE)
    fail(db_, sqlite3_extended_errcode(db_), "user statement failed");
  result.affected = sqlite3_changes64(db_);
  return result;
}

} // namespace perdure
