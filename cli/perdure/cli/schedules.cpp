// `perdure schedules list | show | pause | resume | trigger | backfill |
// remove`.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/client.hpp"
#include "perdure/error.hpp"
#include "perdure/schedules/schedule.hpp"

namespace perdure::cli {

namespace {

namespace sch = perdure::schedules;

const char* overlap_name(sch::overlap o) {
  switch (o) {
    case sch::overlap::skip: return "skip";
    case sch::overlap::buffer_one: return "buffer_one";
    case sch::overlap::buffer_all: return "buffer_all";
    case sch::overlap::cancel_other: return "cancel_other";
    case sch::overlap::allow_all: return "allow_all";
  }
  return "skip";
}

std::string state_of(const sch::schedule_info& s) {
  if (s.spec.paused)
    return "paused";
  return s.next_fire ? "active" : "ended";
}

nlohmann::json schedule_json(const sch::schedule_info& s) {
  auto time = [](const std::optional<sch::time_point>& t) {
    return t ? nlohmann::json(iso_time(*t)) : nlohmann::json(nullptr);
  };
  nlohmann::json buffered = nlohmann::json::array();
  for (auto& t : s.buffered)
    buffered.push_back(iso_time(t));
  return {
    {"name", s.spec.name},
    {"workflow", s.spec.workflow},
    {"queue", s.spec.queue.empty() ? nlohmann::json(nullptr)
                                   : nlohmann::json(s.spec.queue)},
    {"cron", s.spec.cron},
    {"time_zone", s.spec.time_zone},
    {"dst_repeat",
     s.spec.repeat == sch::dst_repeat::both ? "both" : "first"},
    {"overlap", overlap_name(s.spec.on_overlap)},
    {"catchup", s.spec.catch_up == sch::catchup::all ? "all" : "latest"},
    {"catchup_window_ms", s.spec.catchup_window.count()},
    {"jitter_ms", s.spec.jitter.count()},
    {"start_at", time(s.spec.start_at)},
    {"end_at", time(s.spec.end_at)},
    {"state", state_of(s)},
    {"owner", s.owner},
    {"next_fire", time(s.next_fire)},
    {"last_fire", time(s.last_fire)},
    {"last_run_id", s.last_run_id},
    {"started", s.started},
    {"skipped", s.skipped},
    {"missed", s.missed},
    {"caught_up", s.caught_up},
    {"buffered", buffered},
    {"input", payload_json(s.spec.input)},
    {"created_at", iso_time(s.created_at)},
    {"updated_at", iso_time(s.updated_at)},
  };
}

/// `f()`, with the library's "no schedule" said as the CLI says it.
template <class F>
auto about(const std::string& name, F f) {
  try {
    return f();
  } catch (const perdure::error& e) {
    if (e.code() != errc::not_found)
      throw;
    throw cli_error(exit_code::not_found,
                    "no schedule '" + name
                      + "' (perdure schedules list shows them)");
  }
}

/// Adds `schedules <verb> NAME` running `act(context, name)`; a dry run
/// (where `dry_run` says what would be done) looks without acting.
template <class F>
CLI::App* add_named(CLI::App& group, context& ctx, const char* verb,
                    const char* what, F act) {
  auto* cmd = group.add_subcommand(verb, what);
  auto name = std::make_shared<std::string>();
  cmd->add_option("NAME", *name, "The schedule")->required();
  cmd->callback([&ctx, name, act] { about(*name, [&] { act(ctx, *name); }); });
  return cmd;
}

} // namespace

void add_schedule_commands(CLI::App& app, context& ctx) {
  auto* group = app.add_subcommand("schedules", "Cron schedules: next and "
                                                "last fires, skipped and "
                                                "missed ticks");
  group->require_subcommand(1);
  group->add_subcommand("list", "List every schedule")->callback([&ctx] {
    auto all = sch::list(ctx.client());
    auto j = nlohmann::json::array();
    for (auto& s : all)
      j.push_back(schedule_json(s));
    if (ctx.json({{"schedules", j}}))
      return;
    if (all.empty()) {
      ctx.out << "no schedules (schedules::create or apply makes them)\n";
      return;
    }
    table t{{"NAME", "WORKFLOW", "CRON", "ZONE", "STATE", "NEXT", "LAST",
             "STARTED", "SKIPPED", "MISSED"}};
    for (auto& s : all)
      t.add({s.spec.name,
             s.spec.queue.empty() ? s.spec.workflow
                                  : s.spec.workflow + " (" + s.spec.queue + ")",
             s.spec.cron, s.spec.time_zone, state_of(s),
             s.next_fire ? human_time(*s.next_fire) : "-",
             s.last_fire ? human_time(*s.last_fire) : "-",
             std::to_string(s.started), std::to_string(s.skipped),
             std::to_string(s.missed)});
    t.print(ctx.out, ctx.colour());
  });
  add_named(*group, ctx, "show", "Show a schedule",
            [](context& ctx, const std::string& name) {
              auto s = sch::show(ctx.client(), name);
              auto j = schedule_json(s);
              if (ctx.json(j))
                return;
              for (auto& [k, v] : j.items())
                ctx.out << k << ": "
                        << (v.is_string() ? v.get<std::string>() : v.dump())
                        << '\n';
            });
  add_named(*group, ctx, "pause", "Stop firing until resumed",
            [](context& ctx, const std::string& name) {
              sch::pause(ctx.client(), name);
              if (!ctx.json({{"paused", name}}))
                ctx.out << "paused " << name << '\n';
            });
  add_named(*group, ctx, "resume",
            "Fire again, from the first tick after now",
            [](context& ctx, const std::string& name) {
              auto was_paused = sch::resume(ctx.client(), name);
              if (!ctx.json({{"schedule", name}, {"resumed", was_paused}}))
                ctx.out << (was_paused ? "resumed " : "not paused: ") << name
                        << '\n';
            });
  add_named(*group, ctx, "trigger", "Start a run now",
            [](context& ctx, const std::string& name) {
              auto id = sch::trigger(ctx.client(), name);
              if (!ctx.json({{"started", id}}))
                ctx.out << "started " << id << '\n';
            });
  {
    auto dry = std::make_shared<bool>(false);
    auto* cmd = add_named(
      *group, ctx, "remove", "Remove a schedule (its runs stay)",
      [dry](context& ctx, const std::string& name) {
        auto s = sch::show(ctx.client(), name); // not found: says so
        if (*dry) {
          if (!ctx.json({{"would_remove", name}, {"started", s.started}}))
            ctx.out << "would remove " << name << " (its " << s.started
                    << " runs stay)\n";
          return;
        }
        ctx.confirm("remove schedule " + name);
        sch::remove(ctx.client(), name);
        if (!ctx.json({{"removed", name}}))
          ctx.out << "removed " << name << '\n';
      });
    cmd->add_flag("--dry-run", *dry, "Say what would be removed");
  }
  {
    auto* cmd = group->add_subcommand(
      "backfill", "Start the run of every tick in a range that has none");
    auto name = std::make_shared<std::string>();
    auto from = std::make_shared<std::string>();
    auto to = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "The schedule")->required();
    cmd->add_option("--from", *from, "First time (ISO 8601, or an age: 2d)")
      ->required();
    cmd->add_option("--to", *to, "Last time (default: now)");
    auto dry = std::make_shared<bool>(false);
    cmd->add_flag("--dry-run", *dry,
                  "Count the range's ticks, start nothing");
    cmd->callback([&ctx, name, from, to, dry] {
      auto now = std::chrono::system_clock::now();
      auto start = parse_time(*from, now);
      auto end = to->empty() ? std::optional{now} : parse_time(*to, now);
      if (!start || !end)
        throw cli_error(exit_code::usage,
                        "--from and --to take ISO 8601 times "
                        "(2026-11-27T02:00Z) or ages (2d, 6h)");
      if (*end < *start)
        throw cli_error(exit_code::usage,
                        "--to is before --from: give the earlier time as "
                        "--from");
      auto s = about(*name, [&] { return sch::show(ctx.client(), *name); });
      if (*dry) {
        sch::fire_times times{sch::cron_expression::parse(s.spec.cron),
                              s.spec.time_zone, s.spec.repeat};
        std::int64_t ticks = 0;
        auto first = std::chrono::floor<std::chrono::seconds>(*start)
                     - std::chrono::seconds{1};
        for (auto t = times.next_after(first); t && *t <= *end;
             t = times.next_after(*t))
          ++ticks;
        if (!ctx.json({{"schedule", *name}, {"ticks", ticks}}))
          ctx.out << ticks << " ticks from " << iso_time(*start) << " to "
                  << iso_time(*end)
                  << " (those with a run already are not started again)\n";
        return;
      }
      ctx.confirm("start " + *name + "'s runs for its ticks from "
                  + iso_time(*start) + " to " + iso_time(*end));
      auto n = about(*name, [&] {
        return sch::backfill(ctx.client(), *name, *start, *end);
      });
      if (!ctx.json({{"schedule", *name}, {"started", n}}))
        ctx.out << "started " << n << " runs\n";
    });
  }
}

} // namespace perdure::cli
