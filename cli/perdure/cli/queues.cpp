// `perdure queues list | stats | dead-letters | requeue`.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/client.hpp"
#include "perdure/queues/queue.hpp"

namespace perdure::cli {

namespace {

std::string limits_text(const queue_limits& l) {
  std::string out;
  auto add = [&](const std::string& s) {
    out += out.empty() ? s : ", " + s;
  };
  if (l.concurrency)
    add("concurrency " + std::to_string(*l.concurrency));
  if (l.partition_concurrency)
    add(std::to_string(*l.partition_concurrency) + " per partition");
  if (l.rate_limit)
    add(std::to_string(*l.rate_limit) + " per "
        + human_duration(std::chrono::milliseconds{l.rate_period_ms}));
  return out.empty() ? "none" : out;
}

} // namespace

void add_queue_commands(CLI::App& app, context& ctx) {
  auto* queues = app.add_subcommand("queues", "Queues: depth, limits, dead "
                                              "letters");
  queues->require_subcommand(1);
  queues->add_subcommand("list", "List every queue with its depth")
    ->callback([&ctx] {
      auto& c = ctx.client();
      std::vector<queue_stats> all;
      for (auto& q : c.queues())
        all.push_back(perdure::queues::stats(c, q.name));
      auto j = nlohmann::json::array();
      for (auto& s : all)
        j.push_back(queue_json(s));
      if (ctx.json({{"queues", j}}))
        return;
      if (all.empty()) {
        ctx.out << "no queues (a runtime registers them)\n";
        return;
      }
      table t{{"QUEUE", "READY", "DELAYED", "RUNNING", "THROTTLED",
               "DEAD LETTERS", "LIMITS"}};
      for (auto& s : all)
        t.add({s.name, std::to_string(s.total.ready),
               std::to_string(s.total.delayed), std::to_string(s.total.running),
               std::to_string(s.total.throttled), std::to_string(s.dead_letters),
               limits_text(s.limits)});
      t.print(ctx.out, ctx.colour());
    });
  {
    auto* cmd = queues->add_subcommand("stats", "Show a queue's counts, in "
                                                "total and per partition");
    auto name = std::make_shared<std::string>();
    cmd->add_option("QUEUE", *name, "The queue")->required();
    cmd->callback([&ctx, name] {
      auto& c = ctx.client();
      bool known = false;
      for (auto& q : c.queues())
        known = known || q.name == *name;
      if (!known)
        throw cli_error(exit_code::not_found,
                        "no queue '" + *name + "' (queues list shows them)");
      auto s = perdure::queues::stats(c, *name);
      if (ctx.json(queue_json(s)))
        return;
      ctx.out << "Queue " << s.name << " (limits: " << limits_text(s.limits)
              << ")\n";
      table t{{"PARTITION", "READY", "DELAYED", "RUNNING", "THROTTLED"}};
      auto row = [&](const partition_stats& p, std::string name) {
        t.add({std::move(name), std::to_string(p.ready),
               std::to_string(p.delayed), std::to_string(p.running),
               std::to_string(p.throttled)});
      };
      row(s.total, "(total)");
      for (auto& p : s.partitions)
        row(p, p.partition_key.empty() ? "(default)" : p.partition_key);
      t.print(ctx.out, ctx.colour());
      ctx.out << "dead letters: " << s.dead_letters;
      if (s.limits.rate_limit)
        ctx.out << ", started in the last period: " << s.recent_starts;
      ctx.out << '\n';
    });
  }
  {
    auto* cmd = queues->add_subcommand("dead-letters", "List a queue's dead "
                                                       "letters, newest "
                                                       "first");
    auto name = std::make_shared<std::string>();
    auto f = std::make_shared<filter_options>();
    cmd->add_option("QUEUE", *name, "The queue")->required();
    f->add_to(*cmd, 20);
    cmd->callback([&ctx, name, f] {
      f->queue = *name;
      f->status = "DEAD_LETTER";
      auto page = ctx.client().list_runs(f->to_filter());
      if (ctx.json(run_page_json(page, "dead_letters")))
        return;
      if (page.runs.empty()) {
        ctx.out << "no dead letters in " << *name << '\n';
        return;
      }
      table t{{"ID", "WORKFLOW", "ENDED", "ERROR"}};
      for (auto& r : page.runs)
        t.add({r.id, r.name, human_time(r.updated_at),
               clip(r.error.value_or(""), 70)});
      t.print(ctx.out, ctx.colour());
      if (!page.next_cursor.empty())
        ctx.out << "more: --cursor " << page.next_cursor << '\n';
    });
  }
  {
    auto* cmd = queues->add_subcommand(
      "requeue", "Put dead letters back in their queue with fresh attempts "
                 "(ids, or --all of a queue)");
    auto ids = std::make_shared<std::vector<std::string>>();
    auto all = std::make_shared<std::string>();
    auto dry = std::make_shared<bool>(false);
    cmd->add_option("IDS", *ids, "Dead letters' ids");
    cmd->add_option("--all", *all, "Every dead letter of this queue");
    cmd->add_flag("--dry-run", *dry, "Count them, change nothing");
    cmd->callback([&ctx, ids, all, dry] {
      auto& c = ctx.client();
      if (ids->empty() == all->empty())
        throw cli_error(exit_code::usage,
                        "requeue: give dead letters' ids, or --all QUEUE");
      if (!all->empty()) {
        run_filter f;
        f.queue = *all;
        f.status = run_status::dead_letter;
        f.limit = 500;
        auto counted = c.resume_matching(f, {}, true);
        if (!*dry && counted.matched > 1)
          ctx.confirm("requeue " + std::to_string(counted.matched)
                      + " dead letters");
        auto r = *dry || counted.matched == 0 ? counted
                                               : c.resume_matching(f, {}, false);
        if (!ctx.json({{"dry_run", *dry}, {"matched", r.matched},
                       {"done", r.done}}))
          ctx.out << (*dry ? "would requeue " : "requeued ")
                  << (*dry ? r.matched : r.done) << " dead letters of "
                  << *all << '\n';
        return;
      }
      for (auto& id : *ids) {
        if (*dry) {
          if (c.describe(id).info.status != run_status::dead_letter)
            throw cli_error(exit_code::refused,
                            "'" + id + "' is not a dead letter");
          continue;
        }
        perdure::queues::requeue(c, id);
      }
      if (!ctx.json({{"dry_run", *dry}, {"requeued", *ids}}))
        ctx.out << (*dry ? "would requeue " : "requeued ") << ids->size()
                << " dead letter" << (ids->size() == 1 ? "" : "s") << '\n';
    });
  }
}

} // namespace perdure::cli
