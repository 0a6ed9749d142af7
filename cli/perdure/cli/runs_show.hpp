#pragma once

#include <string>

namespace CLI {
class App;
} // namespace CLI

namespace perdure::cli {

class context;

/// `runs list` and `runs show`, added to `runs`.
void add_runs_list(CLI::App& runs, context& ctx);

/// `runs cancel | resume | fork | export`, added to `runs`.
void add_runs_actions(CLI::App& runs, context& ctx);

/// Prints run `id`: its state, its journal with timings, its children,
/// what it waits for and, for a saga, what would be undone.
void show_run(context& ctx, const std::string& id);

} // namespace perdure::cli
