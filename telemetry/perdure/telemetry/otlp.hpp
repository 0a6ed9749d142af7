#pragma once

// The built-in span sink: OTLP over HTTP with the JSON encoding, to an
// OpenTelemetry collector (or any backend that takes OTLP/HTTP). Spans
// queue in memory (bounded: when full, new spans are dropped and counted)
// and a thread of its own sends them in batches; a step never waits for
// the network, and a collector that is down costs a dropped span, not a
// slower run.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "perdure/telemetry/trace.hpp"

namespace perdure::telemetry {

/// Writes `spans` as one OTLP `ExportTraceServiceRequest` in its JSON
/// encoding (ids in hex, times as decimal strings), under one resource
/// (`service.name` and `resource`) and the instrumentation scope
/// `perdure`.
std::string otlp_json(const std::vector<span>& spans,
                      const std::string& service_name,
                      const std::vector<attribute>& resource = {});

struct otlp_options {
  /// Where to POST: the full URL of the traces path, e.g.
  /// `http://localhost:4318/v1/traces` (https too).
  std::string endpoint;
  std::string service_name = "perdure";
  /// More resource attributes (`deployment.environment`, ...).
  std::vector<attribute> resource;
  /// Sent with every request (an API key's header, say).
  std::vector<std::pair<std::string, std::string>> headers;
  /// Spans held at most; beyond, new ones are dropped.
  std::size_t max_queue = 2048;
  /// Spans per request at most.
  std::size_t max_batch = 512;
  /// How long a span waits at most before it is sent.
  std::chrono::milliseconds flush_every{1000};
  /// Connecting and sending a request, each.
  std::chrono::milliseconds timeout{2000};
};

class otlp_exporter final : public span_sink {
public:
  explicit otlp_exporter(otlp_options opts);
  /// Sends what is queued (within the timeout), then stops.
  ~otlp_exporter() override;

  otlp_exporter(const otlp_exporter&) = delete;
  otlp_exporter& operator=(const otlp_exporter&) = delete;

  void on_end(span s) noexcept override;

  /// Sends everything queued now, and returns once it was sent or failed.
  void flush();

  struct counts {
    std::uint64_t exported = 0;
    std::uint64_t dropped = 0; // queue full, or their request failed
    std::uint64_t failed_requests = 0;
  };
  counts totals() const noexcept;

  const otlp_options& options() const noexcept { return opts_; }

  /// The exporter the standard environment variables describe, or null if
  /// they describe none: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is) or
  /// `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended),
  /// `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` and
  /// `OTEL_EXPORTER_OTLP_HEADERS` (`k=v,k=v`), `OTEL_EXPORTER_OTLP_TIMEOUT`,
  /// `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE` and
  /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (ms and counts); none if
  /// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Throws
  /// `std::invalid_argument` for an endpoint that is not an http(s) URL.
  static std::shared_ptr<otlp_exporter> from_env();

private:
  void run();
  /// Sends `batch`; returns whether the collector took it.
  bool send(const std::vector<span>& batch);

  otlp_options opts_;
  std::string origin_; // scheme://host:port
  /// The collector's connection, kept between batches (the exporter's
  /// thread alone uses it).
  struct connection;
  std::unique_ptr<connection> http_;
  std::string path_;
  mutable std::mutex mtx_;
  std::condition_variable wake_;
  std::condition_variable sent_;
  std::deque<span> queue_;
  bool stopping_ = false;
  /// Spans queued and spans taken off the queue (sent or dropped) so far:
  /// a flush waits until what was queued when it was asked is taken.
  std::uint64_t queued_total_ = 0;
  std::uint64_t taken_total_ = 0;
  std::uint64_t flush_to_ = 0;
  std::atomic<std::uint64_t> exported_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::thread thread_;
};

} // namespace perdure::telemetry
