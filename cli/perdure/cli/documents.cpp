#include "perdure/cli/documents.hpp"

#include <algorithm>
#include <set>

#include "perdure/cli/filters.hpp"
#include "perdure/cli/output.hpp"
#include "perdure/queues/queue.hpp"

namespace perdure::cli {

namespace {

using clock_type = std::chrono::system_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

nlohmann::json opt_time(const std::optional<clock_type::time_point>& t) {
  return t ? nlohmann::json(iso_time(*t)) : nlohmann::json();
}

milliseconds age(clock_type::time_point t) {
  return duration_cast<milliseconds>(clock_type::now() - t);
}

/// What a run's journal says it waits for, and a saga's undo stack.
void read_journal(const run_detail& d, const std::vector<step_record>& h,
                  const std::vector<run_info>& children, nlohmann::json& j) {
  auto waits = nlohmann::json::array();
  auto undo = nlohmann::json::array();
  auto add_wait = [&](const std::string& kind, const std::string& what) {
    waits.push_back({{"kind", kind}, {"what", what}});
  };
  std::set<std::string> undone;
  std::vector<std::string> done_forward;
  bool forward = true;
  std::int32_t last_await = -1;
  for (auto& e : h) {
    if (e.outcome == "event")
      continue;
    if (e.kind == "phase") {
      auto phase = payload_text(e.payload);
      forward = phase == "FORWARD" || phase.empty();
    } else if (e.kind == "step" || e.kind == "transaction") {
      if (e.name.rfind("undo:", 0) == 0)
        undone.insert(e.name.substr(5));
      else if (forward && e.outcome == "value")
        done_forward.push_back(e.name);
    } else if (e.kind == "await") {
      last_await = std::max(last_await, e.seq);
    }
  }
  if (!d.saga_phase.empty())
    for (auto i = done_forward.rbegin(); i != done_forward.rend(); ++i)
      if (undone.count(*i) == 0)
        undo.push_back(*i);
  if (!is_terminal(d.info.status)) {
    auto now = clock_type::now();
    if (d.wake_at)
      add_wait("passivated", "until " + iso_time(*d.wake_at));
    if (!h.empty() && h.back().outcome != "event"
        && (h.back().kind == "sleep" || h.back().kind == "deadline")) {
      try {
        clock_type::time_point due{
          milliseconds{std::stoll(payload_text(h.back().payload))}};
        if (due > now)
          add_wait(h.back().kind, "until " + iso_time(due));
      } catch (const std::exception&) {
        // not a time: nothing to say
      }
    }
    // Awakeables created after the last await are what it may wait for.
    for (auto& e : h)
      if (e.kind == "awakeable" && e.outcome != "event" && e.seq > last_await)
        add_wait("awakeable", e.name);
    for (auto& c : children)
      if (!is_terminal(c.status))
        add_wait("child", c.id);
  }
  j["waits"] = std::move(waits);
  j["undo_stack"] = std::move(undo);
}

} // namespace

nlohmann::json run_page_json(const run_page& page, const char* key) {
  auto runs = nlohmann::json::array();
  for (auto& r : page.runs)
    runs.push_back(run_json(r));
  return {{key, std::move(runs)},
          {"next_cursor", page.next_cursor.empty()
                            ? nlohmann::json()
                            : nlohmann::json(page.next_cursor)}};
}

nlohmann::json run_document(perdure::client& c, const std::string& id) {
  auto d = c.describe(id);
  auto history = c.history(id);
  std::vector<run_info> children;
  run_filter kids;
  kids.parent_id = id;
  kids.limit = 1000;
  for (;;) {
    auto page = c.list_runs(kids);
    children.insert(children.end(), page.runs.begin(), page.runs.end());
    if (page.next_cursor.empty() || children.size() >= 10'000)
      break;
    kids.cursor = page.next_cursor;
  }
  auto& i = d.info;
  auto j = run_json(i);
  j["epoch"] = d.epoch;
  j["inputs"] = payload_json(d.inputs);
  j["output"] = d.output ? payload_json(*d.output) : nlohmann::json();
  j["started_at"] = opt_time(d.started_at);
  j["wake_at"] = opt_time(d.wake_at);
  j["deadline"] = opt_time(d.deadline);
  j["attempts"] = d.attempts;
  j["recovery_attempts"] = d.recovery_attempts;
  j["priority"] = d.priority;
  j["partition_key"] = d.partition_key;
  j["dedup_id"] = d.dedup_id;
  j["saga_phase"] = d.saga_phase;
  j["cancel_requested"] = d.cancel_requested;
  auto journal = nlohmann::json::array();
  auto previous = i.created_at;
  for (auto& e : history) {
    nlohmann::json x{{"seq", e.seq},   {"kind", e.kind},
                     {"name", e.name}, {"outcome", e.outcome},
                     {"at", iso_time(e.at)}};
    if (e.outcome == "event") {
      x["reason"] = e.payload;
    } else {
      x["result"] = payload_json(e.payload);
      // Time since the operation before: what this one took, waits
      // included.
      x["duration_ms"] = duration_cast<milliseconds>(e.at - previous).count();
      previous = e.at;
    }
    if (!e.error.empty())
      x["error"] = e.error;
    journal.push_back(std::move(x));
  }
  j["journal"] = std::move(journal);
  auto kids_json = nlohmann::json::array();
  for (auto& k : children)
    kids_json.push_back(run_json(k));
  j["children"] = std::move(kids_json);
  read_journal(d, history, children, j);
  return j;
}

nlohmann::json bulk_json(const char* action, bool dry_run,
                         const bulk_result& r) {
  nlohmann::json j{{"action", action},     {"dry_run", dry_run},
                   {"matched", r.matched}, {"done", r.done},
                   {"sample", r.sample}};
  auto refused = nlohmann::json::array();
  for (auto& [id, why] : r.refused)
    refused.push_back({{"id", id}, {"reason", why}});
  j["refused"] = std::move(refused);
  auto created = nlohmann::json::array();
  for (auto& [from, to] : r.created)
    created.push_back({{"source", from}, {"fork", to}});
  j["created"] = std::move(created);
  return j;
}

namespace {

nlohmann::json opt(const std::optional<std::int32_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

nlohmann::json partition_json(const partition_stats& p) {
  return {{"partition", p.partition_key}, {"ready", p.ready},
          {"delayed", p.delayed},         {"running", p.running},
          {"throttled", p.throttled}};
}

} // namespace

nlohmann::json queue_json(const queue_stats& s) {
  auto j = partition_json(s.total);
  j.erase("partition");
  j["name"] = s.name;
  j["dead_letters"] = s.dead_letters;
  j["recent_starts"] = s.recent_starts;
  j["limits"] = {{"concurrency", opt(s.limits.concurrency)},
                 {"partition_concurrency", opt(s.limits.partition_concurrency)},
                 {"rate_limit", opt(s.limits.rate_limit)},
                 {"rate_period_ms", s.limits.rate_period_ms}};
  auto parts = nlohmann::json::array();
  for (auto& p : s.partitions)
    parts.push_back(partition_json(p));
  j["partitions"] = std::move(parts);
  return j;
}

nlohmann::json queues_json(perdure::client& c) {
  auto all = nlohmann::json::array();
  for (auto& q : c.queues())
    all.push_back(queue_json(perdure::queues::stats(c, q.name)));
  return {{"queues", std::move(all)}};
}

bool overdue(const executor_info& e) {
  return e.state == "live" && age(e.heartbeat_at) > e.lease;
}

nlohmann::json executors_json(const std::vector<executor_info>& all) {
  auto j = nlohmann::json::array();
  for (auto& e : all)
    j.push_back({{"id", e.id},
                 {"state", e.state},
                 {"app_version", e.app_version},
                 {"epoch", e.epoch},
                 {"heartbeat_at", iso_time(e.heartbeat_at)},
                 {"heartbeat_age_ms", age(e.heartbeat_at).count()},
                 {"lease_ms", e.lease.count()},
                 {"overdue", overdue(e)},
                 {"started_at", iso_time(e.started_at)},
                 {"runs_held", e.runs_held}});
  return {{"executors", std::move(j)}};
}

nlohmann::json versions_json(const std::vector<version_report>& all) {
  auto j = nlohmann::json::array();
  for (auto& v : all)
    j.push_back({{"app_version", v.app_version},
                 {"first_seen", opt_time(v.first_seen)},
                 {"last_seen", opt_time(v.last_seen)},
                 {"live_executors", v.live_executors},
                 {"pending", v.pending},
                 {"enqueued", v.enqueued},
                 {"blocked", v.blocked},
                 {"oldest_run", opt_time(v.oldest_run)},
                 {"stranded", v.stranded}});
  return {{"versions", std::move(j)}};
}

void cancel_one(perdure::client& c, const std::string& id) {
  c.cancel(id);
  auto status = c.describe(id).info.status;
  if (is_terminal(status) && status != run_status::cancelled)
    throw perdure::error(errc::invalid_argument,
                         "run '" + id + "' had ended "
                           + std::string{to_string(status)}
                           + ": nothing to cancel");
}

nlohmann::json doctor_json(perdure::client& c) {
  auto checks = nlohmann::json::array();
  auto add = [&](const char* name, bool ok, const std::string& detail) {
    checks.push_back({{"check", name}, {"ok", ok}, {"detail", detail}});
  };
  auto info = c.store_info();
  add("store", true, info.dialect + " reachable");
  auto current = info.schema_version == info.latest_schema_version;
  add("schema", current,
      "version " + std::to_string(info.schema_version)
        + (current ? " (current)"
           : info.schema_version > info.latest_schema_version
             ? " is newer than this build's "
                 + std::to_string(info.latest_schema_version)
                 + ": use the tools of the newest runtime"
             : " is older than " + std::to_string(info.latest_schema_version)
                 + ": start a runtime of this build to migrate it"));
  std::int64_t stranded = 0, blocked = 0;
  std::string stranded_versions;
  for (auto& v : c.versions()) {
    blocked += v.blocked;
    if (v.stranded) {
      stranded += v.pending + v.enqueued + v.blocked;
      stranded_versions += (stranded_versions.empty() ? "" : ", ")
                           + (v.app_version.empty() ? std::string{"(none)"}
                                                    : v.app_version);
    }
  }
  add("stranded", stranded == 0,
      stranded == 0 ? "no stranded work"
                    : std::to_string(stranded)
                        + " runs on versions with no live process ("
                        + stranded_versions
                        + "): deploy them or move their runs");
  add("blocked", blocked == 0,
      blocked == 0 ? "no BLOCKED runs"
                   : std::to_string(blocked)
                       + " BLOCKED runs: runs list --status BLOCKED --wide "
                         "shows why; resume them on fixed code");
  std::int64_t live = 0;
  std::string late;
  for (auto& e : c.executors()) {
    live += e.state == "live" ? 1 : 0;
    if (overdue(e))
      late += (late.empty() ? "" : ", ") + e.id;
  }
  add("executors", late.empty(),
      late.empty() ? std::to_string(live) + " live, none overdue"
                   : "overdue heartbeats (stalled or killed): " + late
                       + "; a live runtime takes their runs over");
  bool ok = std::all_of(checks.begin(), checks.end(),
                        [](auto& k) { return k["ok"].template get<bool>(); });
  return {{"ok", ok}, {"checks", std::move(checks)}};
}

} // namespace perdure::cli
