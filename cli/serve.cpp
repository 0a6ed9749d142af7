// `perdure serve`: the admin endpoint and web console over a client, for
// operators who want the console without changing an application.

#include "serve.hpp"

#include <csignal>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>

#include "perdure/admin/endpoint.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

namespace {

volatile std::sig_atomic_t stopping = 0;

} // namespace

void add_serve_command(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand(
    "serve", "Serve the web console and the JSON API until interrupted");
  auto opts = std::make_shared<admin::endpoint_options>();
  opts->listen = "127.0.0.1:9464";
  cmd->add_option("--listen", opts->listen,
                  "host:port (default 127.0.0.1:9464; port 0: any free one)");
  cmd->add_option("--token", opts->token,
                  "Bearer token every /api request requires (default: "
                  "PERDURE_ADMIN_TOKEN; required off loopback)");
  cmd->callback([&ctx, opts] {
    admin::endpoint ep{ctx.client(), *opts};
    std::signal(SIGINT, [](int) { stopping = 1; });
    std::signal(SIGTERM, [](int) { stopping = 1; });
    auto host = opts->listen.substr(0, opts->listen.rfind(':'));
    ctx.out << "serving the console on http://" << host << ':' << ep.port()
            << "/ (Ctrl-C stops)" << std::endl;
    while (stopping == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
  });
}

} // namespace perdure::cli
