#include "torture/chaos.hpp"

#include <fcntl.h>
#include <signal.h>

#include <csignal>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "support/pg_cluster.hpp"
#include "support/small_disk.hpp"
#include "support/test_support.hpp"
#include "torture/effects.hpp"
#include "torture/invariants.hpp"
#include "torture/relay.hpp"

using namespace std::chrono_literals;

namespace perdure::torture {

namespace {

/// The lease and retry budget the runtimes run with (main.cpp sets them):
/// stalls last longer than the lease, outages longer than the budget.
constexpr auto lease = 2s;
constexpr auto retry_budget = 3s;

pid_t spawn(const std::vector<std::string>& args, const std::string& out) {
  auto pid = ::fork();
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
  }
  return out;
}

/// The processes of the run, restarted when they die.
class fleet {
public:
  fleet(const torture_options& opts, std::string relay_url,
        std::string direct_url)
    : opts_(opts), relay_url_(std::move(relay_url)),
      direct_url_(std::move(direct_url)) {
  }

  void start_runtime(int slot, const std::string& executor) {
    auto pid = spawn({opts_.self, "runtime", relay_url_, direct_url_,
                      executor, opts_.dir},
                     opts_.dir + "/runtime." + executor + ".out");
    std::lock_guard guard{mtx_};
    runtimes_[slot] = {pid, executor};
  }

  void start_client(int index) {
    auto pid = spawn({opts_.self, "client", relay_url_, opts_.dir,
                      std::to_string(index), std::to_string(opts_.seed)},
                     opts_.dir + "/client." + std::to_string(index) + ".out");
    std::lock_guard guard{mtx_};
    clients_[index] = pid;
  }

  /// SIGKILLs runtime `slot` and starts it again, with its own executor id
  /// or (`fresh`) a new one.
  void kill_runtime(int slot, bool fresh) {
    pid_t pid;
    std::string executor;
    {
      std::lock_guard guard{mtx_};
      pid = runtimes_[slot].first;
      executor = runtimes_[slot].second;
      runtimes_[slot].first = -1; // the watcher leaves it alone
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    note("kill", pid);
    if (fresh)
      executor = "rt" + std::to_string(slot) + "-" + std::to_string(++fresh_);
    start_runtime(slot, executor);
  }

  /// SIGSTOPs runtime `slot` for `d`, then SIGCONT.
  void stall_runtime(int slot, std::chrono::milliseconds d) {
    pid_t pid;
    {
      std::lock_guard guard{mtx_};
      pid = runtimes_[slot].first;
    }
    ::kill(pid, SIGSTOP);
    note("stop", pid);
    std::this_thread::sleep_for(d);
    ::kill(pid, SIGCONT);
    note("cont", pid);
  }

  /// Restarts runtimes that exited by themselves (start refused while the
  /// database was down, say); counts them.
  void watch() {
    std::lock_guard guard{mtx_};
    for (auto& [slot, proc] : runtimes_) {
      if (proc.first <= 0)
        continue;
      int status = 0;
      if (::waitpid(proc.first, &status, WNOHANG) == proc.first) {
        events_.push_back({mono_ns(), "exit", proc.first});
        ++exits_;
        auto executor = proc.second;
        auto pid = spawn({opts_.self, "runtime", relay_url_, direct_url_,
                          executor, opts_.dir},
                         opts_.dir + "/runtime." + executor + ".out");
        proc.first = pid;
      }
    }
  }

  /// Asks the clients to finish (SIGTERM) and waits for them.
  bool stop_clients(std::chrono::seconds limit) {
    std::vector<pid_t> pids;
    {
      std::lock_guard guard{mtx_};
      for (auto& [i, pid] : clients_)
        pids.push_back(pid);
    }
    for (auto pid : pids)
      ::kill(pid, SIGTERM);
    auto end = std::chrono::steady_clock::now() + limit;
    bool all = true;
    for (auto pid : pids) {
      int status = 0;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > end) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          all = false;
          break;
        }
        std::this_thread::sleep_for(50ms);
      }
    }
    return all;
  }

  void stop_runtimes() {
    std::vector<pid_t> pids;
    {
      std::lock_guard guard{mtx_};
      for (auto& [slot, proc] : runtimes_)
        pids.push_back(proc.first);
      runtimes_.clear();
    }
    for (auto pid : pids)
      ::kill(pid, SIGTERM);
    for (auto pid : pids) {
      for (int i = 0; i < 300; ++i) {
        if (::waitpid(pid, nullptr, WNOHANG) == pid)
          break;
        std::this_thread::sleep_for(100ms);
        if (i == 299) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
        }
      }
    }
  }

  std::vector<process_event> events() {
    std::lock_guard guard{mtx_};
    return events_;
  }

  int exits() {
    std::lock_guard guard{mtx_};
    return exits_;
  }

