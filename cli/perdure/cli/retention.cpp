// `perdure retention`: the collectors' turn, totals and what waits.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/retention/collector.hpp"

namespace perdure::cli {

void add_retention_commands(CLI::App& app, context& ctx) {
  app.add_subcommand("retention", "Retention: whose turn it is to collect, "
                                  "what was collected, what waits")
    ->callback([&ctx] {
      auto s = perdure::retention::read_status(ctx.client());
      auto time = [](const auto& t) {
        return t ? nlohmann::json(iso_time(*t)) : nlohmann::json(nullptr);
      };
      nlohmann::json j{{"holder", s.holder},
                       {"held_until", time(s.held_until)},
                       {"last_batch_at", time(s.last_batch_at)},
                       {"runs_collected", s.runs_collected},
                       {"ids_expired", s.ids_expired},
                       {"ended_roots", s.ended_roots},
                       {"tombstones", s.tombstones}};
      if (ctx.json(j))
        return;
      auto& out = ctx.out;
      if (s.holder.empty())
        out << "no collector has run (nothing is deleted until one runs "
               "with a policy: see the README's Retention)\n";
      else
        out << "turn          " << s.holder << " until "
            << (s.held_until ? human_time(*s.held_until) : "-") << '\n';
      out << "last batch    "
          << (s.last_batch_at ? human_time(*s.last_batch_at) : "-") << '\n'
          << "collected     " << s.runs_collected << " runs (ever)\n"
          << "ids freed     " << s.ids_expired << " (ever)\n"
          << "ended runs    " << s.ended_roots
          << " (at the top of their tree, not collected)\n"
          << "tombstones    " << s.tombstones << '\n';
    });
}

} // namespace perdure::cli
