#include "operators/cli_runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace perdure::test {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

cli_result run_cli(const database& db, const std::vector<std::string>& args,
                   int timeout_s) {
  char out_path[] = "/tmp/perdure-cli-out.XXXXXX";
  char err_path[] = "/tmp/perdure-cli-err.XXXXXX";
  int out_fd = ::mkstemp(out_path);
  int err_fd = ::mkstemp(err_path);
  std::vector<std::string> argv_s{PERDURE_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::setenv("PERDURE_DATABASE_URL", db.url.c_str(), 1);
    ::setenv("PERDURE_SCHEMA", db.schema.c_str(), 1);
    ::setenv("NO_COLOR", "1", 1);
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  cli_result r;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds{timeout_s};
  int status = 0;
  for (;;) {
    auto done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid)
      break;
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.err = "(killed after " + std::to_string(timeout_s) + " s)\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  if (WIFEXITED(status))
    r.code = WEXITSTATUS(status);
  ::close(out_fd);
  ::close(err_fd);
  r.out = slurp(out_path);
  r.err += slurp(err_path);
  ::unlink(out_path);
  ::unlink(err_path);
  return r;
}

} // namespace perdure::test
