#include "perdure/telemetry/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace perdure::telemetry {

namespace {

/// A sample value as Go's ParseFloat reads it: `+Inf`, `-Inf`, `NaN`, or
/// the shortest decimal that reads back as the same double.
void append_value(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  // Counts (every bucket, most samples) are whole: written as integers at
  // a fraction of the cost, where that is the text the shortest double
  // gives too (it writes 100000 as 1e+05, and -0 with its sign).
  if (v == std::trunc(v) && v < 1e15 && !std::signbit(v)) {
    auto i = static_cast<std::int64_t>(v);
    if (i < 100000 || i % 10 != 0) {
      auto res = std::to_chars(buf, buf + sizeof buf, i);
      out.append(buf, res.ptr);
      return;
    }
  }
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

/// HELP text escapes `\` and newline; label values also `"`.
void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quote && c == '"')
      out += "\\\"";
    else
      out += c;
  }
}

/// `a="x",b="y"`: a series' labels, rendered once for all its lines.
void append_labels(std::string& out, const family_reading& f,
                   const series_reading& s) {
  for (std::size_t i = 0; i < f.label_names.size(); ++i) {
    if (i > 0)
      out += ',';
    out += f.label_names[i];
    out += "=\"";
    append_escaped(out, s.label_values[i], true);
    out += '"';
  }
}

/// `head value\n`, where `head` is a line's text up to its value
/// (`name{labels} `), made once a series.
void append_line(std::string& out, std::string_view head, double value) {
  out += head;
  append_value(out, value);
  out += '\n';
}

const char* type_name(metric_type t) {
  switch (t) {
    case metric_type::counter: return "counter";
    case metric_type::gauge: return "gauge";
    case metric_type::histogram: return "histogram";
  }
  return "untyped";
}

} // namespace

void append_prometheus_text(std::string& out, const snapshot& families) {
  // About the size it will be, so it grows in one step, not by doubling
  // (a thousand workflows make megabytes).
  std::size_t guess = out.size();
  for (auto& f : families) {
    auto lines = f.type == metric_type::histogram ? f.bounds.size() + 3 : 1;
    guess += f.series.size() * lines * (f.name.size() + 64);
  }
  out.reserve(guess);
  for (auto& f : families) {
    if (f.series.empty())
      continue;
    out += "# HELP ";
    out += f.name;
    out += ' ';
    append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += type_name(f.type);
    out += '\n';
    std::vector<std::string> les; // `le="..."}`, once a family
    if (f.type == metric_type::histogram) {
      for (double b : f.bounds) {
        les.emplace_back("le=\"");
        append_value(les.back(), b);
        les.back() += "\"} ";
      }
      les.emplace_back("le=\"+Inf\"} ");
    }
    std::string labels, head;
    // `name<suffix>{labels} `: braces only around labels.
    auto plain_head = [&](std::string_view suffix) {
      head.assign(f.name);
      head += suffix;
      head += labels.empty() ? " " : "{" + labels + "} ";
      return std::string_view{head};
    };
    for (auto& s : f.series) {
      labels.clear();
      append_labels(labels, f, s);
      if (f.type != metric_type::histogram) {
        append_line(out, plain_head(""), s.value);
        continue;
      }
      // Buckets: `name_bucket{labels,le="b"} `; the last, +Inf, is the
      // count (cumulative holds one more than the bounds).
      head.assign(f.name);
      head += "_bucket{";
      if (!labels.empty())
        head += labels + ",";
      auto prefix = head.size();
      for (std::size_t i = 0; i < les.size(); ++i) {
        head.resize(prefix);
        head += les[i];
        append_line(out, head,
                    static_cast<double>(s.buckets.cumulative[i]));
      }
      append_line(out, plain_head("_sum"), s.buckets.sum);
      append_line(out, plain_head("_count"),
                  static_cast<double>(s.buckets.count));
    }
  }
}

std::string prometheus_text(const snapshot& families) {
  std::string out;
  append_prometheus_text(out, families);
  return out;
}

} // namespace perdure::telemetry
