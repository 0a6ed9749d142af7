#pragma once

namespace CLI {
class App;
} // namespace CLI

namespace perdure::cli {

class context;

/// `serve`: the admin endpoint over the CLI's client.
void add_serve_command(CLI::App& app, context& ctx);

} // namespace perdure::cli
