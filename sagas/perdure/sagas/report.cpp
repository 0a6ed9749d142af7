#include "perdure/sagas/report.hpp"

namespace perdure::sagas {

std::string compensation_report::to_text() const {
  std::string out = cause + "; undone: ";
  if (undone.empty())
    out += "nothing";
  for (std::size_t i = 0; i < undone.size(); ++i)
    out += (i > 0 ? ", " : "") + undone[i];
  if (!failed.empty()) {
    out += "; not undone: ";
    for (std::size_t i = 0; i < failed.size(); ++i)
      out += (i > 0 ? ", " : "") + failed[i].first + " (" + failed[i].second
             + ")";
  }
  return out;
}

} // namespace perdure::sagas
