#include "perdure/cli/context.hpp"

#include <unistd.h>

#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "perdure/cli/output.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

context::context(std::ostream& out, std::ostream& err, std::istream& in)
  : out(out), err(err), in(in) {
}

context::~context() = default;

namespace {

/// The file a `sqlite://` URL names (as the store reads it).
std::string sqlite_path(const std::string& url) {
  auto rest = url.substr(std::string_view{"sqlite://"}.size());
  return rest;
}

} // namespace

perdure::client& context::client(bool migrate) {
  if (client_)
    return *client_;
  // An operator's shell may carry OTEL_* for the applications: the CLI
  // runs no workflows, so it exports no spans (and a malformed endpoint
  // there is no reason for a command to fail).
  setenv("OTEL_SDK_DISABLED", "true", 1);
  auto cfg = perdure::config::from_env();
  cfg.migrate_schema = migrate;
  if (!opts.database_url.empty())
    cfg.database_url = opts.database_url;
  cfg.schema = opts.schema;
  cfg.db_retry_budget = opts.retry_budget;
  // The library's own lines (a retry, a lost connection) would mix with
  // the output: errors reach the operator as the command's message.
  cfg.logger = std::make_shared<spdlog::logger>(
    "perdure-cli", std::make_shared<spdlog::sinks::null_sink_mt>());
  if (cfg.database_url.rfind("sqlite://", 0) == 0) {
    auto path = sqlite_path(cfg.database_url);
    if (!std::filesystem::exists(path))
      throw cli_error(exit_code::not_found,
                      "no SQLite database at '" + path
                        + "': set PERDURE_DATABASE_URL (or --database) to "
                          "the URL your runtimes use");
  }
  try {
    client_ = std::make_unique<perdure::client>(std::move(cfg));
  } catch (const perdure::error& ex) {
    // Its schema (older than this CLI, or none): the message says what to
    // do.
    if (ex.code() == errc::invalid_argument
        && std::string_view{ex.what()}.find("perdure migrate")
             != std::string_view::npos)
      throw cli_error(exit_code::failed,
                      std::string{"cannot use the store: "} + ex.what());
    throw cli_error(exit_code::unavailable,
                    std::string{"cannot open the store: "} + ex.what()
                      + " (check PERDURE_DATABASE_URL or --database)");
  }
  return *client_;
}

bool context::colour() const {
  return !opts.json && use_colour(out);
}

void context::confirm(const std::string& what) {
  if (opts.yes)
    return;
  if (&in != &std::cin || ::isatty(0) != 1)
    throw cli_error(exit_code::aborted,
                    what + ": not confirmed (no terminal to ask on; pass "
                           "--yes to go on, or --dry-run to look first)");
  err << what << "? [y/N] " << std::flush;
  std::string answer;
  std::getline(in, answer);
  if (answer != "y" && answer != "Y" && answer != "yes")
    throw cli_error(exit_code::aborted, "not done: declined");
}

bool context::json(const nlohmann::json& j) {
  if (!opts.json)
    return false;
  print_json(out, j);
  return true;
}

} // namespace perdure::cli
