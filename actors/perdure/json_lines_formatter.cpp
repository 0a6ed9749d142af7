#include "perdure/json_lines_formatter.hpp"

#include "perdure/telemetry/json_text.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>

namespace perdure {

namespace {

void put(spdlog::memory_buf_t& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

void put_string(spdlog::memory_buf_t& out, std::string_view s) {
  thread_local std::string text; // reused: a line costs no allocation
  text.clear();
  telemetry::append_json_string(text, s);
  put(out, text);
}

void put_field(spdlog::memory_buf_t& out, std::string_view key,
               std::string_view value) {
  out.push_back(',');
  put_string(out, key);
  out.push_back(':');
  put_string(out, value);
}

/// Whether `key` is one of the tags `ctx.log()` writes.
bool known_tag(std::string_view key) {
  for (auto k : {"run", "workflow", "step", "attempt", "executor", "version",
                 "trace_id"})
    if (key == k)
      return true;
  return false;
}

/// The tags of a `ctx.log()` line (`[k=v k=v ...] `) as fields; a word
/// that does not start a known tag belongs to the value before it
/// (`step=3 (charge)`, a step named `a=b`). Returns what follows the tags.
std::string_view put_tags(spdlog::memory_buf_t& out, std::string_view text) {
  if (text.size() < 2 || text.front() != '[')
    return text;
  auto close = text.find("] ");
  if (close == std::string_view::npos)
    return text;
  auto tags = text.substr(1, close - 1);
  if (tags.find('=') == std::string_view::npos
      || !known_tag(tags.substr(0, tags.find('='))))
    return text; // not a ctx.log() line
  std::string_view key, value;
  auto flush = [&] {
    if (!key.empty())
      put_field(out, key, value);
  };
  while (!tags.empty()) {
    auto space = tags.find(' ');
    auto word = tags.substr(0, space);
    tags = space == std::string_view::npos ? "" : tags.substr(space + 1);
    auto eq = word.find('=');
    if (eq == std::string_view::npos || !known_tag(word.substr(0, eq))) {
      if (!key.empty()) // extends the value: it is contiguous in `text`
        value = std::string_view{value.data(),
                                 static_cast<std::size_t>(
                                   word.data() + word.size() - value.data())};
      continue;
    }
    flush();
    key = word.substr(0, eq);
    value = word.substr(eq + 1);
  }
  flush();
  return text.substr(close + 2);
}

} // namespace

void json_lines_formatter::format(const spdlog::details::log_msg& msg,
                                  spdlog::memory_buf_t& dest) {
  using namespace std::chrono;
  auto since = msg.time.time_since_epoch();
  auto secs = duration_cast<seconds>(since);
  auto ms = duration_cast<milliseconds>(since - secs).count();
  std::time_t t = secs.count();
  std::tm tm{};
  gmtime_r(&t, &tm);
  char when[64];
  std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  put(dest, "{\"time\":\"");
  put(dest, when);
  put(dest, "\"");
  auto level = spdlog::level::to_string_view(msg.level);
  put_field(dest, "level", std::string_view{level.data(), level.size()});
  if (msg.logger_name.size() > 0)
    put_field(dest, "logger",
              std::string_view{msg.logger_name.data(), msg.logger_name.size()});
  auto rest = put_tags(dest, std::string_view{msg.payload.data(),
                                              msg.payload.size()});
  put_field(dest, "message", rest);
  put(dest, "}\n");
}

std::unique_ptr<spdlog::formatter> json_lines_formatter::clone() const {
  return std::make_unique<json_lines_formatter>();
}

} // namespace perdure
