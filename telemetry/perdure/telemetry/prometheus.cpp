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
void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0)
      out += ',';
    out += names[i];
    out += "=\"";
    append_escaped(out, values[i], true);
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

prometheus_writer::prometheus_writer(std::string& out) : out_(out) {}

void prometheus_writer::family(const family_reading& head,
                               std::size_t series) {
  family_ = &head;
  if (series == 0)
    return; // families without a series are left out
  // About the size it will be, so it grows in few steps, not by doubling
  // (a thousand workflows make megabytes).
  auto lines = head.type == metric_type::histogram ? head.bounds.size() + 3
                                                   : 1;
  out_.reserve(out_.size() + series * lines * (head.name.size() + 64));
  out_ += "# HELP ";
  out_ += head.name;
  out_ += ' ';
  append_escaped(out_, head.help, false);
  out_ += "\n# TYPE ";
  out_ += head.name;
  out_ += ' ';
  out_ += type_name(head.type);
  out_ += '\n';
  les_.clear(); // `le="..."} `, once a family
  if (head.type == metric_type::histogram) {
    for (double b : head.bounds) {
      les_.emplace_back("le=\"");
      append_value(les_.back(), b);
      les_.back() += "\"} ";
    }
    les_.emplace_back("le=\"+Inf\"} ");
  }
}

void prometheus_writer::series(const std::vector<std::string>& label_values,
                               double value,
                               const histogram::reading* buckets) {
  auto& f = *family_;
  labels_.clear();
  append_labels(labels_, f.label_names, label_values);
  // `name<suffix>{labels} `: braces only around labels.
  auto plain_head = [&](std::string_view suffix) {
    head_.assign(f.name);
    head_ += suffix;
    if (labels_.empty()) {
      head_ += ' ';
    } else {
      head_ += '{';
      head_ += labels_;
      head_ += "} ";
    }
    return std::string_view{head_};
  };
  if (!buckets) {
    append_line(out_, plain_head(""), value);
    return;
  }
  // Buckets: `name_bucket{labels,le="b"} `; the last, +Inf, is the count
  // (cumulative holds one more than the bounds).
  head_.assign(f.name);
  head_ += "_bucket{";
  if (!labels_.empty()) {
    head_ += labels_;
    head_ += ',';
  }
  auto prefix = head_.size();
  for (std::size_t i = 0; i < les_.size(); ++i) {
    head_.resize(prefix);
    head_ += les_[i];
    append_line(out_, head_, static_cast<double>(buckets->cumulative[i]));
  }
  append_line(out_, plain_head("_sum"), buckets->sum);
  append_line(out_, plain_head("_count"), static_cast<double>(buckets->count));
}

void append_prometheus_text(std::string& out, const snapshot& families) {
  prometheus_writer w{out};
  for (auto& f : families) {
    w.family(f, f.series.size());
    for (auto& s : f.series)
      w.series(s.label_values, s.value,
               f.type == metric_type::histogram ? &s.buckets : nullptr);
  }
}

void append_prometheus_text(std::string& out, const registry& families) {
  prometheus_writer w{out};
  families.visit(w);
}

std::string prometheus_text(const snapshot& families) {
  std::string out;
  append_prometheus_text(out, families);
  return out;
}

} // namespace perdure::telemetry
