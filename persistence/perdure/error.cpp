#include "perdure/error.hpp"

namespace perdure {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::none: return "none";
    case errc::unknown_workflow: return "unknown_workflow";
    case errc::invalid_argument: return "invalid_argument";
    case errc::payload_too_large: return "payload_too_large";
    case errc::decode_failed: return "decode_failed";
    case errc::conflicting_id: return "conflicting_id";
    case errc::collected: return "collected";
    case errc::not_found: return "not_found";
    case errc::fenced: return "fenced";
    case errc::non_determinism: return "non_determinism";
    case errc::store_unavailable: return "store_unavailable";
    case errc::store_error: return "store_error";
    case errc::workflow_failed: return "workflow_failed";
    case errc::workflow_cancelled: return "workflow_cancelled";
    case errc::retries_exceeded: return "retries_exceeded";
    case errc::timeout: return "timeout";
    case errc::not_running: return "not_running";
    case errc::already_resolved: return "already_resolved";
    case errc::store_full: return "store_full";
    case errc::executor_in_use: return "executor_in_use";
    case errc::compensated: return "compensated";
    case errc::compensation_failed: return "compensation_failed";
    case errc::dead_letter: return "dead_letter";
  }
  return "unknown";
}

} // namespace perdure
