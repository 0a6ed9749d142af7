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
    case entry_kind::send: return "send";
    case entry_kind::resolve: return "resolve";
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
  if (str == "send")
    return entry_kind::send;
  if (str == "resolve")
    return entry_kind::resolve;
  return std::nullopt;
}

void delivery::settle(journal_entry& checkpoint,
                      resolve_result stored) const {
  switch (stored) {
    case resolve_result::resolved:
      checkpoint.outcome = outcome::value;
      return;
    case resolve_result::unknown_id:
      checkpoint.error = "no " + target;
      break;
    case resolve_result::already_resolved:
      checkpoint.error = target + " was already resolved or rejected";
      break;
  }
  checkpoint.outcome = outcome::terminal;
}

} // namespace perdure::persistence
