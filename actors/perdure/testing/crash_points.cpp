#include "perdure/testing/crash_points.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "perdure/detail/runtime/client_access.hpp"
#include "perdure/error.hpp"
#include "perdure/testing/manual_clock.hpp"
#include "perdure/workflow_handle.hpp"

namespace perdure::testing {

std::string crash_check_result::to_text() const {
  std::ostringstream out;
  out << crash_points << " crash points checked";
  if (failures.empty())
    out << ", every one recovered right";
  for (auto& f : failures)
    out << "\n  " << f;
  return out.str();
}

namespace detail {

namespace {

constexpr const char* run_id = "crash-check";
constexpr const char* executor = "crash-check";

struct seen {
  run_status status = run_status::pending;
  std::optional<std::string> output;
  std::optional<std::string> error;
  bool ended = false;
};

std::string file_for(const crash_check_options& opts, const std::string& tag) {
  auto dir = opts.directory.empty() ? std::filesystem::temp_directory_path()
                                    : std::filesystem::path{opts.directory};
  return (dir / ("perdure-crash-check-" + std::to_string(::getpid()) + "-"
                 + tag + ".db"))
    .string();
}

void remove_db(const std::string& path) {
  std::error_code ec;
  for (auto suffix : {"", "-wal", "-shm"})
    std::filesystem::remove(path + suffix, ec);
}

config config_for(const crash_check_options& opts, const std::string& path,
                  std::shared_ptr<const config::test_hooks> hooks) {
  auto cfg = opts.base;
  cfg.database_url = "sqlite://" + path;
  cfg.executor_id = executor;
  cfg.testing = std::move(hooks);
  return cfg;
}

/// Waits for the run to end; with a manual clock, moves it on meanwhile
/// so sleeps and timers take no time.
seen finish(runtime& rt, std::chrono::milliseconds timeout) {
  auto* clock = dynamic_cast<manual_clock*>(rt.cfg().clock.get());
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      auto slice = clock ? std::chrono::milliseconds{2} : timeout;
      auto out = perdure::detail::client_access::await(rt, run_id, slice);
      if (is_terminal(out.status))
        return {out.status, out.output, out.error, true};
    } catch (const error& ex) {
      if (ex.code() != errc::timeout)
        throw;
    }
    if (std::chrono::steady_clock::now() >= end)
      return {};
    if (clock) // a day's sleep in six slices
      clock->advance(std::chrono::hours{4});
  }
}

std::string describe(const seen& s) {
  if (!s.ended)
    return "not ended";
  std::string out{to_string(s.status)};
  if (s.error)
    out += " (" + *s.error + ")";
  return out;
}

/// Runs the workflow in a child process that SIGKILLs itself right after
/// the `k`-th checkpoint committed. Returns whether it died there.
bool run_until_checkpoint(const std::function<void(runtime&)>& setup,
                          std::string_view workflow, const std::string& input,
                          const crash_check_options& opts,
                          const std::string& path, int k) {
  auto pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("check_crash_points: fork failed");
  if (pid == 0) {
    std::atomic<int> commits{0};
    auto hooks = std::make_shared<config::test_hooks>();
    hooks->checkpoint_committed = [&](const std::string&, std::int32_t) {
      if (++commits == k)
        ::kill(::getpid(), SIGKILL); // right after it, as a crash would
    };
    try {
      runtime rt{config_for(opts, path, hooks)};
      setup(rt);
      rt.start();
      perdure::detail::client_access::start_encoded(rt, workflow, input,
                                                    {.id = run_id});
      finish(rt, opts.timeout);
    } catch (...) {
    }
    ::_exit(0); // ended before its k-th checkpoint
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/// The uninterrupted run: how it ends, and (in `commits_made`) how many
/// checkpoints it made.
seen run_reference(const std::function<void(runtime&)>& setup,
                   std::string_view workflow, const std::string& input,
                   const crash_check_options& opts, int& commits_made) {
  auto path = file_for(opts, "reference");
  remove_db(path);
  std::atomic<int> commits{0};
  auto hooks = std::make_shared<config::test_hooks>();
  hooks->checkpoint_committed = [&](const std::string&, std::int32_t) {
    ++commits;
  };
  seen reference;
  {
    runtime rt{config_for(opts, path, hooks)};
    setup(rt);
    rt.start();
    perdure::detail::client_access::start_encoded(rt, workflow, input,
                                                  {.id = run_id});
    reference = finish(rt, opts.timeout);
    rt.stop();
  }
  remove_db(path);
  commits_made = commits;
  return reference;
}

/// Crashes the run right after its `k`-th checkpoint, recovers it with a
/// fresh runtime and adds to `failures` what differs from `reference`.
void check_crash_point(const std::function<void(runtime&)>& setup,
                       std::string_view workflow, const std::string& input,
                       const crash_check_options& opts, int k, int of,
                       const seen& reference,
                       std::vector<std::string>& failures) {
  auto where = "crash after checkpoint " + std::to_string(k) + " of "
               + std::to_string(of) + ": ";
  auto path = file_for(opts, std::to_string(k));
  remove_db(path);
  if (!run_until_checkpoint(setup, workflow, input, opts, path, k)) {
    failures.push_back(where + "the run ended before it (fewer "
                               "checkpoints than uninterrupted: is "
                               "the workflow deterministic?)");
    remove_db(path);
    return;
  }
  // What was durable when it died.
  std::set<std::pair<std::string, std::int32_t>> durable;
  {
    client c{config_for(opts, path, nullptr)};
    for (auto& run : c.list_runs({.limit = 1000}).runs)
      for (auto& rec : c.history(run.id))
        durable.insert({run.id, rec.seq});
  }
  // Recovery by a fresh runtime with the same executor id.
  std::mutex mtx;
  std::vector<std::string> again;
  auto hooks = std::make_shared<config::test_hooks>();
  hooks->step_starting = [&](const std::string& id, std::int32_t seq) {
    if (durable.count({id, seq}) > 0) {
      std::lock_guard guard{mtx};
      again.push_back(id + " step " + std::to_string(seq));
    }
  };
  seen recovered;
  try {
    runtime rt{config_for(opts, path, hooks)};
    setup(rt);
    rt.start();
    recovered = finish(rt, opts.timeout);
    rt.stop();
  } catch (const std::exception& ex) {
    failures.push_back(where + "recovery failed: " + ex.what());
    remove_db(path);
    return;
  }
  remove_db(path);
  if (recovered.status != reference.status || !recovered.ended)
    failures.push_back(where + "the run ended " + describe(recovered)
                       + ", uninterrupted " + describe(reference));
  else if (recovered.output != reference.output)
    failures.push_back(where + "the run's output differs from the "
                               "uninterrupted run's");
  for (auto& a : again)
    failures.push_back(where + "the body of " + a
                       + " ran again after its checkpoint committed");
}

} // namespace

crash_check_result check_crash_points(const std::function<void(runtime&)>& setup,
                                      std::string_view workflow,
                                      std::string input,
                                      crash_check_options opts) {
  crash_check_result result;
  auto reference
    = run_reference(setup, workflow, input, opts, result.crash_points);
  if (!reference.ended) {
    result.failures.push_back("the uninterrupted run did not end within the "
                              "timeout");
    return result;
  }
  auto points = std::min(result.crash_points, opts.max_crash_points);
  for (int k = 1; k <= points; ++k)
    check_crash_point(setup, workflow, input, opts, k, result.crash_points,
                      reference, result.failures);
  return result;
}

} // namespace detail

} // namespace perdure::testing
