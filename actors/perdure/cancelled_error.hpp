#pragma once

#include <string>

#include "perdure/terminal_error.hpp"

namespace perdure {

/// What a saga's next durable operation throws once the saga was cancelled
/// (or passed its deadline): the saga compensates, then ends COMPENSATED.
/// Code that is not a saga never sees it: cancelling it ends it CANCELLED.
/// Left uncaught, it ends the run CANCELLED.
class cancelled_error : public terminal_error {
public:
  explicit cancelled_error(const std::string& what = "cancelled")
    : terminal_error(what) {
  }
};

} // namespace perdure
