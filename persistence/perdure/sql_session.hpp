#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace perdure {

/// A parameter of a user SQL statement.
using sql_param = std::variant<std::nullptr_t, std::int64_t, double, std::string>;

/// Returns `p` as SQL text, or nothing for NULL.
inline std::optional<std::string> to_text(const sql_param& p) {
  return std::visit(
    [](auto& x) -> std::optional<std::string> {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::nullptr_t>)
        return std::nullopt;
      else if constexpr (std::is_same_v<T, std::string>)
        return x;
      else if constexpr (std::is_same_v<T, double>) {
        char buf[32]; // shortest text that reads back as the same double
        auto res = std::to_chars(buf, buf + sizeof buf, x);
        return std::string{buf, res.ptr};
      } else
        return std::to_string(x);
    },
    p);
}

/// The rows a statement returned; a `nullopt` cell is SQL NULL.
struct sql_rows {
  std::vector<std::vector<std::optional<std::string>>> rows;
  /// Rows changed by an INSERT, UPDATE or DELETE.
  std::int64_t affected = 0;
};

/// The user's view of the database transaction of a transactional step
/// (`workflow_context::transaction`). Statements use `$1`, `$2`, ... for
/// parameters on both stores; values are always bound, never spliced.
class sql_session {
public:
  virtual ~sql_session() = default;

  /// Runs `sql` with `params` inside the step's transaction.
  virtual sql_rows exec(const std::string& sql,
                        const std::vector<sql_param>& params) = 0;

  /// Convenience overload: `exec("... $1 ...", 42, "x")`.
  template <class... Ts>
  sql_rows exec_params(const std::string& sql, Ts&&... xs) {
    return exec(sql, std::vector<sql_param>{to_param(std::forward<Ts>(xs))...});
  }

  /// Returns "postgresql" or "sqlite", for SQL that differs between them.
  virtual const char* dialect() const noexcept = 0;

  /// Returns the PostgreSQL schema of Perdure's own tables (empty on
  /// SQLite), for Perdure's rows written in this transaction.
  virtual std::string perdure_schema() const {
    return {};
  }

private:
  template <class T>
  static sql_param to_param(T&& x) {
    using V = std::decay_t<T>;
    if constexpr (std::is_same_v<V, std::nullptr_t>)
      return nullptr;
    else if constexpr (std::is_integral_v<V>)
      return static_cast<std::int64_t>(x);
    else if constexpr (std::is_floating_point_v<V>)
      return static_cast<double>(x);
    else
      return std::string{std::forward<T>(x)};
  }
};

} // namespace perdure
