// `perdure runs cancel | resume | fork | export`: by id, or by filter with
// a dry run, a confirmation and a progress bar.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/cli/runs_show.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

namespace {

/// What a bulk command was given: ids, or a filter.
struct targets {
  std::vector<std::string> ids;
  filter_options filter;
  bool dry_run = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("IDS", ids, "Run ids (or select runs with a filter)");
    filter.add_to(cmd, 500);
    cmd.add_flag("--dry-run", dry_run,
                 "Count and show a sample of the runs, change nothing");
  }

  /// Throws unless exactly one of ids and a filter is given.
  bool by_filter(const char* verb) const {
    if (!ids.empty() && filter.any())
      throw cli_error(exit_code::usage,
                      std::string{verb} + ": give run ids or a filter, not "
                                          "both");
    if (ids.empty() && !filter.any())
      throw cli_error(exit_code::usage,
                      std::string{verb} + ": give run ids, or a filter "
                        "(e.g. --status ERROR --workflow checkout); "
                        "--dry-run shows what a filter selects");
    return ids.empty();
  }
};

/// A progress bar on a terminal's stderr (nothing elsewhere).
class progress_bar {
public:
  progress_bar(context& ctx, std::int64_t total)
    : ctx_(ctx), total_(total),
      on_(&ctx.err == &std::cerr && ::isatty(2) == 1 && total > 1) {
  }

  void operator()(std::int64_t done) {
    if (!on_)
      return;
    auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds{100})
      return;
    last_ = now;
    constexpr int width = 30;
    auto filled = total_ > 0 ? static_cast<int>(width * std::min(done, total_)
                                                / total_)
                             : width;
    ctx_.err << "\r[" << std::string(filled, '#')
             << std::string(width - filled, ' ') << "] " << done << '/'
             << total_ << std::flush;
  }

  ~progress_bar() {
    if (on_)
      ctx_.err << '\n';
  }

private:
  context& ctx_;
  std::int64_t total_;
  bool on_;
  std::chrono::steady_clock::time_point last_{};
};

void print_bulk(context& ctx, const char* action, const char* done_verb,
                bool dry_run, const bulk_result& r) {
  if (ctx.json(bulk_json(action, dry_run, r)))
    return;
  if (dry_run) {
    ctx.out << "would " << action << ' ' << r.matched << " run"
            << (r.matched == 1 ? "" : "s") << " (dry run: nothing changed)\n";
  } else {
    ctx.out << done_verb << ' ' << r.done << " of " << r.matched << " run"
            << (r.matched == 1 ? "" : "s") << '\n';
  }
  if (!r.sample.empty()) {
    ctx.out << (dry_run ? "sample:" : "first:");
    for (auto& id : r.sample)
      ctx.out << ' ' << id;
    ctx.out << '\n';
  }
  for (auto& [from, to] : r.created)
    ctx.out << "forked " << from << " -> " << to << '\n';
  for (auto& [id, why] : r.refused)
    ctx.out << "refused " << id << ": " << why << '\n';
}

/// Runs a bulk action: a dry run counts, a confirmation for more than one
/// run, then the action with a progress bar. Returns the exit code.
using bulk_fn = std::function<bulk_result(run_filter, bool,
                                          const bulk_progress&)>;

void run_bulk(context& ctx, targets& t, const char* action,
              const char* done_verb, const bulk_fn& act) {
  auto filter = t.filter.to_filter();
  auto counted = act(filter, true, {});
  if (t.dry_run || counted.matched == 0) {
    print_bulk(ctx, action, done_verb, true, counted);
    return;
  }
  if (counted.matched > 1)
    ctx.confirm(std::string{action} + " " + std::to_string(counted.matched)
                + " runs");
  bulk_result result;
  {
    progress_bar bar{ctx, counted.matched};
    result = act(filter, false, std::ref(bar));
  }
  print_bulk(ctx, action, done_verb, false, result);
  if (!result.refused.empty())
    throw cli_error(exit_code::refused,
                    std::to_string(result.refused.size()) + " run"
                      + (result.refused.size() == 1 ? " was" : "s were")
                      + " refused (listed above)");
}

