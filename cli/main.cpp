// perdure: the operator's command-line tool, a thin program over
// perdure::client (no runtime, no lease). Reads PERDURE_DATABASE_URL and
// PERDURE_SCHEMA like the runtimes.

#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/error.hpp"
#include "perdure/version.hpp"
#include "serve.hpp"

namespace {

using perdure::cli::exit_code;

/// The exit code a library error means.
exit_code code_of(perdure::errc e) {
  switch (e) {
    case perdure::errc::not_found:
    case perdure::errc::unknown_workflow:
      return exit_code::not_found;
    case perdure::errc::invalid_argument:
    case perdure::errc::conflicting_id:
    case perdure::errc::already_resolved:
    case perdure::errc::payload_too_large:
      return exit_code::refused;
    case perdure::errc::store_unavailable:
      return exit_code::unavailable;
    default:
      return exit_code::failed;
  }
}

int report(perdure::cli::context& ctx, exit_code code, const std::string& msg) {
  if (ctx.opts.json)
    ctx.out << nlohmann::json{{"error", msg}, {"exit_code", int{code}}}.dump(
                 -1, ' ', false, nlohmann::json::error_handler_t::replace)
            << '\n';
  ctx.err << "perdure: " << msg << '\n';
  return code;
}

} // namespace

int main(int argc, char** argv) {
  perdure::cli::context ctx{std::cout, std::cerr, std::cin};
  CLI::App app{"perdure: see and act on Perdure's runs, objects, queues and schedules"};
  app.name("perdure");
  app.require_subcommand(1);
  // Global options may come after the subcommand too (`runs list --json`).
  app.fallthrough();
  app.set_version_flag("-V,--cli-version", perdure::version);
  if (auto* url = std::getenv("PERDURE_DATABASE_URL"))
    ctx.opts.database_url = url;
  if (auto* schema = std::getenv("PERDURE_SCHEMA"))
    ctx.opts.schema = schema;
  app.add_option("-d,--database", ctx.opts.database_url,
                 "The store's URL (default: PERDURE_DATABASE_URL, else "
                 "sqlite://perdure.db)");
  app.add_option("--schema", ctx.opts.schema,
                 "PostgreSQL schema (default: PERDURE_SCHEMA, else perdure)");
  app.add_flag("--json", ctx.opts.json, "Print JSON for scripts");
  app.add_flag("-y,--yes", ctx.opts.yes,
               "Act on many runs without asking");
  auto* budget = app.add_option("--retry-budget", "Seconds to retry a lost "
                                                  "database (default 5)");
  perdure::cli::add_runs_commands(app, ctx);
  perdure::cli::add_signal_commands(app, ctx);
  perdure::cli::add_object_commands(app, ctx);
  perdure::cli::add_queue_commands(app, ctx);
  perdure::cli::add_schedule_commands(app, ctx);
  perdure::cli::add_retention_commands(app, ctx);
  perdure::cli::add_health_commands(app, ctx);
  perdure::cli::add_serve_command(app, ctx);
  app.parse_complete_callback([&] {
    if (budget->count() > 0)
      ctx.opts.retry_budget = std::chrono::milliseconds{
        static_cast<std::int64_t>(budget->as<double>() * 1000)};
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return exit_code::usage;
  } catch (const perdure::cli::cli_error& e) {
    return report(ctx, e.code(), e.what());
  } catch (const perdure::error& e) {
    return report(ctx, code_of(e.code()), e.what());
  } catch (const std::exception& e) {
    return report(ctx, exit_code::failed, e.what());
  }
  return ctx.status;
}
