// `perdure runs show ID`: the run's document, for people.

#include "perdure/cli/runs_show.hpp"

#include "perdure/cli/context.hpp"
#include "perdure/cli/documents.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/cli/filters.hpp"

namespace perdure::cli {

namespace {

std::string text(const nlohmann::json& j) {
  if (j.is_null())
    return "";
  return j.is_string() ? j.get<std::string>() : j.dump();
}

/// An ISO time of the document, for people.
std::string time_of(const nlohmann::json& j) {
  if (!j.is_string())
    return "";
  auto s = j.get<std::string>();
  if (s.size() >= 19)
    s[10] = ' ';
  return s.substr(0, 19);
}

} // namespace

void show_run(context& ctx, const std::string& id) {
  auto j = run_document(ctx.client(), id);
  if (ctx.json(j))
    return;
  auto colour = ctx.colour();
  auto& out = ctx.out;
  auto field = [&](std::string_view name, const std::string& value) {
    if (!value.empty())
      out << "  " << name << std::string(12 - name.size(), ' ') << value
          << '\n';
  };
  auto status = j["status"].get<std::string>();
  out << "Run " << text(j["id"]) << '\n';
  field("workflow", j.contains("object_type")
                      ? text(j["object_type"]) + "/" + text(j["object_key"])
                          + " handler " + text(j["workflow"])
                      : text(j["workflow"]));
  field("status", coloured_status(status, colour)
                    + (j["cancel_requested"].get<bool>()
                           && (status == "PENDING" || status == "BLOCKED")
                         ? " (cancel requested)"
                         : ""));
  field("version", j["app_version"].get<std::string>().empty()
                     ? "-"
                     : text(j["app_version"]));
  field("owner", (j["executor"].get<std::string>().empty()
                    ? std::string{"none (waiting for a runtime)"}
                    : text(j["executor"]))
                   + ", epoch " + std::to_string(j["epoch"].get<std::int64_t>()));
  field("created", time_of(j["created_at"]));
  field("updated", time_of(j["updated_at"]));
  field("started", time_of(j["started_at"]));
  field("deadline", time_of(j["deadline"]));
  field("parent", text(j["parent_id"]));
  if (!j["queue"].is_null())
    field("queue", text(j["queue"]) + " (priority "
                     + std::to_string(j["priority"].get<int>()) + ", attempt "
                     + std::to_string(j["attempts"].get<int>()) + ")");
  field("saga phase", text(j["saga_phase"]));
  if (j["recovery_attempts"].get<int>() > 0)
    field("recoveries", std::to_string(j["recovery_attempts"].get<int>()));
  field("inputs", clip(text(j["inputs"]), 100));
  field("output", clip(text(j["output"]), 100));
  field("error", text(j["error"]));
  if (j.contains("collected_at") && !j["collected_at"].is_null())
    field("collected", time_of(j["collected_at"])
                         + " by retention: inputs, output and journal gone; "
                           "the id is kept until its policy frees it");
  auto& journal = j["journal"];
  out << "\nJournal (" << journal.size() << " entries)\n";
  if (journal.empty()) {
    out << "  (nothing recorded yet)\n";
  } else {
    table t{{"  SEQ", "KIND", "NAME", "OUTCOME", "AT", "TOOK", "RESULT"}};
    for (auto& e : journal) {
      bool event = e["outcome"] == "event";
      auto result = event                  ? text(e["reason"])
                    : e.contains("error") ? text(e["error"])
                                          : text(e["result"]);
      t.add({"  " + (event ? std::string{"-"} : std::to_string(e["seq"].get<int>())),
             text(e["kind"]), clip(text(e["name"]), 40), text(e["outcome"]),
             time_of(e["at"]),
             event ? ""
                   : human_duration(std::chrono::milliseconds{
                       e["duration_ms"].get<std::int64_t>()}),
             clip(result, 60)});
    }
    t.print(out, colour);
  }
  if (!j["children"].empty()) {
    out << "\nChildren (" << j["children"].size() << ")\n";
    table t{{"  ID", "WORKFLOW", "STATUS", "UPDATED"}};
    for (auto& k : j["children"])
      t.add({"  " + text(k["id"]), text(k["workflow"]), text(k["status"]),
             time_of(k["updated_at"])});
    t.print(out, colour, 2);
  }
  if (!j["waits"].empty()) {
    out << "\nWaiting on\n";
    for (auto& w : j["waits"]) {
      auto what = text(w["what"]);
      if (what.rfind("until ", 0) == 0)
        what = "until " + time_of(what.substr(6));
      out << "  " << text(w["kind"]) << ' ' << what << '\n';
    }
  }
  if (!j["undo_stack"].empty()) {
    out << "\nSaga undo stack (undone last first)\n";
    for (auto& s : j["undo_stack"])
      out << "  undo:" << text(s) << '\n';
  }
}

} // namespace perdure::cli
