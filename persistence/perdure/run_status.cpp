#include "perdure/run_status.hpp"

#include <array>
#include <utility>

namespace perdure {

namespace {

constexpr std::array<std::pair<run_status, std::string_view>, 11> names{{
  {run_status::enqueued, "ENQUEUED"},
  {run_status::pending, "PENDING"},
  {run_status::success, "SUCCESS"},
  {run_status::error, "ERROR"},
  {run_status::cancelled, "CANCELLED"},
  {run_status::retries_exceeded, "RETRIES_EXCEEDED"},
  {run_status::compensating, "COMPENSATING"},
  {run_status::compensated, "COMPENSATED"},
  {run_status::compensation_failed, "COMPENSATION_FAILED"},
  {run_status::dead_letter, "DEAD_LETTER"},
  {run_status::blocked, "BLOCKED"},
}};

} // namespace

std::string_view to_string(run_status x) noexcept {
  for (auto& [status, name] : names)
    if (status == x)
      return name;
  return "UNKNOWN";
}

std::optional<run_status> parse_run_status(std::string_view str) noexcept {
  for (auto& [status, name] : names)
    if (name == str)
      return status;
  return std::nullopt;
}

} // namespace perdure
