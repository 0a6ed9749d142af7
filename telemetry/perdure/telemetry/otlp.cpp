#include "perdure/telemetry/otlp.hpp"
#include "perdure/telemetry/json_text.hpp"
#include "perdure/telemetry/percent_decoding.hpp"

#include <httplib.h>

#include <array>
#include <charconv>
#include <cmath>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>

namespace perdure::telemetry {

namespace {

void escape(std::string& out, std::string_view s) {
  append_json_string(out, s);
}

/// `"<hex>"` of an id, without a string made for it.
template <std::size_t N>
void append_hex(std::string& out, const std::array<std::uint8_t, N>& id) {
  static constexpr char digits[] = "0123456789abcdef";
  char buf[2 * N + 2];
  buf[0] = '"';
  for (std::size_t i = 0; i < N; ++i) {
    buf[1 + 2 * i] = digits[id[i] >> 4];
    buf[2 + 2 * i] = digits[id[i] & 0xf];
  }
  buf[2 * N + 1] = '"';
  out.append(buf, sizeof buf);
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

void write_value(std::string& out, const attribute_value& v) {
  if (auto* s = std::get_if<std::string>(&v)) {
    out += "{\"stringValue\":";
    escape(out, *s);
  } else if (auto* i = std::get_if<std::int64_t>(&v)) {
    out += "{\"intValue\":\""; // int64: a string
    append_int(out, *i);
    out += '"';
  } else if (auto* d = std::get_if<double>(&v); d && !std::isfinite(*d)) {
    // JSON has no NaN or infinity: the value as text.
    out += "{\"stringValue\":";
    escape(out, std::isnan(*d) ? "NaN" : *d > 0 ? "+Inf" : "-Inf");
  } else if (d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    out += "{\"doubleValue\":";
    out += buf;
  } else {
    out += std::get<bool>(v) ? "{\"boolValue\":true" : "{\"boolValue\":false";
  }
  out += '}';
}

void write_attributes(std::string& out, const std::vector<attribute>& as) {
  out += '[';
  bool first = true;
  for (auto& a : as) {
    if (!first)
      out += ',';
    first = false;
    out += "{\"key\":";
    escape(out, a.key);
    out += ",\"value\":";
    write_value(out, a.value);
    out += '}';
  }
  out += ']';
}

void write_span(std::string& out, const span& s) {
  out += "{\"traceId\":";
  append_hex(out, s.context.trace);
  out += ",\"spanId\":";
  append_hex(out, s.context.span);
  if (s.parent != span_id{}) {
    out += ",\"parentSpanId\":";
    append_hex(out, s.parent);
  }
  out += ",\"flags\":";
  append_int(out, s.context.flags);
  out += ",\"name\":";
  escape(out, s.name);
  out += ",\"kind\":";
  append_int(out, static_cast<int>(s.kind));
  out += ",\"startTimeUnixNano\":\"";
  append_int(out, s.start_ns);
  out += "\",\"endTimeUnixNano\":\"";
  append_int(out, s.end_ns);
  out += "\",\"attributes\":";
  write_attributes(out, s.attributes);
  if (!s.links.empty()) {
    out += ",\"links\":[";
    bool first = true;
    for (auto& l : s.links) {
      if (!first)
        out += ',';
      first = false;
      out += "{\"traceId\":";
      append_hex(out, l.context.trace);
      out += ",\"spanId\":";
      append_hex(out, l.context.span);
      out += ",\"attributes\":";
      write_attributes(out, l.attributes);
      out += '}';
    }
    out += ']';
  }
  if (s.error) {
    out += ",\"status\":{\"code\":2,\"message\":";
    escape(out, *s.error);
    out += '}';
  }
  out += '}';
}

/// `k=v,k=v` (the OTEL_* list format), values percent-decoded.
std::vector<std::pair<std::string, std::string>> pairs(const char* text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string_view rest = text ? text : "";
  while (!rest.empty()) {
    auto comma = rest.find(',');
    auto item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      continue;
    auto trim = [](std::string_view s) {
      while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
      while (!s.empty() && s.back() == ' ')
        s.remove_suffix(1);
      return std::string{s};
    };
    out.emplace_back(trim(item.substr(0, eq)),
                     percent_decoded(trim(item.substr(eq + 1))));
  }
  return out;
}

std::string env(const char* name) {
  auto* v = std::getenv(name);
  return v ? v : "";
}

} // namespace

namespace {

void append_otlp_json(std::string& out, const std::vector<span>& spans,
                      const std::string& service_name,
                      const std::vector<attribute>& resource) {
  // A step's span is about 300 bytes: grown once, not by doubling.
  out.reserve(out.size() + 512 + spans.size() * 384);
  out += "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
  std::vector<attribute> attrs{{"service.name", service_name}};
  attrs.insert(attrs.end(), resource.begin(), resource.end());
  write_attributes(out, attrs);
  out += "},\"scopeSpans\":[{\"scope\":{\"name\":\"perdure\"},\"spans\":[";
  bool first = true;
  for (auto& s : spans) {
    if (!first)
      out += ',';
    first = false;
    write_span(out, s);
  }
  out += "]}]}]}";
}

} // namespace

std::string otlp_json(const std::vector<span>& spans,
                      const std::string& service_name,
                      const std::vector<attribute>& resource) {
  std::string out;
  append_otlp_json(out, spans, service_name, resource);
  return out;
}

struct otlp_exporter::connection {
  explicit connection(const std::string& origin) : client(origin) {}
  httplib::Client client;
  /// A batch's text, its memory kept for the next batch (a new one each
  /// time cost page faults and unmaps, a third of the exporter's time).
  std::string body;
};

otlp_exporter::otlp_exporter(otlp_options opts) : opts_(std::move(opts)) {
  auto scheme_end = opts_.endpoint.find("://");
  auto scheme = scheme_end == std::string::npos
                  ? std::string{}
                  : opts_.endpoint.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    throw std::invalid_argument("OTLP endpoint '" + opts_.endpoint
                                + "' is not an http:// or https:// URL");
  auto path_at = opts_.endpoint.find('/', scheme_end + 3);
  origin_ = opts_.endpoint.substr(0, path_at);
  path_ = path_at == std::string::npos ? "/v1/traces"
                                       : opts_.endpoint.substr(path_at);
  if (opts_.max_batch == 0)
    opts_.max_batch = 1;
  http_ = std::make_unique<connection>(origin_);
  auto& http = http_->client;
  http.set_keep_alive(true);
  http.set_connection_timeout(opts_.timeout);
  http.set_read_timeout(opts_.timeout);
  http.set_write_timeout(opts_.timeout);
  thread_ = std::thread{[this] { run(); }};
}

otlp_exporter::~otlp_exporter() {
  {
    std::lock_guard guard{mtx_};
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void otlp_exporter::on_end(span s) noexcept {
  try {
    std::unique_lock guard{mtx_};
    if (stopping_ || queue_.size() >= opts_.max_queue) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(s));
    ++queued_total_;
    if (queue_.size() < opts_.max_batch)
      return; // sent when the interval is up
  } catch (...) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  wake_.notify_one();
}

void otlp_exporter::flush() {
  std::unique_lock guard{mtx_};
  auto target = queued_total_;
  flush_to_ = std::max(flush_to_, target);
  wake_.notify_one();
  sent_.wait(guard, [&] { return taken_total_ >= target || stopping_; });
}

otlp_exporter::counts otlp_exporter::totals() const noexcept {
  return {exported_.load(), dropped_.load(), failed_.load()};
}

void otlp_exporter::run() {
  using clock = std::chrono::steady_clock;
  auto backoff = std::chrono::milliseconds{0};
  auto retry_at = clock::time_point{}; // after a failed request
  std::unique_lock guard{mtx_};
  for (;;) {
    auto due = std::max(clock::now() + opts_.flush_every, retry_at);
    wake_.wait_until(guard, due, [&] {
      return stopping_ || flush_to_ > taken_total_
             || (queue_.size() >= opts_.max_batch && clock::now() >= retry_at);
    });
    // What is queued goes, batch by batch. A failed request drops its
    // batch and gives the collector time (doubling, up to 30 s) before the
    // next; meanwhile spans wait in the queue, and beyond its bound are
    // dropped: a collector that is down never slows a step.
    while (!queue_.empty()) {
      auto n = std::min(queue_.size(), opts_.max_batch);
      std::vector<span> batch;
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      guard.unlock();
      auto ok = send(batch);
      guard.lock();
      taken_total_ += n;
      sent_.notify_all();
      if (ok) {
        exported_.fetch_add(batch.size());
        backoff = std::chrono::milliseconds{0};
        continue;
      }
      dropped_.fetch_add(batch.size());
      failed_.fetch_add(1);
      backoff = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds{30'000},
        std::max(opts_.flush_every, backoff * 2));
      retry_at = clock::now() + backoff;
      break;
    }
    if (stopping_) {
      dropped_.fetch_add(queue_.size()); // one failure at the end is enough
      taken_total_ += queue_.size();
      queue_.clear();
      sent_.notify_all();
      return;
    }
    if (!queue_.empty() && flush_to_ > taken_total_) {
      // A flush after a failure: what it waits for is dropped, not held
      // for the backoff (a flush returns).
      dropped_.fetch_add(queue_.size());
      taken_total_ += queue_.size();
      queue_.clear();
      sent_.notify_all();
    }
  }
}

bool otlp_exporter::send(const std::vector<span>& batch) {
  try {
    auto& http = http_->client;
    httplib::Headers headers;
    for (auto& [k, v] : opts_.headers)
      headers.emplace(k, v);
    auto& body = http_->body;
    body.clear();
    append_otlp_json(body, batch, opts_.service_name, opts_.resource);
    // Sent from `body` as it is (a string body is copied into the request).
    auto res = http.Post(
      path_, headers, body.size(),
      [&body](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
        return sink.write(body.data() + offset, length);
      },
      "application/json");
    return res && res->status >= 200 && res->status < 300;
  } catch (...) {
    return false;
  }
}

std::shared_ptr<otlp_exporter> otlp_exporter::from_env() {
  if (env("OTEL_SDK_DISABLED") == "true"
      || env("OTEL_TRACES_EXPORTER") == "none")
    return nullptr;
  auto protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
  if (protocol.empty())
    protocol = env("OTEL_EXPORTER_OTLP_PROTOCOL");
  if (!protocol.empty() && protocol != "http/json")
    throw std::invalid_argument(
      "OTEL_EXPORTER_OTLP_PROTOCOL is '" + protocol
      + "': Perdure's exporter speaks http/json only; set it to http/json "
        "and point the endpoint at a collector's OTLP/HTTP port (4318)");
  otlp_options opts;
  opts.endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (opts.endpoint.empty()) {
    auto base = env("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (base.empty())
      return nullptr;
    if (base.back() != '/')
      base += '/';
    opts.endpoint = base + "v1/traces";
  }
  if (auto name = env("OTEL_SERVICE_NAME"); !name.empty())
    opts.service_name = name;
  for (auto& [k, v] : pairs(std::getenv("OTEL_RESOURCE_ATTRIBUTES"))) {
    if (k == "service.name" && env("OTEL_SERVICE_NAME").empty())
      opts.service_name = v;
    else if (k != "service.name")
      opts.resource.push_back({k, v});
  }
  opts.headers = pairs(std::getenv("OTEL_EXPORTER_OTLP_HEADERS"));
  // The batch span processor's settings, as the SDKs read them.
  auto number = [](const char* name, auto& field) {
    auto text = env(name);
    if (text.empty())
      return;
    char* end = nullptr;
    auto v = std::strtoll(text.c_str(), &end, 10);
    if (end != text.c_str() && *end == '\0' && v > 0)
      field = static_cast<std::remove_reference_t<decltype(field)>>(v);
  };
  std::int64_t delay_ms = opts.flush_every.count();
  std::int64_t timeout_ms = opts.timeout.count();
  number("OTEL_BSP_SCHEDULE_DELAY", delay_ms);
  number("OTEL_EXPORTER_OTLP_TIMEOUT", timeout_ms);
  number("OTEL_BSP_MAX_QUEUE_SIZE", opts.max_queue);
  number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", opts.max_batch);
  opts.flush_every = std::chrono::milliseconds{delay_ms};
  opts.timeout = std::chrono::milliseconds{timeout_ms};
  return std::make_shared<otlp_exporter>(std::move(opts));
}

} // namespace perdure::telemetry
