#pragma once

// The command groups of `perdure`, each adding its subcommands to the
// application. Each command's callback throws `cli_error` (or lets a
// `perdure::error` through) for `main` to report.

namespace CLI {
class App;
} // namespace CLI

namespace perdure::cli {

class context;

/// `runs list | show | cancel | resume | fork | export`.
void add_runs_commands(CLI::App& app, context& ctx);

/// `awakeables resolve | reject`, `promises resolve | reject`, `send`.
void add_signal_commands(CLI::App& app, context& ctx);

/// `objects list | state | calls`.
void add_object_commands(CLI::App& app, context& ctx);

/// `queues list | stats | dead-letters | requeue`.
void add_queue_commands(CLI::App& app, context& ctx);

/// `schedules list | show | pause | resume | trigger | backfill | remove`.
void add_schedule_commands(CLI::App& app, context& ctx);

/// `executors`, `versions`, `doctor`.
void add_health_commands(CLI::App& app, context& ctx);

/// `retention`: the collectors' turn, totals and what waits.
void add_retention_commands(CLI::App& app, context& ctx);

} // namespace perdure::cli
