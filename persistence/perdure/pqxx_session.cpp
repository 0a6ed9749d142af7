#include "perdure/pqxx_session.hpp"

#include <pqxx/pqxx>

namespace perdure {

sql_rows pqxx_session::exec(const std::string& sql,
                            const std::vector<sql_param>& params) {
  std::vector<std::optional<std::string>> texts;
  texts.reserve(params.size());
  for (auto& p : params)
    texts.push_back(to_text(p));
  std::vector<const char*> ptrs;
  ptrs.reserve(texts.size());
  for (auto& t : texts)
    ptrs.push_back(t ? t->c_str() : nullptr);
  auto res = tx_.exec_params(sql, pqxx::prepare::make_dynamic_params(ptrs));
  sql_rows result;
  for (const auto& row : res) {
    auto& out = result.rows.emplace_back();
    for (const auto& field : row)
      out.emplace_back(field.is_null()
                           ? std::nullopt
                           : std::optional<std::string>{field.c_str()});
  }
  result.affected = static_cast<std::int64_t>(res.affected_rows());
  return result;
}

} // namespace perdure
