#pragma once

// The torture run's conductor: a PostgreSQL cluster of its own behind a TCP
// relay, three runtimes and two clients as real processes (or one runtime
// on an embedded SQLite file in a small disk), and faults on a schedule
// drawn from a seed; when the faults stop it waits for all work to
// end, checks the invariants and prints a JSON summary.

#include <cstdint>
#include <string>

namespace perdure::torture {

struct torture_options {
  /// How long faults are injected.
  int seconds = 60;
  std::uint64_t seed = 1;
  /// This program (started again as runtime and client).
  std::string self;
  /// Where logs and effects go (made empty first).
  std::string dir;
  int runtimes = 3;
  int clients = 2;
  /// How long all work may take to end after the last fault.
  int settle_seconds = 180;
  /// The embedded SQLite variant: one runtime and the clients on a file in
  /// a small tmpfs; faults are SIGKILLs and a full disk.
  bool sqlite = false;
  /// Only faults of this kind (for repeating one finding); empty: all.
  std::string only;
};

/// Runs it; returns the number of violations (0: passed).
int run_torture(const torture_options& opts);

} // namespace perdure::torture
