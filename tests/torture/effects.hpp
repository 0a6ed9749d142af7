#pragma once

// Side-effect logs kept outside the database: each process appends lines
// ("<kind> <fields...>") to its own file, each line one write(2) followed by
// fdatasync, so what a step body or handler did survives a SIGKILL of its
// process and a stopped database. The checker reads every file afterwards.

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace perdure::torture {

/// Nanoseconds on CLOCK_MONOTONIC: one clock for every process on the
/// machine, so intervals from different processes can be compared.
std::int64_t mono_ns();

class effects_log {
public:
  /// Opens (creates, appends to) `path`.
  explicit effects_log(const std::string& path);
  ~effects_log();

  effects_log(const effects_log&) = delete;
  effects_log& operator=(const effects_log&) = delete;

  /// Appends `fields` as one space-separated line, durably.
  void write(const std::vector<std::string>& fields);

private:
  std::mutex mtx_;
  int fd_ = -1;
};

/// One line of a log, split at spaces.
using log_line = std::vector<std::string>;

/// Reads every line of every file in `dir` whose name starts with `prefix`.
std::vector<log_line> read_logs(const std::string& dir,
                                const std::string& prefix);

} // namespace perdure::torture