private:
  void note(const char* kind, pid_t pid) {
    std::lock_guard guard{mtx_};
    events_.push_back({mono_ns(), kind, pid});
  }

  const torture_options& opts_;
  std::string relay_url_;
  std::string direct_url_;
  std::mutex mtx_;
  std::map<int, std::pair<pid_t, std::string>> runtimes_;
  std::map<int, pid_t> clients_;
  std::vector<process_event> events_;
  int fresh_ = 0;
  int exits_ = 0;
};

/// The fault kind a draw in [0, 100) picks (the weights of the schedule).
std::string kind_of(std::uint64_t pick, bool sqlite) {
  if (sqlite)
    return pick < 70 ? "sigkill" : "disk_full";
  if (pick < 34)
    return "sigkill";
  if (pick < 42)
    return "stall_past_lease";
  if (pick < 52)
    return "pg_restart_immediate";
  if (pick < 57)
    return "pg_down_past_budget";
  if (pick < 71)
    return "pg_terminate_backend";
  if (pick < 87)
    return "connections_cut";
  return "connections_stalled";
}

/// Counts what is not ended yet (nothing, once all work ended).
std::int64_t unfinished(const test::database& db) {
  try {
    test::sql_client sql{db};
    return std::stoll(sql.scalar("SELECT count(*) FROM " + sql.table("runs")
                                 + " WHERE status IN ('PENDING', 'ENQUEUED')"));
  } catch (const std::exception&) {
    return -1;
  }
}

} // namespace

namespace {

/// Set by SIGINT or SIGTERM: the faults stop early, and the run ends as it
/// would (clients finish, work settles, invariants are checked), leaving
/// no server or process of its own behind.
volatile std::sig_atomic_t interrupted = 0;

void interrupt(int) {
  interrupted = 1;
}

} // namespace

