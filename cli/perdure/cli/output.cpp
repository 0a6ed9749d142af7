#include "perdure/cli/output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include <nlohmann/json.hpp>

namespace perdure::cli {

bool use_colour(std::ostream& out) {
  if (std::getenv("NO_COLOR") != nullptr)
    return false;
  auto* term = std::getenv("TERM");
  if (term != nullptr && std::string_view{term} == "dumb")
    return false;
  int fd = &out == &std::cout ? 1 : &out == &std::cerr ? 2 : -1;
  return fd >= 0 && ::isatty(fd) == 1;
}

std::string coloured_status(std::string_view s, bool colour) {
  if (!colour)
    return std::string{s};
  const char* code = "";
  if (s == "SUCCESS")
    code = "32"; // green
  else if (s == "ERROR" || s == "RETRIES_EXCEEDED" || s == "DEAD_LETTER"
           || s == "COMPENSATION_FAILED")
    code = "31"; // red
  else if (s == "BLOCKED")
    code = "35"; // magenta: needs an operator
  else if (s == "CANCELLED" || s == "COMPENSATED")
    code = "33"; // yellow
  else if (s == "PENDING" || s == "ENQUEUED" || s == "COMPENSATING")
    code = "36"; // cyan: under way
  else
    return std::string{s};
  return "\x1b[" + std::string{code} + "m" + std::string{s} + "\x1b[0m";
}

table::table(std::vector<std::string> headers) : headers_(std::move(headers)) {
}

void table::add(std::vector<std::string> row) {
  row.resize(headers_.size());
  rows_.push_back(std::move(row));
}

namespace {

/// Characters a person sees (UTF-8 continuation bytes take no column).
std::size_t width_of(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(
    s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

} // namespace

void table::print(std::ostream& out, bool colour,
                  std::optional<std::size_t> status_column) const {
  std::vector<std::size_t> widths(headers_.size());
  for (std::size_t i = 0; i < headers_.size(); ++i)
    widths[i] = width_of(headers_[i]);
  for (auto& row : rows_)
    for (std::size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], width_of(row[i]));
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string text;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      auto cell = cells[i];
      auto pad = widths[i] - width_of(cell);
      if (!header && status_column && *status_column == i)
        cell = coloured_status(cell, colour);
      text += cell;
      if (i + 1 < cells.size())
        text += std::string(pad + 2, ' ');
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    if (header && colour)
      text = "\x1b[1m" + text + "\x1b[0m";
    out << text << '\n';
  };
  line(headers_, true);
  for (auto& row : rows_)
    line(row, false);
}

namespace {

std::tm utc(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(
    std::chrono::floor<std::chrono::seconds>(t));
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return tm;
}

} // namespace

std::string iso_time(std::chrono::system_clock::time_point t) {
  auto tm = utc(t);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              t - std::chrono::floor<std::chrono::seconds>(t))
              .count();
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string human_time(std::chrono::system_clock::time_point t) {
  auto tm = utc(t);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec);
  return buf;
}

std::string human_duration(std::chrono::milliseconds d) {
  auto ms = d.count();
  std::string sign;
  if (ms < 0) {
    sign = "-";
    ms = -ms;
  }
  char buf[96];
  if (ms < 1000)
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
  else if (ms < 60'000)
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000);
  else if (ms < 3'600'000)
    std::snprintf(buf, sizeof buf, "%lldm%02llds",
                  static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms / 1000 % 60));
  else if (ms < 86'400'000)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm",
                  static_cast<long long>(ms / 3'600'000),
                  static_cast<long long>(ms / 60'000 % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldd%02lldh",
                  static_cast<long long>(ms / 86'400'000),
                  static_cast<long long>(ms / 3'600'000 % 24));
  return sign + buf;
}

std::string clip(std::string_view text, std::size_t width) {
  std::string out;
  std::size_t seen = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if ((c & 0xC0) != 0x80) {
      if (seen == width) {
        // Drop back to make room for the ellipsis.
        while (!out.empty() && (out.back() & 0xC0) == 0x80)
          out.pop_back();
        if (!out.empty())
          out.pop_back();
        return out + "\xe2\x80\xa6";
      }
      ++seen;
    }
    out.push_back(c == '\n' || c == '\r' || c == '\t' ? ' ' : c);
  }
  return out;
}

namespace {

std::string base64(std::string_view bytes) {
  static const char* digits
    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    auto n = (static_cast<unsigned char>(bytes[i]) << 16)
             | (static_cast<unsigned char>(bytes[i + 1]) << 8)
             | static_cast<unsigned char>(bytes[i + 2]);
    out += digits[(n >> 18) & 63];
    out += digits[(n >> 12) & 63];
    out += digits[(n >> 6) & 63];
    out += digits[n & 63];
  }
  if (i < bytes.size()) {
    auto n = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size())
      n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += digits[(n >> 18) & 63];
    out += digits[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

} // namespace

nlohmann::json payload_json(std::string_view bytes) {
  if (bytes.empty())
    return nullptr;
  if (bytes.front() == '\x01')
    return {{"base64", base64(bytes)}};
  auto j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded())
    return std::string{bytes}; // text that is not JSON (an error's reason)
  if (j.is_object() && j.size() == 1 && j.contains("value"))
    return j["value"];
  return j;
}

std::string payload_text(std::string_view bytes) {
  if (!bytes.empty() && bytes.front() == '\x01')
    return "<binary, " + std::to_string(bytes.size()) + " bytes>";
  auto j = payload_json(bytes);
  if (j.is_null())
    return "";
  if (j.is_string())
    return j.get<std::string>();
  return j.dump();
}

void print_json(std::ostream& out, const nlohmann::json& j) {
  out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
      << '\n';
}

} // namespace perdure::cli
