#include "perdure/telemetry/prometheus.hpp"

#include <charconv>
#include <cmath>

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

/// `name{a="x",b="y"[,le="..."]} value`
void append_sample(std::string& out, std::string_view name,
                   const family_reading& f, const series_reading& s,
                   const char* le, double value) {
  out += name;
  bool any = false;
  for (std::size_t i = 0; i < f.label_names.size(); ++i) {
    out += any ? ',' : '{';
    any = true;
    out += f.label_names[i];
    out += "=\"";
    append_escaped(out, s.label_values[i], true);
    out += '"';
  }
  if (le != nullptr) {
    out += any ? ',' : '{';
    any = true;
    out += "le=\"";
    out += le;
    out += '"';
  }
  if (any)
    out += '}';
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
    for (auto& s : f.series) {
      if (f.type != metric_type::histogram) {
        append_sample(out, f.name, f, s, nullptr, s.value);
        continue;
      }
      auto bucket = f.name + "_bucket";
      for (std::size_t i = 0; i < f.bounds.size(); ++i) {
        std::string le;
        append_value(le, f.bounds[i]);
        append_sample(out, bucket, f, s, le.c_str(),
                      static_cast<double>(s.buckets.cumulative[i]));
      }
      append_sample(out, bucket, f, s, "+Inf",
                    static_cast<double>(s.buckets.count));
      append_sample(out, f.name + "_sum", f, s, nullptr, s.buckets.sum);
      append_sample(out, f.name + "_count", f, s, nullptr,
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
