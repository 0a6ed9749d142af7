// The torture run: every capability at once on one PostgreSQL, three
// runtimes and two clients, while processes and the database fail on a
// schedule drawn from a seed; then the invariants (see invariants.cpp).
//
//   perdure-torture [--seconds N | --minutes N] [--seed S] [--dir D]
//                   [--only FAULT] [--sqlite]
//
// prints a JSON summary and exits 0 only with no violation. --sqlite runs
// one runtime and the clients on an embedded SQLite file in a small tmpfs,
// with SIGKILLs and a full disk. The same
// program is started again by the run as a runtime and as a client:
//
//   perdure-torture runtime <relay url> <direct url> <executor> <dir>
//   perdure-torture client <relay url> <dir> <index> <seed>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "perdure/perdure.hpp"
#include "support/pg_cluster.hpp"
#include "support/sigterm_wait.hpp"
#include "torture/chaos.hpp"
#include "torture/workload.hpp"

using namespace std::chrono_literals;
using namespace perdure;

namespace {

constexpr const char* schema = "torture";

int run_runtime(const std::string& relay_url, const std::string& direct_url,
                const std::string& executor, const std::string& dir) {
  test::sigterm_wait term; // before any thread starts
  // PERDURE_TORTURE_LOG=debug (or info) for more of the runtimes' story.
  auto level = std::getenv("PERDURE_TORTURE_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level)
                          : spdlog::level::warn);
  config cfg;
  cfg.database_url = relay_url;
  cfg.schema = schema;
  cfg.executor_id = executor;
  cfg.lease_timeout = 2s;
  cfg.db_retry_budget = 3s;
  cfg.passivate_after = 1s;
  cfg.object_idle_timeout = 2s;
  cfg.stranded_check = 2s;
  cfg.orphan_retry = 200ms;
  cfg.poll_interval = 50ms;
  torture::effects_log log{dir + "/effects." + executor + "."
                           + std::to_string(::getpid())};
  runtime rt{cfg};
  torture::register_workload(rt, {&log, test::database::named(direct_url,
                                                               schema)});
  try {
    rt.start();
  } catch (const std::exception& ex) {
    std::cerr << "start failed: " << ex.what() << std::endl;
    return 3; // the conductor starts it again
  }
  term.wait();
  rt.stop();
  return 0;
}

int run_client(const std::string& relay_url, const std::string& dir,
               int index, std::uint64_t seed) {
  test::sigterm_wait term; // before any thread starts
  spdlog::set_level(spdlog::level::warn);
  std::atomic<bool> stop{false};
  std::thread waiter{[&] {
    term.wait();
    stop = true;
  }};
  config cfg;
  cfg.database_url = relay_url;
  cfg.schema = schema;
  cfg.db_retry_budget = 3s;
  cfg.poll_interval = 50ms;
  torture::effects_log log{dir + "/clientlog." + std::to_string(index)};
  for (;;) {
    try {
      client c{cfg};
      torture::drive_client(c, log, index, seed, 3, stop);
      break;
    } catch (const error& ex) { // connecting while the server is down
      if (stop)
        break;
      std::this_thread::sleep_for(300ms);
    }
  }
  waiter.join();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "runtime" && argc == 6)
    return run_runtime(argv[2], argv[3], argv[4], argv[5]);
  if (mode == "client" && argc == 6)
    return run_client(argv[2], argv[3], std::stoi(argv[4]),
                      std::stoull(argv[5]));
  torture::torture_options opts;
  opts.self = std::filesystem::read_symlink("/proc/self/exe").string();
  opts.dir = (std::filesystem::temp_directory_path() / "perdure-torture").string();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return std::string{argv[++i]};
    };
    if (a == "--seconds")
      opts.seconds = std::stoi(next());
    else if (a == "--minutes")
      opts.seconds = 60 * std::stoi(next());
    else if (a == "--seed")
      opts.seed = std::stoull(next());
    else if (a == "--sqlite")
      opts.sqlite = true;
    else if (a == "--only")
      opts.only = next();
    else if (a == "--dir")
      opts.dir = next();
    else {
      std::cerr << "usage: perdure-torture [--seconds N | --minutes N] "
                   "[--seed S] [--dir D] [--only FAULT] [--sqlite]\n";
      return 2;
    }
  }
  if (opts.sqlite)
    opts.runtimes = 1; // one runtime per SQLite file
  if (!opts.sqlite && !test::pg_cluster::available()) {
    std::cerr << "the torture run needs PostgreSQL's binaries and the "
                 "postgres user (scripts/test installs them)\n";
    return 2;
  }
  return torture::run_torture(opts) == 0 ? 0 : 1;
}
