#pragma once

#include <stdexcept>
#include <string>

namespace perdure {

/// Thrown by step code to fail the step without retrying, and by workflow
/// code to end the run with status ERROR. Recorded in the journal and
/// rethrown, with the same message, whenever the step replays.
class terminal_error : public std::runtime_error {
public:
  explicit terminal_error(const std::string& what) : std::runtime_error(what) {
  }
};

} // namespace perdure
