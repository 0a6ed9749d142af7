// `perdure runs ...`: the group.

#include <CLI/CLI.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/runs_show.hpp"

namespace perdure::cli {

void add_runs_commands(CLI::App& app, context& ctx) {
  auto* runs = app.add_subcommand("runs", "List, inspect and act on runs");
  runs->require_subcommand(1);
  add_runs_list(*runs, ctx);
  add_runs_actions(*runs, ctx);
}

} // namespace perdure::cli
