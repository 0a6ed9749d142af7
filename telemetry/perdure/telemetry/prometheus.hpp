#pragma once

// The Prometheus text exposition format (version 0.0.4), written against
// its specification: HELP and TYPE lines, escaped label values, histogram
// series as cumulative `_bucket{le=...}`, `_sum` and `_count`.

#include <string>

#include "perdure/telemetry/metrics.hpp"

namespace perdure::telemetry {

/// The content type a scrape answers with.
inline constexpr const char* prometheus_content_type
  = "text/plain; version=0.0.4; charset=utf-8";

/// `families` as exposition text. Families without a series are left out.
std::string prometheus_text(const snapshot& families);

/// Appends `families` to `out` (several registries in one scrape).
void append_prometheus_text(std::string& out, const snapshot& families);

} // namespace perdure::telemetry
