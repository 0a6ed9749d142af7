#include "perdure/telemetry/prometheus.hpp"

#include <charconv>
#include <cmath>
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
std::string label_text(const family_reading& f, const series_reading& s) {
  std::string out;
  for (std::size_t i = 0; i < f.label_names.size(); ++i) {
    if (i > 0)
      out += ',';
    out += f.label_names[i];
    out += "=\"";
    append_escaped(out, s.label_values[i], true);
    out += '"';
  }
  return out;
}

/// `name{labels[,le="..."]} value`
void append_sample(std::string& out, std::string_view name,
                   const std::string& labels, const char* le, double value) {
  out += name;
  if (!labels.empty() || le != nullptr) {
    out += '{';
    out += labels;
    if (le != nullptr) {
      if (!labels.empty())
        out += ',';
      out += "le=\"";
      out += le;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
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
    std::vector<std::string> les; // the bounds as text, once a family
    if (f.type == metric_type::histogram)
      for (double b : f.bounds) {
        les.emplace_back();
        append_value(les.back(), b);
      }
    auto bucket = f.name + "_bucket";
    auto sum = f.name + "_sum";
    auto count = f.name + "_count";
    for (auto& s : f.series) {
      auto labels = label_text(f, s);
      if (f.type != metric_type::histogram) {
        append_sample(out, f.name, labels, nullptr, s.value);
        continue;
      }
      for (std::size_t i = 0; i < les.size(); ++i)
        append_sample(out, bucket, labels, les[i].c_str(),
                      static_cast<double>(s.buckets.cumulative[i]));
      append_sample(out, bucket, labels, "+Inf",
                    static_cast<double>(s.buckets.count));
      append_sample(out, sum, labels, nullptr, s.buckets.sum);
      append_sample(out, count, labels, nullptr,
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
