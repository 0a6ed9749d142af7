#pragma once

// The torture run's invariants, checked from the store and from the
// effects logs after the work ended (the logs carry what happened during
// the run: step bodies, handler and queue-item intervals, client checks).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace perdure::torture {

/// What the conductor did to a process: "kill", "stop", "cont", "exit".
struct process_event {
  std::int64_t ns = 0;
  std::string kind;
  int pid = 0;
};

struct check_input {
  test::database db; // straight to the server, not through the relay
  std::string dir;   // the effects logs
  std::vector<process_event> events;
  std::int64_t end_ns = 0; // when the run ended (open intervals end here)
};

struct check_report {
  std::vector<std::string> violations;
  /// Figures for the summary: runs by name and status, intervals checked.
  std::map<std::string, std::int64_t> counts;
};

check_report check_invariants(const check_input& in);

} // namespace perdure::torture
