// `perdure runs list` and `perdure runs show`.

#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/commands.hpp"
#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/cli/runs_show.hpp"
#include "perdure/client.hpp"

namespace perdure::cli {

namespace {

void print_page(context& ctx, const run_page& page, bool wide) {
  if (ctx.json(run_page_json(page)))
    return;
  if (page.runs.empty()) {
    ctx.out << "no runs match\n";
    return;
  }
  std::vector<std::string> headers{"ID", "WORKFLOW", "STATUS", "CREATED",
                                   "UPDATED", "EXECUTOR", "VERSION"};
  if (wide)
    headers.push_back("ERROR");
  table t{headers};
  for (auto& r : page.runs) {
    auto name = r.object_type ? *r.object_type + "/" + r.object_key.value_or("")
                                  + "." + r.name
                              : r.name;
    if (r.queue)
      name += " @" + *r.queue;
    std::vector<std::string> row{
      r.id, name, std::string{to_string(r.status)}, human_time(r.created_at),
      human_time(r.updated_at), r.executor.empty() ? "-" : r.executor,
      r.app_version.empty() ? "-" : r.app_version};
    if (wide)
      row.push_back(clip(r.error.value_or(""), 60));
    t.add(std::move(row));
  }
  t.print(ctx.out, ctx.colour(), 2);
  if (!page.next_cursor.empty())
    ctx.out << "more: --cursor " << page.next_cursor << '\n';
}

volatile std::sig_atomic_t interrupted = 0;

} // namespace

void add_runs_list(CLI::App& runs, context& ctx) {
  auto* list = runs.add_subcommand("list", "List runs, newest first");
  auto f = std::make_shared<filter_options>();
  auto wide = std::make_shared<bool>(false);
  auto watch = std::make_shared<double>(0);
  f->add_to(*list, 20);
  list->add_option("--cursor", f->cursor,
                   "Start after the page that printed this cursor");
  list->add_flag("--wide", *wide, "Show why each run failed");
  list->add_option("--watch", *watch,
                   "Print the page again every SECONDS until interrupted")
    ->expected(0, 1)
    ->default_str("2");
  list->callback([&ctx, f, wide, watch, list] {
    auto filter = f->to_filter();
    if (list->count("--watch") == 0) {
      print_page(ctx, ctx.client().list_runs(filter), *wide);
      return;
    }
    auto every = std::chrono::milliseconds{
      static_cast<std::int64_t>((*watch > 0 ? *watch : 2.0) * 1000)};
    std::signal(SIGINT, [](int) { interrupted = 1; });
    while (interrupted == 0) {
      auto page = ctx.client().list_runs(filter);
      if (ctx.colour())
        ctx.out << "\x1b[H\x1b[2J"; // a terminal: redraw in place
      ctx.out << "-- " << human_time(std::chrono::system_clock::now())
              << " (every " << human_duration(every) << ", Ctrl-C stops)\n";
      print_page(ctx, page, *wide);
      ctx.out << std::flush;
      auto until = std::chrono::steady_clock::now() + every;
      while (interrupted == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
  });
  auto* show = runs.add_subcommand("show", "Show a run: its state, journal, "
                                           "children and waits");
  auto id = std::make_shared<std::string>();
  show->add_option("ID", *id, "The run's id")->required();
  show->callback([&ctx, id] { show_run(ctx, *id); });
}

} // namespace perdure::cli
