#pragma once

// How a worker process of the tests waits for its clean stop: SIGTERM is
// blocked in the thread that makes this (call it first in main, so every
// thread started later inherits the mask) and taken by `wait`, never by a
// handler that would run on some runtime thread.

#include <signal.h>

namespace perdure::test {

class sigterm_wait {
public:
  sigterm_wait();
  /// Blocks until SIGTERM arrives.
  void wait();

private:
  sigset_t set_;
};

} // namespace perdure::test