int run_torture(const torture_options& opts) {
  ::signal(SIGINT, interrupt);
  ::signal(SIGTERM, interrupt);
  // Every connection of five processes passes through the relay (two
  // descriptors each): more than the default 1024 at the peaks.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  std::filesystem::remove_all(opts.dir);
  std::filesystem::create_directories(opts.dir);
  std::optional<test::pg_cluster> cluster;
  std::optional<tcp_relay> relay;
  std::optional<test::small_disk> disk;
  std::string direct_url, relay_url;
  if (opts.sqlite) {
    disk.emplace(256);
    if (!disk->mounted())
      throw std::runtime_error("cannot mount a tmpfs for the SQLite file "
                               "(the torture run needs root)");
    direct_url = relay_url = "sqlite://" + (disk->dir() / "torture.db").string();
  } else {
    cluster.emplace();
    auto url = cluster->url();
    relay.emplace(std::stoi(url.substr(url.rfind(':') + 1)));
    direct_url = url;
    relay_url = "postgresql://postgres@127.0.0.1:"
                + std::to_string(relay->port()) + "/perdure_test";
  }
  auto db = test::database::named(direct_url, "torture");
  {
    test::sql_client sql{db};
    sql.exec("CREATE TABLE IF NOT EXISTS torture_tx (run_id TEXT NOT NULL, "
             "name TEXT NOT NULL)");
  }
  std::cerr << "torture: seed " << opts.seed << ", " << opts.seconds
            << " s of faults, logs in " << opts.dir << std::endl;

  fleet procs{opts, relay_url, direct_url};
  for (int r = 0; r < opts.runtimes; ++r)
    procs.start_runtime(r, "rt" + std::to_string(r));
  for (int c = 0; c < opts.clients; ++c)
    procs.start_client(c);

  std::atomic<bool> watching{true};
  std::thread watcher{[&] {
    while (watching) {
      procs.watch();
      std::this_thread::sleep_for(100ms);
    }
  }};

  // The fault schedule: drawn from the seed, so a run can be repeated.
  std::mt19937_64 rng{opts.seed};
  auto below = [&](std::uint64_t n) { return rng() % n; };
  std::map<std::string, int> faults;
  std::ostringstream schedule;
  auto t0 = std::chrono::steady_clock::now();
  auto end = t0 + std::chrono::seconds{opts.seconds};
  while (std::chrono::steady_clock::now() < end && !interrupted) {
    std::this_thread::sleep_for(std::chrono::milliseconds{800 + below(2400)});
    auto at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count();
    auto pick = below(100);
    if (!opts.only.empty()) // draw until the kind asked for comes up
      while (kind_of(pick, opts.sqlite) != opts.only)
        pick = below(100);
    auto slot = static_cast<int>(below(static_cast<std::uint64_t>(opts.runtimes)));
    std::string kind;
    try {
      kind = kind_of(pick, opts.sqlite);
      if (kind == "sigkill") {
        procs.kill_runtime(slot, below(2) == 0);
      } else if (kind == "stall_past_lease") {
        procs.stall_runtime(slot, lease + std::chrono::milliseconds{
                                            1000 + below(1500)});
      } else if (kind == "disk_full") {
        // Full past the retry budget or not: writes wait, then work goes on.
        auto filler = disk->fill();
        std::this_thread::sleep_for(std::chrono::milliseconds{500 + below(5000)});
        std::filesystem::remove(filler);
      } else if (kind == "pg_restart_immediate") {
        cluster->restart("immediate");
      } else if (kind == "pg_down_past_budget") {
        cluster->stop("immediate");
        std::this_thread::sleep_for(retry_budget
                                    + std::chrono::milliseconds{1000 + below(2000)});
        cluster->start();
      } else if (kind == "pg_terminate_backend") {
        cluster->kill_backends();
      } else if (kind == "connections_cut") {
        relay->cut_all();
      } else {
        auto d = std::chrono::milliseconds{500 + below(3000)};
        relay->stall(d);
        std::this_thread::sleep_for(d);
      }
    } catch (const std::exception& ex) {
      // A fault that could not be applied (pg_ctl refused) is noted, and
      // the server brought back if it is down.
      schedule << at << " " << kind << " failed: " << ex.what() << "\n";
      try {
        if (cluster)
          cluster->start();
      } catch (const std::exception&) {
      }
      continue;
    }
    ++faults[kind];
    schedule << at << " " << kind << " rt" << slot << "\n";
    std::cerr << "torture: " << at << " s " << kind << " (rt" << slot
              << "); " << (relay ? relay->open_count() : 0)
              << " connections open"
              << std::endl;
  }
  auto last_fault = std::chrono::steady_clock::now();
  std::cerr << "torture: faults stopped" << (interrupted ? " (interrupted)" : "")
            << "; letting the clients finish" << std::endl;

  std::vector<std::string> violations;
  if (!procs.stop_clients(300s))
    violations.push_back("a client did not finish its operations within 300 s "
                         "after the faults stopped");
  // Every run, item and invocation ends within the bound.
  std::int64_t left = -1;
  auto settle_end = std::chrono::steady_clock::now()
                    + std::chrono::seconds{opts.settle_seconds};
  while (std::chrono::steady_clock::now() < settle_end) {
    left = unfinished(db);
    if (left == 0)
      break;
    std::this_thread::sleep_for(250ms);
  }
  auto settle = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - last_fault)
                  .count();
  if (left != 0) {
    std::ostringstream why;
    why << left << " runs still PENDING or ENQUEUED " << opts.settle_seconds
        << " s after the faults stopped";
    try {
      test::sql_client sql{db};
      auto rows = sql.exec("SELECT id, name, status, executor, "
                           "coalesce(object_type, ''), coalesce(object_key, '')"
                           " FROM " + sql.table("runs")
                           + " WHERE status IN ('PENDING', 'ENQUEUED') LIMIT 10");
      for (auto& r : rows.rows)
        why << "; " << r[0].value_or("") << " " << r[1].value_or("") << " "
            << r[2].value_or("") << " on '" << r[3].value_or("") << "' "
            << r[4].value_or("") << "/" << r[5].value_or("");
    } catch (const std::exception&) {
    }
    violations.push_back(why.str());
  }
  watching = false;
  watcher.join();
  procs.stop_runtimes();

  auto report = check_invariants({db, opts.dir, procs.events(), mono_ns()});
  violations.insert(violations.end(), report.violations.begin(),
                    report.violations.end());

  std::ostringstream json;
  json << "{\"seed\": " << opts.seed << ", \"fault_seconds\": " << opts.seconds
       << ", \"runtimes\": " << opts.runtimes << ", \"clients\": "
       << opts.clients << ", \"faults\": {";
  const char* sep = "";
  int total_faults = 0;
  for (auto& [k, n] : faults) {
    json << sep << "\"" << k << "\": " << n;
    sep = ", ";
    total_faults += n;
  }
  json << "}, \"faults_total\": " << total_faults
       << ", \"runtime_exits_restarted\": " << procs.exits()
       << ", \"store\": \"" << (opts.sqlite ? "sqlite" : "postgres")
       << "\", \"connections_cut_by_relay\": "
       << (relay ? relay->cut_count() : 0)
       << ", \"operations\": {";
  sep = "";
  for (auto& [k, n] : report.counts) {
    json << sep << "\"" << json_escape(k) << "\": " << n;
    sep = ", ";
  }
  json << "}, \"seconds_to_end_after_last_fault\": " << settle
       << ", \"violations\": [";
  sep = "";
  for (auto& v : violations) {
    json << sep << "\"" << json_escape(v) << "\"";
    sep = ", ";
  }
  json << "]}";
  std::cout << json.str() << std::endl;
  std::ofstream{opts.dir + "/summary.json"} << json.str() << "\n";
  std::ofstream{opts.dir + "/schedule.txt"} << schedule.str();
  if (!violations.empty())
    std::cerr << "torture: " << violations.size()
              << " violations; repeat with --seed " << opts.seed
              << " (fault schedule in " << opts.dir << "/schedule.txt)"
              << std::endl;
  return static_cast<int>(violations.size());
}

} // namespace perdure::torture
