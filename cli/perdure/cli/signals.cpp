// `perdure awakeables resolve | reject`, `perdure promises resolve |
// reject`, `perdure send`: completing what a run waits for, by hand.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/payload.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

namespace {

void done(context& ctx, const nlohmann::json& j, const std::string& text) {
  if (!ctx.json(j))
    ctx.out << text << '\n';
}

} // namespace

void add_signal_commands(CLI::App& app, context& ctx) {
  auto* awk = app.add_subcommand("awakeables", "Complete awakeables by hand");
  awk->require_subcommand(1);
  {
    auto* cmd = awk->add_subcommand("resolve", "Resolve an awakeable with a "
                                               "value");
    auto id = std::make_shared<std::string>();
    auto value = std::make_shared<std::string>();
    cmd->add_option("ID", *id, "The awakeable's id (awk_...)")->required();
    cmd->add_option("VALUE", *value, "The value, as JSON")->required();
    cmd->callback([&ctx, id, value] {
      ctx.client().resolve_awakeable_encoded(
        *id, encode_json_value(*value, "VALUE"));
      done(ctx, {{"resolved", *id}}, "resolved " + *id);
    });
  }
  {
    auto* cmd = awk->add_subcommand("reject", "Fail an awakeable: the "
                                              "waiting code gets a "
                                              "terminal_error");
    auto id = std::make_shared<std::string>();
    auto reason = std::make_shared<std::string>();
    cmd->add_option("ID", *id, "The awakeable's id (awk_...)")->required();
    cmd->add_option("REASON", *reason, "Why")->required();
    cmd->callback([&ctx, id, reason] {
      ctx.client().reject_awakeable(*id, *reason);
      done(ctx, {{"rejected", *id}}, "rejected " + *id);
    });
  }
  auto* prom = app.add_subcommand("promises", "Complete a run's promises by "
                                              "hand");
  prom->require_subcommand(1);
  {
    auto* cmd = prom->add_subcommand("resolve", "Resolve promise NAME of "
                                                "run RUN");
    auto run = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto value = std::make_shared<std::string>();
    cmd->add_option("RUN", *run, "The run's id")->required();
    cmd->add_option("NAME", *name, "The promise's name")->required();
    cmd->add_option("VALUE", *value, "The value, as JSON")->required();
    cmd->callback([&ctx, run, name, value] {
      ctx.client().resolve_promise_encoded(
        *run, *name, encode_json_value(*value, "VALUE"));
      done(ctx, {{"resolved", *name}, {"run", *run}},
           "resolved promise " + *name + " of " + *run);
    });
  }
  {
    auto* cmd = prom->add_subcommand("reject", "Fail promise NAME of run "
                                               "RUN");
    auto run = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto reason = std::make_shared<std::string>();
    cmd->add_option("RUN", *run, "The run's id")->required();
    cmd->add_option("NAME", *name, "The promise's name")->required();
    cmd->add_option("REASON", *reason, "Why")->required();
    cmd->callback([&ctx, run, name, reason] {
      ctx.client().reject_promise(*run, *name, *reason);
      done(ctx, {{"rejected", *name}, {"run", *run}},
           "rejected promise " + *name + " of " + *run);
    });
  }
  {
    auto* cmd = app.add_subcommand("send", "Send a message to a run: it "
                                           "waits for ctx.recv(TOPIC)");
    auto run = std::make_shared<std::string>();
    auto topic = std::make_shared<std::string>();
    auto value = std::make_shared<std::string>();
    cmd->add_option("RUN", *run, "The run's id")->required();
    cmd->add_option("TOPIC", *topic, "The topic")->required();
    cmd->add_option("VALUE", *value, "The message, as JSON")->required();
    cmd->callback([&ctx, run, topic, value] {
      ctx.client().send_encoded(*run, *topic,
                                encode_json_value(*value, "VALUE"));
      done(ctx, {{"sent", *topic}, {"run", *run}},
           "sent " + *topic + " to " + *run);
    });
  }
}

} // namespace perdure::cli
