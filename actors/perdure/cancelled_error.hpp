#pragma once

#include <string>

#include "perdure/terminal_error.hpp"

namespace perdure {

/// What a saga's next durable operation throws once the saga was cancelled
/// (or passed its deadline): the saga compensates, then ends COMPENSATED.
/// Code that is not a saga going forward never sees it: cancelling it ends
/// it CANCELLED (code after a saga that is done: at its next durable
/// operation, or at once while it waits). Left uncaught, it ends the run
/// CANCELLED.
class cancelled_error : public terminal_error {
public:
  explicit cancelled_error(const std::string& what = "cancelled")
    : terminal_error(what) {
  }
};

} // namespace perdure
