#include "support/child_process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace perdure::test {

child_process::child_process(std::vector<std::string> argv) {
  int fds[2];
  if (pipe(fds) != 0)
    throw std::runtime_error("pipe");
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  out_ = fds[0];
}

child_process::~child_process() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  close(out_);
}

bool child_process::wait_for(const std::string& word,
                             std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (buffer_.find(word) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char chunk[4096];
    auto n = read(out_, chunk, sizeof chunk);
    if (n <= 0)
      return buffer_.find(word) != std::string::npos;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
  return true;
}

void child_process::sigkill() {
  if (pid_ <= 0)
    return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  read_rest();
}

void child_process::read_rest() {
  // The process is gone: what it wrote is in the pipe, then end of file.
  char chunk[4096];
  for (ssize_t n; (n = read(out_, chunk, sizeof chunk)) > 0;)
    buffer_.append(chunk, static_cast<size_t>(n));
}

void child_process::signal(int sig) {
  if (pid_ > 0)
    kill(pid_, sig);
}

bool child_process::stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0)
    return false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    // WUNTRACED reports the stop once the whole group has stopped.
    if (waitpid(pid_, &status, WNOHANG | WUNTRACED) == pid_)
      return WIFSTOPPED(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

int child_process::wait_exit(std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    auto r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      read_rest();
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return -1;
}

} // namespace perdure::test
