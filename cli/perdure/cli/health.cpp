// `perdure executors`, `perdure versions`, `perdure doctor`.

#include <CLI/CLI.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

namespace {

using std::chrono::milliseconds;

std::string time_of(const nlohmann::json& j) {
  if (!j.is_string())
    return "-";
  auto s = j.get<std::string>();
  s[10] = ' ';
  return s.substr(0, 19);
}

std::string count(const nlohmann::json& j) {
  return std::to_string(j.get<std::int64_t>());
}

} // namespace

void add_health_commands(CLI::App& app, context& ctx) {
  app.add_subcommand("executors", "List runtimes' leases: state, heartbeat "
                                  "age, runs held")
    ->callback([&ctx] {
      auto j = executors_json(ctx.client().executors());
      if (ctx.json(j))
        return;
      if (j["executors"].empty()) {
        ctx.out << "no executors (no runtime has started on this "
                   "database)\n";
        return;
      }
      table t{{"EXECUTOR", "STATE", "VERSION", "EPOCH", "HEARTBEAT", "LEASE",
               "RUNS HELD", "STARTED"}};
      for (auto& e : j["executors"]) {
        auto version = e["app_version"].get<std::string>();
        t.add({e["id"], e["overdue"].get<bool>() ? "live (overdue)" : e["state"].get<std::string>(),
               version.empty() ? "-" : version, count(e["epoch"]),
               human_duration(milliseconds{e["heartbeat_age_ms"].get<std::int64_t>()}) + " ago",
               human_duration(milliseconds{e["lease_ms"].get<std::int64_t>()}),
               count(e["runs_held"]), time_of(e["started_at"])});
      }
      t.print(ctx.out, ctx.colour());
    });
  app.add_subcommand("versions", "Report each app version: live "
                                 "processes, unended work, stranded runs")
    ->callback([&ctx] {
      auto j = versions_json(ctx.client().versions());
      if (ctx.json(j))
        return;
      if (j["versions"].empty()) {
        ctx.out << "no app versions seen yet\n";
        return;
      }
      table t{{"VERSION", "LIVE", "PENDING", "ENQUEUED", "BLOCKED", "OLDEST",
               "LAST SEEN", "STRANDED"}};
      for (auto& v : j["versions"]) {
        auto name = v["app_version"].get<std::string>();
        t.add({name.empty() ? "(none)" : name, count(v["live_executors"]),
               count(v["pending"]), count(v["enqueued"]), count(v["blocked"]),
               time_of(v["oldest_run"]), time_of(v["last_seen"]),
               v["stranded"].get<bool>() ? "YES" : "no"});
      }
      t.print(ctx.out, ctx.colour());
      for (auto& v : j["versions"])
        if (v["stranded"].get<bool>())
          ctx.out << "stranded: work of version '"
                  << v["app_version"].get<std::string>()
                  << "' has no live process: deploy it, or move its runs "
                     "(client::move_runs)\n";
    });
  app.add_subcommand("migrate", "Bring the store's schema up to this "
                                "version (other commands never change it)")
    ->callback([&ctx] {
      auto info = ctx.client(true).store_info();
      nlohmann::json j{{"dialect", info.dialect},
                       {"schema_version", info.schema_version}};
      if (!ctx.json(j))
        ctx.out << "schema at version " << info.schema_version << " ("
                << info.dialect << ")\n";
    });
  app.add_subcommand("doctor", "Check the store: reachable, schema, "
                               "stranded and BLOCKED work, overdue leases")
    ->callback([&ctx] {
      auto j = doctor_json(ctx.client());
      if (!ctx.json(j))
        for (auto& k : j["checks"]) {
          auto name = k["check"].get<std::string>();
          ctx.out << (k["ok"].get<bool>() ? "ok    " : "FAIL  ") << name
                  << std::string(11 - name.size(), ' ')
                  << k["detail"].get<std::string>() << '\n';
        }
      if (!j["ok"].get<bool>())
        ctx.status = exit_code::failed;
    });
}

} // namespace perdure::cli
