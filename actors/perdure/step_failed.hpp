#pragma once

#include <stdexcept>
#include <string>

namespace perdure {

/// What `co_await ctx.step(...)` throws when the step failed on its last
/// attempt. The journal records the failure, so replay throws the same.
class step_failed : public std::runtime_error {
public:
  explicit step_failed(const std::string& what) : std::runtime_error(what) {
  }
};

} // namespace perdure
