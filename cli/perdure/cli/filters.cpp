#include "perdure/cli/filters.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <regex>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "perdure/cli/context.hpp"
#include "perdure/cli/output.hpp"

namespace perdure::cli {

void filter_options::add_to(CLI::App& cmd, std::size_t default_limit) {
  limit = default_limit;
  cmd.add_option("--status", status,
                 "Only runs in this status (PENDING, ENQUEUED, BLOCKED, "
                 "SUCCESS, ERROR, CANCELLED, ...)");
  cmd.add_flag("--active", active,
               "Only runs that have not ended (ENQUEUED, PENDING, BLOCKED)");
  cmd.add_option("--workflow", workflow, "Only runs of this workflow");
  cmd.add_option("--version", version, "Only runs stamped with this app "
                                       "version");
  cmd.add_option("--executor", executor,
                 "Only runs this executor owns (or last owned)");
  cmd.add_option("--parent", parent, "Only children of this run");
  cmd.add_option("--queue", queue, "Only items of this queue");
  cmd.add_option("--object", object,
                 "Only calls of objects of TYPE, or of TYPE/KEY");
  cmd.add_option("--id-prefix", id_prefix, "Only ids starting with this");
  cmd.add_option("--created", created,
                 "Created in SINCE..UNTIL (ISO 8601 or an age: 2h, 7d; "
                 "either side may be left out)");
  cmd.add_option("--ended", ended, "Ended in SINCE..UNTIL");
  cmd.add_option("--limit", limit, "Runs per page (1 to 1000)")
    ->check(CLI::Range(1, 1000));
}

bool filter_options::any() const {
  return !status.empty() || active || !workflow.empty() || !version.empty()
         || !executor.empty() || !parent.empty() || !queue.empty()
         || !object.empty() || !id_prefix.empty() || !created.empty()
         || !ended.empty();
}

run_status parse_status(const std::string& text) {
  auto upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  std::replace(upper.begin(), upper.end(), '-', '_');
  if (auto s = parse_run_status(upper))
    return *s;
  throw cli_error(exit_code::usage,
                  "unknown status '" + text
                    + "': one of ENQUEUED, PENDING, BLOCKED, COMPENSATING, "
                      "SUCCESS, ERROR, CANCELLED, RETRIES_EXCEEDED, "
                      "COMPENSATED, COMPENSATION_FAILED, DEAD_LETTER");
}

std::optional<std::chrono::system_clock::time_point>
parse_time(const std::string& text, std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  static const std::regex age{R"(^(\d{1,9})(ms|s|m|h|d)$)"};
  std::smatch m;
  if (std::regex_match(text, m, age)) {
    auto n = std::stoll(m[1]);
    auto unit = m[2].str();
    milliseconds d = unit == "ms" ? milliseconds{n}
                     : unit == "s" ? duration_cast<milliseconds>(seconds{n})
                     : unit == "m" ? duration_cast<milliseconds>(minutes{n})
                     : unit == "h" ? duration_cast<milliseconds>(hours{n})
                                   : duration_cast<milliseconds>(hours{24 * n});
    return now - d;
  }
  static const std::regex iso{
    R"(^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?)?(Z|[+-]\d{2}:\d{2})?$)"};
  if (!std::regex_match(text, m, iso))
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = std::stoi(m[1]) - 1900;
  tm.tm_mon = std::stoi(m[2]) - 1;
  tm.tm_mday = std::stoi(m[3]);
  tm.tm_hour = m[4].matched ? std::stoi(m[4]) : 0;
  tm.tm_min = m[5].matched ? std::stoi(m[5]) : 0;
  tm.tm_sec = m[6].matched ? std::stoi(m[6]) : 0;
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23
      || tm.tm_min > 59 || tm.tm_sec > 60)
    return std::nullopt;
  auto secs = ::timegm(&tm);
  auto t = system_clock::from_time_t(secs);
  if (m[7].matched) {
    auto frac = m[7].str();
    frac.resize(3, '0');
    t += milliseconds{std::stoi(frac)};
  }
  if (m[8].matched && m[8].str() != "Z") {
    auto zone = m[8].str();
    auto offset = hours{std::stoi(zone.substr(1, 2))}
                  + minutes{std::stoi(zone.substr(4, 2))};
    t += zone[0] == '+' ? -offset : offset; // local time minus its offset
  }
  return t;
}

void parse_range(const std::string& text, const char* what,
                 std::optional<std::chrono::system_clock::time_point>& since,
                 std::optional<std::chrono::system_clock::time_point>& until) {
  auto now = std::chrono::system_clock::now();
  auto bad = [&](const std::string& part) {
    return cli_error(exit_code::usage,
                     std::string{"--"} + what + ": '" + part
                       + "' is not a time: write ISO 8601 "
                         "(2026-11-27T10:00:00Z) or an age (90s, 15m, 2h, "
                         "7d), as SINCE..UNTIL, SINCE.. or ..UNTIL");
  };
  auto dots = text.find("..");
  auto first = text.substr(0, dots);
  auto second = dots == std::string::npos ? std::string{}
                                          : text.substr(dots + 2);
  if (first.empty() && second.empty())
    throw bad(text);
  if (!first.empty()) {
    since = parse_time(first, now);
    if (!since)
      throw bad(first);
  }
  if (!second.empty()) {
    until = parse_time(second, now);
    if (!until)
      throw bad(second);
  }
}

run_filter filter_options::to_filter() const {
  run_filter f;
  f.limit = limit;
  f.cursor = cursor;
  if (!status.empty())
    f.status = parse_status(status);
  f.unended = active;
  auto set = [](const std::string& v, std::optional<std::string>& into) {
    if (!v.empty())
      into = v;
  };
  set(workflow, f.name);
  set(version, f.app_version);
  set(executor, f.executor);
  set(parent, f.parent_id);
  set(queue, f.queue);
  set(id_prefix, f.id_prefix);
  if (!object.empty()) {
    auto slash = object.find('/');
    f.object_type = object.substr(0, slash);
    if (slash != std::string::npos)
      f.object_key = object.substr(slash + 1);
    if (f.object_type->empty()
        || (slash != std::string::npos && f.object_key->empty()))
      throw cli_error(exit_code::usage,
                      "--object: write TYPE or TYPE/KEY (got '" + object
                        + "')");
  }
  if (!created.empty())
    parse_range(created, "created", f.created_after, f.created_before);
  if (!ended.empty())
    parse_range(ended, "ended", f.ended_after, f.ended_before);
  return f;
}

nlohmann::json run_json(const run_info& run) {
  nlohmann::json j{
    {"id", run.id},
    {"workflow", run.name},
    {"status", std::string{to_string(run.status)}},
    {"executor", run.executor},
    {"app_version", run.app_version},
    {"created_at", iso_time(run.created_at)},
    {"updated_at", iso_time(run.updated_at)},
    {"error", run.error ? nlohmann::json(*run.error) : nlohmann::json()},
    {"parent_id",
     run.parent_id ? nlohmann::json(*run.parent_id) : nlohmann::json()},
    {"queue", run.queue ? nlohmann::json(*run.queue) : nlohmann::json()},
    {"collected_at", run.collected_at
                       ? nlohmann::json(iso_time(*run.collected_at))
                       : nlohmann::json()},
  };
  if (run.object_type) {
    j["object_type"] = *run.object_type;
    j["object_key"] = run.object_key.value_or("");
  }
  return j;
}

} // namespace perdure::cli
