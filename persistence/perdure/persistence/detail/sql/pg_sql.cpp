#include "perdure/persistence/detail/sql/pg_sql.hpp"

#include "perdure/persistence/detail/channel.hpp"

#include <vector>


namespace perdure::persistence::detail {

namespace {

/// `bytes` as bytea's text input form (`\x` and hex digits).
std::string bytea_text(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 + 2 * bytes.size());
  out += "\\x";
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

} // namespace

std::int64_t pg_tx::run(const sql_query& q,
                        std::initializer_list<sql_value> params,
                        const row_fn& each) {
  if (prepared_.insert(q.name).second) {
    try {
      t_.conn().prepare(q.name, postgres_text(q.text, schema_prefix_));
    } catch (...) {
      prepared_.erase(q.name);
      throw;
    }
  }
  std::vector<std::string> texts;
  std::vector<const char*> values;
  texts.reserve(params.size());
  for (auto& p : params) {
    if (std::holds_alternative<std::nullptr_t>(p))
      texts.emplace_back();
    else if (auto* i = std::get_if<std::int64_t>(&p))
      texts.push_back(std::to_string(*i));
    else if (auto* s = std::get_if<std::string_view>(&p))
      texts.emplace_back(*s);
    else
      texts.push_back(bytea_text(std::get<sql_bytes>(p).value));
  }
  values.reserve(params.size());
  std::size_t i = 0;
  for (auto& p : params) {
    values.push_back(std::holds_alternative<std::nullptr_t>(p)
                       ? nullptr
                       : texts[i].c_str());
    ++i;
  }
  pqxx::result res;
  try {
    res = t_.exec_prepared(q.name, pqxx::prepare::make_dynamic_params(values));
  } catch (const pqxx::unique_violation& ex) {
    throw unique_violation(ex.what());
  }
  if (each)
    for (const auto& r : res)
      each(pg_row{r});
  return static_cast<std::int64_t>(res.affected_rows());
}

void pg_tx::notify(std::string_view payload) {
  t_.exec_params("SELECT pg_notify($1, $2)", delivery_channel(schema_),
                 std::string{payload});
}

run_record read_run(const pqxx::row& row, int first) {
  return read_run(pg_row{row}, first);
}

journal_entry read_entry(const pqxx::row& row) {
  return read_entry(pg_row{row});
}

} // namespace perdure::persistence::detail
