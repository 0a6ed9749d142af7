#include "perdure/persistence/notice.hpp"

namespace perdure::persistence {

namespace {

constexpr char key_separator = '\x1f';

bool local(notice::kind k) {
  return k == notice::kind::missed || k == notice::kind::sweep_due;
}

} // namespace

std::string notice::prefix(kind k) {
  return std::string{static_cast<char>(k)} + ':';
}

std::string notice::encode() const {
  if (local(what))
    return std::string{static_cast<char>(what)};
  auto out = prefix(what) + id;
  if (what == kind::object_has_calls)
    out += key_separator + key;
  return out;
}

std::optional<notice> notice::parse(std::string_view text) {
  if (text.empty())
    return std::nullopt;
  auto k = static_cast<kind>(text[0]);
  switch (k) {
    case kind::missed:
    case kind::sweep_due:
      if (text.size() != 1)
        return std::nullopt;
      return notice{k, {}, {}};
    case kind::run_woken:
    case kind::run_cancelled:
    case kind::saga_cancelling:
    case kind::run_created:
    case kind::executor_gone:
    case kind::queue_has_items:
    case kind::object_has_calls:
      break;
    default:
      return std::nullopt;
  }
  if (text.size() < 3 || text[1] != ':')
    return std::nullopt;
  auto rest = text.substr(2);
  if (k != kind::object_has_calls)
    return notice{k, std::string{rest}, {}};
  auto sep = rest.find(key_separator);
  if (sep == std::string_view::npos || sep == 0)
    return std::nullopt;
  return notice{k, std::string{rest.substr(0, sep)},
                std::string{rest.substr(sep + 1)}};
}

} // namespace perdure::persistence
