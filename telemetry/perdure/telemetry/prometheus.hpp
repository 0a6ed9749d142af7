#pragma once

// The Prometheus text exposition format (version 0.0.4), written against
// its specification: HELP and TYPE lines, escaped label values, histogram
// series as cumulative `_bucket{le=...}`, `_sum` and `_count`.

#include <string>
#include <vector>

#include "perdure/telemetry/metrics.hpp"

namespace perdure::telemetry {

/// The content type a scrape answers with.
inline constexpr const char* prometheus_content_type
  = "text/plain; version=0.0.4; charset=utf-8";

/// Appends the families it is shown to `out` as exposition text; families
/// without a series are left out. Shown a registry (or a runtime's
/// `read_metrics`) directly, it writes without copying the series first.
class prometheus_writer final : public series_visitor {
public:
  explicit prometheus_writer(std::string& out);
  void family(const family_reading& head, std::size_t series) override;
  void series(const std::vector<std::string>& label_values, double value,
              const histogram::reading* buckets) override;

private:
  std::string& out_;
  const family_reading* family_ = nullptr;
  std::vector<std::string> les_; // the family's `le="b"} `
  std::string labels_;           // the series' `a="x",b="y"`
  std::string head_;             // a line up to its value
};

/// `families` as exposition text.
std::string prometheus_text(const snapshot& families);

/// Appends `families` to `out` (several registries in one scrape).
void append_prometheus_text(std::string& out, const snapshot& families);
void append_prometheus_text(std::string& out, const registry& families);

} // namespace perdure::telemetry
