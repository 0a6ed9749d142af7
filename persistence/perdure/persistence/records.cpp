#include "perdure/persistence/records.hpp"

namespace perdure::persistence {

const char* to_string(entry_kind x) noexcept {
  switch (x) {
    case entry_kind::step: return "step";
    case entry_kind::transaction: return "transaction";
  }
  return "unknown";
}

std::optional<entry_kind> parse_entry_kind(const std::string& str) noexcept {
  if (str == "step")
    return entry_kind::step;
  if (str == "transaction")
    return entry_kind::transaction;
  return std::nullopt;
}

} // namespace perdure::persistence