/// Runs `act` on each id: a dry run only checks they exist.
void run_each(context& ctx, targets& t, const char* action,
              const char* done_verb,
              const std::function<std::string(const std::string&)>& act) {
  auto& c = ctx.client();
  if (t.ids.size() > 1 && !t.dry_run)
    ctx.confirm(std::string{action} + " " + std::to_string(t.ids.size())
                + " runs");
  bulk_result r;
  std::optional<perdure::error> first_error;
  for (auto& id : t.ids) {
    ++r.matched;
    try {
      if (t.dry_run) {
        (void)c.describe(id);
        r.sample.push_back(id);
        continue;
      }
      auto made = act(id);
      ++r.done;
      r.sample.push_back(id);
      if (!made.empty())
        r.created.emplace_back(id, made);
    } catch (const perdure::error& ex) {
      if (t.ids.size() == 1)
        throw;
      r.refused.emplace_back(id, ex.what());
      if (!first_error)
        first_error = ex;
    }
  }
  print_bulk(ctx, action, done_verb, t.dry_run, r);
  if (first_error)
    throw cli_error(first_error->code() == errc::not_found ? exit_code::not_found
                                                           : exit_code::refused,
                    std::to_string(r.refused.size()) + " of "
                      + std::to_string(r.matched) + " runs failed (listed above)");
}

} // namespace

