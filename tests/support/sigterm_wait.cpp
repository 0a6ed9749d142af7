#include "support/sigterm_wait.hpp"

#include <pthread.h>

namespace perdure::test {

sigterm_wait::sigterm_wait() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

void sigterm_wait::wait() {
  int sig = 0;
  sigwait(&set_, &sig);
}

} // namespace perdure::test
