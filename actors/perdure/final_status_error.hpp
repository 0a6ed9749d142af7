#pragma once

#include <string>

#include "perdure/run_status.hpp"
#include "perdure/terminal_error.hpp"

namespace perdure {

/// Thrown by workflow code to end its run with a terminal status other
/// than ERROR (sagas end COMPENSATED or COMPENSATION_FAILED this way); the
/// message is the run's recorded error.
class final_status_error : public terminal_error {
public:
  final_status_error(run_status status, const std::string& what)
    : terminal_error(what), status_(status) {
  }

  run_status status() const noexcept {
    return status_;
  }

private:
  run_status status_;
};

} // namespace perdure
