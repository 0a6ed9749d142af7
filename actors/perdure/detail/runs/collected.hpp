#pragma once

// What a caller is told about a run retention collected (errc::collected).

#include <string>

#include "perdure/error.hpp"
#include "perdure/persistence/records.hpp"

namespace perdure::detail {

/// Throws `errc::collected` for `run` if retention collected it.
inline void throw_if_collected(const persistence::run_record& run) {
  if (!run.collected_at_ms)
    return;
  throw error(errc::collected,
              "run '" + run.id + "' ended " + std::string{to_string(run.status)}
                + " and retention collected it: its inputs, output and "
                  "journal are gone. Its id stays taken (a start under it "
                  "returns this run) until the retention policy lets it go; "
                  "keep runs longer in the policy if callers need their "
                  "results later");
}

} // namespace perdure::detail
