// `perdure objects list | state | calls`.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

void add_object_commands(CLI::App& app, context& ctx) {
  auto* objects = app.add_subcommand("objects", "Virtual objects: keys, "
                                                "state, calls");
  objects->require_subcommand(1);
  {
    auto* cmd = objects->add_subcommand("list", "List the keys of TYPE "
                                                "(those called at least "
                                                "once)");
    auto type = std::make_shared<std::string>();
    auto after = std::make_shared<std::string>();
    auto limit = std::make_shared<std::int64_t>(100);
    cmd->add_option("TYPE", *type, "The object type")->required();
    cmd->add_option("--after", *after, "Keys after this one");
    cmd->add_option("--limit", *limit, "Most keys (1 to 1000)")
      ->check(CLI::Range(1, 1000));
    cmd->callback([&ctx, type, after, limit] {
      auto keys = ctx.client().list_objects(*type, *after, *limit);
      if (ctx.json({{"type", *type}, {"keys", keys}}))
        return;
      if (keys.empty())
        ctx.out << "no objects of type " << *type << '\n';
      for (auto& k : keys)
        ctx.out << k << '\n';
      if (static_cast<std::int64_t>(keys.size()) == *limit)
        ctx.out << "more: --after " << keys.back() << '\n';
    });
  }
  {
    auto* cmd = objects->add_subcommand("state", "Show the state of TYPE/KEY "
                                                 "as last committed");
    auto type = std::make_shared<std::string>();
    auto key = std::make_shared<std::string>();
    cmd->add_option("TYPE", *type, "The object type")->required();
    cmd->add_option("KEY", *key, "The key")->required();
    cmd->callback([&ctx, type, key] {
      auto state = ctx.client().object_state_encoded(*type, *key);
      if (!state)
        throw cli_error(exit_code::not_found,
                        "object " + *type + "/" + *key
                          + " has no state (never called, or nothing "
                            "committed): objects list " + *type
                          + " shows the keys");
      if (ctx.json({{"type", *type},
                    {"key", *key},
                    {"state", payload_json(*state)}}))
        return;
      auto j = payload_json(*state);
      ctx.out << (j.is_string() ? j.get<std::string>() : j.dump(2)) << '\n';
    });
  }
  {
    auto* cmd = objects->add_subcommand("calls", "List the calls of "
                                                 "TYPE/KEY, newest first");
    auto type = std::make_shared<std::string>();
    auto key = std::make_shared<std::string>();
    auto f = std::make_shared<filter_options>();
    cmd->add_option("TYPE", *type, "The object type")->required();
    cmd->add_option("KEY", *key, "The key")->required();
    f->add_to(*cmd, 20);
    cmd->callback([&ctx, type, key, f] {
      f->object = *type + "/" + *key;
      auto page = ctx.client().list_runs(f->to_filter());
      if (ctx.json(run_page_json(page, "calls")))
        return;
      if (page.runs.empty()) {
        ctx.out << "no calls of " << *type << '/' << *key << '\n';
        return;
      }
      table t{{"ID", "HANDLER", "STATUS", "CREATED", "UPDATED", "ERROR"}};
      for (auto& r : page.runs)
        t.add({r.id, r.name, std::string{to_string(r.status)},
               human_time(r.created_at), human_time(r.updated_at),
               clip(r.error.value_or(""), 60)});
      t.print(ctx.out, ctx.colour(), 2);
    });
  }
}

} // namespace perdure::cli
