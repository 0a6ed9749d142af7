#include "perdure/cli/payload.hpp"

#include <nlohmann/json.hpp>

#include "perdure/cli/context.hpp"

namespace perdure::cli {

std::string encode_json_value(const std::string& json_text, const char* what) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded())
    throw cli_error(exit_code::usage,
                    std::string{what} + " must be JSON, as the code's type "
                      "reads it (cereal's JSON): a number 42, a string "
                      "'\"text\"', an object '{\"granted\":true}' (got '"
                      + json_text + "')");
  return nlohmann::json{{"value", j}}.dump();
}

} // namespace perdure::cli
