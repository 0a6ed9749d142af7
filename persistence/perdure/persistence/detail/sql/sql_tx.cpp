#include "perdure/persistence/detail/sql/sql_tx.hpp"

#include <cctype>

#include "perdure/persistence/detail/sql/pg_text.hpp"

namespace perdure::persistence::detail {

namespace {

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

/// Reads a cast `::name` (maybe `[]`) at `i`; returns its type name and
/// moves `i` past it, or returns nothing.
std::string_view read_cast(std::string_view sql, std::size_t& i) {
  if (sql.compare(i, 2, "::") != 0)
    return {};
  auto start = i + 2;
  auto end = start;
  while (end < sql.size() && is_name_char(sql[end]))
    ++end;
  if (end == start)
    return {}; // `::` and no type name: not a cast, left as it is
  auto type = sql.substr(start, end - start);
  if (sql.compare(end, 2, "[]") == 0)
    end += 2;
  i = end;
  return type;
}

} // namespace

std::string sqlite_text(std::string_view sql) {
  std::string out;
  out.reserve(sql.size());
  bool quoted = false;
  for (std::size_t i = 0; i < sql.size();) {
    auto c = sql[i];
    if (c == '\'')
      quoted = !quoted;
    if (quoted) {
      out += c;
      ++i;
      continue;
    }
    if (sql.compare(i, 3, "{s}") == 0) {
      i += 3;
      continue;
    }
    if (sql.compare(i, 5, "{now}") == 0) {
      out += sqlite_clock_ms;
      i += 5;
      continue;
    }
    if (c == '$' && i + 1 < sql.size()
        && std::isdigit(static_cast<unsigned char>(sql[i + 1]))) {
      // A placeholder, maybe cast: `$3::bigint` is `CAST(?3 AS INTEGER)`.
      auto end = i + 1;
      while (end < sql.size()
             && std::isdigit(static_cast<unsigned char>(sql[end])))
        ++end;
      auto placeholder = "?" + std::string{sql.substr(i + 1, end - i - 1)};
      i = end;
      auto type = read_cast(sql, i);
      if (type == "bigint" || type == "int" || type == "integer"
          || type == "smallint")
        out += "CAST(" + placeholder + " AS INTEGER)";
      else if (type == "text")
        out += "CAST(" + placeholder + " AS TEXT)";
      else
        out += placeholder;
      continue;
    }
    if (!read_cast(sql, i).empty())
      continue; // a cast of anything else: SQLite has its own affinities
    out += c;
    ++i;
  }
  return out;
}

std::string postgres_text(std::string_view sql,
                          std::string_view schema_prefix) {
  std::string out;
  out.reserve(sql.size() + 64);
  for (std::size_t i = 0; i < sql.size(); ++i) {
    if (sql.compare(i, 3, "{s}") == 0) {
      out += schema_prefix;
      i += 2;
      continue;
    }
    if (sql.compare(i, 5, "{now}") == 0) {
      out += postgres_clock_ms;
      i += 4;
      continue;
    }
    out += sql[i];
  }
  return out;
}

} // namespace perdure::persistence::detail
