#include "perdure/persistence/records.hpp"

namespace perdure::persistence {

const char* to_string(entry_kind x) noexcept {
  switch (x) {
    case entry_kind::step: return "step";
    case entry_kind::transaction: return "transaction";
    case entry_kind::sleep: return "sleep";
    case entry_kind::deadline: return "deadline";
    case entry_kind::child: return "child";
    case entry_kind::event: return "event";
    case entry_kind::awakeable: return "awakeable";
    case entry_kind::await: return "await";
  }
  return "unknown";
}

std::optional<entry_kind> parse_entry_kind(const std::string& str) noexcept {
  if (str == "step")
    return entry_kind::step;
  if (str == "transaction")
    return entry_kind::transaction;
  if (str == "sleep")
    return entry_kind::sleep;
  if (str == "deadline")
    return entry_kind::deadline;
  if (str == "child")
    return entry_kind::child;
  if (str == "event")
    return entry_kind::event;
  if (str == "awakeable")
    return entry_kind::awakeable;
  if (str == "await")
    return entry_kind::await;
  return std::nullopt;
}

} // namespace perdure::persistence
