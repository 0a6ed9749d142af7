#pragma once

// What every command shares: the global options, the client (connected
// on first use) and where output goes.

#include <chrono>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace perdure {
class client;
} // namespace perdure

namespace perdure::cli {

/// Exit codes: what happened, for scripts.
enum exit_code : int {
  ok = 0,
  /// The command ran and found a problem (`doctor`), or a store error.
  failed = 1,
  /// Bad arguments or filters.
  usage = 2,
  /// An id or name that does not exist.
  not_found = 3,
  /// The store refused the action as asked (a run in the wrong status, a
  /// taken id, an awakeable already resolved).
  refused = 4,
  /// The database could not be reached.
  unavailable = 5,
  /// The operator declined the confirmation.
  aborted = 6,
};

/// An error the CLI reports itself: a message and its exit code.
class cli_error : public std::runtime_error {
public:
  cli_error(exit_code code, const std::string& what)
    : std::runtime_error(what), code_(code) {
  }

  exit_code code() const noexcept {
    return code_;
  }

private:
  exit_code code_;
};

struct global_options {
  std::string database_url;
  std::string schema = "perdure";
  /// Machine-readable output.
  bool json = false;
  /// Answer yes to confirmations (scripts).
  bool yes = false;
  /// How long a lost database is retried before a command gives up.
  std::chrono::milliseconds retry_budget{5000};
};

class context {
public:
  context(std::ostream& out, std::ostream& err, std::istream& in);
  ~context();

  global_options opts;

  /// The exit code of a command that ran to its end but found a problem
  /// (`doctor`): its output is complete, no error message follows.
  exit_code status = exit_code::ok;

  /// The client, connected on first use. Throws `cli_error` if the
  /// database cannot be reached (or a SQLite file does not exist: a CLI
  /// never creates one). The CLI changes no schema unless asked
  /// (`migrate`): an operator's role may not be allowed to.
  perdure::client& client(bool migrate = false);

  std::ostream& out;
  std::ostream& err;
  std::istream& in;

  /// Whether to colour `out`.
  bool colour() const;

  /// Asks to go on with `what` (more than one run): yes with `--yes`;
  /// without a terminal, a command must be given `--yes`.
  void confirm(const std::string& what);

  /// Prints `j` if `--json`, returning whether it did.
  bool json(const nlohmann::json& j);

private:
  std::unique_ptr<perdure::client> client_;
};

} // namespace perdure::cli
