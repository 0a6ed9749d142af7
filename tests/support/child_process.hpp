#pragma once

// A real child process with its stdout on a pipe, for tests that kill,
// stall and restart processes (SIGKILL, SIGSTOP, SIGCONT).

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace perdure::test {

class child_process {
public:
  /// Starts `argv[0]` with `argv`.
  explicit child_process(std::vector<std::string> argv);

  /// Kills it (SIGKILL) if it still runs.
  ~child_process();

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Waits until it printed `word` (or `timeout` passed).
  bool wait_for(const std::string& word, std::chrono::milliseconds timeout);

  /// SIGKILL, and reaps it (`output()` then holds all it printed).
  void sigkill();

  /// Sends `signal` (SIGSTOP, SIGCONT, ...).
  void signal(int signal);

  /// SIGSTOP, returning once every thread of it has stopped: `kill` only
  /// queues the signal, and a running thread may go on for a moment.
  bool stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Waits for a normal exit; returns the exit code (-1 on timeout/signal).
  /// A child printing more than a pipe holds (64 KiB) meanwhile blocks:
  /// `wait_for` its last word instead.
  int wait_exit(std::chrono::seconds timeout);

  pid_t pid() const noexcept {
    return pid_;
  }

  const std::string& output() const noexcept {
    return buffer_;
  }

private:
  /// Reads what a process that ended left in the pipe.
  void read_rest();

  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
};

} // namespace perdure::test
