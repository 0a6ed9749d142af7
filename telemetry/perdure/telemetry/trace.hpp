#pragma once

// Spans: what a process did, and for how long, in a trace that may have
// begun in another process (W3C Trace Context). Perdure hands each ended
// span to a `span_sink` the application configures; it never installs a
// global tracer provider. The built-in sink exports OTLP/HTTP JSON
// (perdure/telemetry/otlp.hpp).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace perdure::telemetry {

using trace_id = std::array<std::uint8_t, 16>;
using span_id = std::array<std::uint8_t, 8>;

/// Where a span sits: its trace, itself, and the W3C trace flags.
struct span_context {
  trace_id trace{};
  span_id span{};
  std::uint8_t flags = 1; // sampled

  /// Neither id all zeros (what W3C calls valid).
  bool valid() const noexcept;

  /// `00-<32 hex>-<16 hex>-<2 hex>`, the `traceparent` header.
  std::string traceparent() const;

  /// Reads a `traceparent` header; nullopt if it is not one (unknown
  /// versions are read by their first four fields, as the spec asks).
  static std::optional<span_context> parse(std::string_view traceparent);
};

/// Lower-case hex of an id.
std::string hex(const trace_id& id);
std::string hex(const span_id& id);

/// A fresh random id (never all zeros).
trace_id random_trace_id();
span_id random_span_id();

/// An id derived from `text` alone: the same text gives the same id in
/// every process (a run's trace when its starter sent none; an attempt's
/// span, which the next attempt links to).
trace_id derived_trace_id(std::string_view text);
span_id derived_span_id(std::string_view text);

using attribute_value = std::variant<std::string, std::int64_t, double, bool>;

struct attribute {
  std::string key;
  attribute_value value;
};

/// Another span this one relates to without being its child (the attempt a
/// recovered run's attempt follows).
struct span_link {
  span_context context;
  std::vector<attribute> attributes;
};

/// OpenTelemetry's span kinds (the numbers are OTLP's).
enum class span_kind : int {
  internal = 1,
  server = 2,
  client = 3,
  producer = 4,
  consumer = 5,
};

/// One ended span.
struct span {
  span_context context;
  /// All zeros: a root span.
  span_id parent{};
  std::string name;
  span_kind kind = span_kind::internal;
  /// Wall clock, ns since the Unix epoch.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::vector<attribute> attributes;
  std::vector<span_link> links;
  /// Set: the span failed, with this message.
  std::optional<std::string> error;
};

/// Wall-clock ns since the Unix epoch.
std::int64_t now_ns() noexcept;

/// Receives each span as it ends. Called from Perdure's threads, including
/// those that run steps and commit the journal: it must not block (queue
/// and return), and must not throw.
class span_sink {
public:
  virtual ~span_sink() = default;
  virtual void on_end(span s) noexcept = 0;
};

} // namespace perdure::telemetry
