#pragma once

// Runs the real `perdure` binary against a test database, as an operator
// would from a shell: its exit code, stdout and stderr.

#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace perdure::test {

struct cli_result {
  int code = -1;
  std::string out, err;
};

/// Runs `perdure args...` with PERDURE_DATABASE_URL and PERDURE_SCHEMA set
/// to `db`'s, no terminal, NO_COLOR set; waits up to `timeout_s`.
cli_result run_cli(const database& db, const std::vector<std::string>& args,
                   int timeout_s = 60);

} // namespace perdure::test