void add_runs_actions(CLI::App& runs, context& ctx) {
  {
    auto* cmd = runs.add_subcommand(
      "cancel", "Cancel runs by id or by filter (unended runs only)");
    auto t = std::make_shared<targets>();
    t->add_to(*cmd);
    cmd->callback([&ctx, t] {
      if (t->by_filter("cancel")) {
        run_bulk(ctx, *t, "cancel", "cancelled",
                 [&](run_filter f, bool dry, const bulk_progress& p) {
                   return ctx.client().cancel_matching(std::move(f), dry, p);
                 });
        return;
      }
      run_each(ctx, *t, "cancel", "cancelled", [&](const std::string& id) {
        cancel_one(ctx.client(), id);
        return std::string{};
      });
    });
  }
  {
    auto* cmd = runs.add_subcommand(
      "resume", "Put runs that ended ERROR, CANCELLED, RETRIES_EXCEEDED or "
                "DEAD_LETTER, or are BLOCKED, back to work");
    auto t = std::make_shared<targets>();
    auto opts = std::make_shared<resume_options>();
    auto version = std::make_shared<std::string>();
    t->add_to(*cmd);
    cmd->add_option("--to-version", *version,
                    "Re-stamp them with this app version");
    cmd->add_option("--reason", opts->reason, "Why, for the runs' history");
    cmd->callback([&ctx, t, opts, version] {
      if (!version->empty())
        opts->app_version = *version;
      if (t->by_filter("resume")) {
        run_bulk(ctx, *t, "resume", "resumed",
                 [&](run_filter f, bool dry, const bulk_progress& p) {
                   return ctx.client().resume_matching(std::move(f), *opts,
                                                       dry, p);
                 });
        return;
      }
      run_each(ctx, *t, "resume", "resumed", [&](const std::string& id) {
        ctx.client().resume(id, *opts);
        return std::string{};
      });
    });
  }
  {
    auto* cmd = runs.add_subcommand(
      "fork", "Start new runs that replay a run's journal up to a point");
    auto t = std::make_shared<targets>();
    auto opts = std::make_shared<fork_options>();
    auto step = std::make_shared<std::int32_t>(-1);
    auto step_name = std::make_shared<std::string>();
    auto version = std::make_shared<std::string>();
    t->add_to(*cmd);
    cmd->add_option("--from-step", *step,
                    "The first journal index not copied (see runs show)");
    cmd->add_option("--from-step-name", *step_name,
                    "The first step recorded with this name");
    cmd->add_flag("--from-last-failure", opts->from_last_failure,
                  "The last step that failed");
    cmd->add_option("--new-id", opts->id,
                    "The new run's id (one source only; fresh if left out)");
    cmd->add_option("--to-version", *version, "The new run's app version");
    cmd->add_option("--reason", opts->reason, "Why, for both histories");
    cmd->callback([&ctx, t, opts, step, step_name, version, cmd] {
      if (cmd->count("--from-step") > 0)
        opts->from_step = *step;
      if (!step_name->empty())
        opts->from_step_name = *step_name;
      if (!version->empty())
        opts->app_version = *version;
      if (t->by_filter("fork")) {
        if (!opts->id.empty())
          throw cli_error(exit_code::usage,
                          "fork: --new-id names one fork: give one run id");
        run_bulk(ctx, *t, "fork", "forked",
                 [&](run_filter f, bool dry, const bulk_progress& p) {
                   return ctx.client().fork_matching(std::move(f), *opts,
                                                     dry, p);
                 });
        return;
      }
      if (t->ids.size() > 1 && !opts->id.empty())
        throw cli_error(exit_code::usage,
                        "fork: --new-id names one fork: give one run id");
      run_each(ctx, *t, "fork", "forked", [&](const std::string& id) {
        return ctx.client().fork(id, *opts);
      });
    });
  }
  {
    auto* cmd = runs.add_subcommand(
      "export", "Write runs as JSON (workflow, inputs, journal) for "
                "perdure::testing::replay or a bug report");
    auto t = std::make_shared<targets>();
    auto dir = std::make_shared<std::string>();
    t->add_to(*cmd);
    cmd->add_option("--output-dir", *dir,
                    "Write ID.json files here (default: one run to stdout)");
    cmd->callback([&ctx, t, dir] {
      auto& c = ctx.client();
      std::vector<std::string> ids = t->ids;
      if (t->by_filter("export")) {
        auto f = t->filter.to_filter();
        for (;;) {
          auto page = c.list_runs(f);
          for (auto& r : page.runs)
            ids.push_back(r.id);
          if (page.next_cursor.empty())
            break;
          f.cursor = page.next_cursor;
        }
      }
      if (t->dry_run) {
        bulk_result r;
        r.matched = static_cast<std::int64_t>(ids.size());
        for (std::size_t i = 0; i < ids.size() && i < 10; ++i)
          r.sample.push_back(ids[i]);
        print_bulk(ctx, "export", "exported", true, r);
        return;
      }
      if (dir->empty()) {
        if (ids.size() != 1)
          throw cli_error(exit_code::usage,
                          "export: " + std::to_string(ids.size())
                            + " runs: give --output-dir to write one file "
                              "each (stdout takes one run)");
        ctx.out << c.export_run(ids.front()) << '\n';
        return;
      }
      std::filesystem::create_directories(*dir);
      progress_bar bar{ctx, static_cast<std::int64_t>(ids.size())};
      std::int64_t n = 0;
      for (auto& id : ids) {
        auto text = c.export_run(id);
        std::string file = id;
        for (auto& ch : file)
          if (ch == '/' || ch == '\\' || ch == '\0')
            ch = '_';
        std::ofstream f{std::filesystem::path{*dir} / (file + ".json")};
        f << text << '\n';
        if (!f)
          throw cli_error(exit_code::failed,
                          "export: cannot write to " + *dir);
        bar(++n);
      }
      if (!ctx.json({{"exported", n}, {"directory", *dir}}))
        ctx.out << "exported " << n << " run" << (n == 1 ? "" : "s")
                << " to " << *dir << '\n';
    });
  }
}

} // namespace perdure::cli
