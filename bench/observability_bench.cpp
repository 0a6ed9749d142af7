// The observability_overhead scenario: what metrics and traces cost.
//   steps_per_s_on/off   --workflows runs of --steps steps started at once,
//                        best of --rounds rounds each, on and off
//                        alternating (on: config::metrics, and every span
//                        exported as OTLP/HTTP JSON to a collector on
//                        loopback that takes and drops them; off: neither)
//   p50_ratio_on_off     a lone run's step latency (p50), on over off
//   scrape_ms            a /metrics scrape (HTTP, the admin endpoint) of a
//                        runtime that ran 1 000 workflow names, median
//   scrape_render_ms     the same text made in process (no HTTP), median
//   scrape_bytes         its size

#include "observability_bench.hpp"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "perdure/admin/endpoint.hpp"
#include "perdure/perdure.hpp"
#include "perdure/telemetry/otlp.hpp"
#include "perdure/telemetry/prometheus.hpp"
#include "support/loopback_server.hpp"
#include "support/test_support.hpp"

namespace perdure::bench {

namespace {

task<int> steps_of(workflow_context& ctx, int steps) {
  int sum = 0;
  for (int i = 0; i < steps; ++i)
    sum += co_await ctx.step("s" + std::to_string(i), [i] { return i; });
  co_return sum;
}

/// A collector that takes spans and drops them (what a real one costs the
/// process is the exporter's work, measured here, not the collector's).
class null_collector {
public:
  null_collector()
    : server_([](httplib::Server& s) {
        s.Post("/v1/traces", [](const httplib::Request&,
                                httplib::Response& res) {
          res.set_content("{}", "application/json");
        });
      }) {}
  std::string endpoint() const { return server_.base_url() + "/v1/traces"; }

private:
  test::loopback_server server_;
};

std::uint64_t spans_exported = 0;

/// Metrics and traces on (spans to `collector`) or both off.
config observed(const options& o, const test::database& db,
                const null_collector* collector) {
  auto cfg = runtime_config(db);
  cfg.metrics = collector != nullptr;
  auto* tracing = std::getenv("BENCH_TRACING"); // "0": metrics alone
  if (collector && !(tracing && std::string_view{tracing} == "0"))
    cfg.span_sink = std::make_shared<telemetry::otlp_exporter>(
      telemetry::otlp_options{.endpoint = collector->endpoint()});
  (void)o;
  return cfg;
}

/// Counts what `cfg`'s exporter sent, once it has sent all.
void count_spans(config& cfg) {
  if (auto* e = dynamic_cast<telemetry::otlp_exporter*>(cfg.span_sink.get())) {
    e->flush();
    spans_exported += e->totals().exported;
  }
}

/// Steps per second of `workflows` runs started at once.
double throughput(const options& o, const null_collector* collector) {
  auto db = database_for(o);
  auto cfg = observed(o, db, collector);
  runtime rt{cfg};
  rt.register_workflow("trivial", steps_of);
  rt.start();
  auto t0 = bench_clock::now();
  std::vector<workflow_handle<int>> handles;
  handles.reserve(static_cast<size_t>(o.workflows));
  for (int w = 0; w < o.workflows; ++w)
    handles.push_back(rt.start_workflow<int>("trivial", o.steps));
  for (auto& h : handles)
    h.get(std::chrono::seconds{300});
  auto rate = static_cast<double>(o.workflows) * o.steps / seconds_since(t0);
  count_spans(cfg);
  return rate;
}

/// The median time between the steps of one run (µs).
double latency_p50_us(const options& o, const null_collector* collector) {
  auto db = database_for(o);
  auto cfg = observed(o, db, collector);
  runtime rt{cfg};
  std::vector<double> v;
  rt.register_workflow("timed", [&v](workflow_context& ctx, int steps) -> task<int> {
    auto last = bench_clock::now();
    for (int i = 0; i < steps; ++i) {
      co_await ctx.step("s", [i] { return i; });
      auto now = bench_clock::now();
      v.push_back(std::chrono::duration<double, std::micro>(now - last).count());
      last = now;
    }
    co_return steps;
  });
  rt.start();
  rt.start_workflow<int>("timed", 1000).get(std::chrono::seconds{300});
  count_spans(cfg);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct scrape_reading {
  double ms = 0;        // over HTTP, median
  double render_ms = 0; // the snapshot and its text in process, median
  std::size_t bytes = 0;
};

scrape_reading scrape(const options& o) {
  auto db = database_for(o);
  auto cfg = runtime_config(db);
  cfg.admin_listen = "127.0.0.1:0";
  runtime rt{cfg};
  constexpr int names = 1000;
  for (int n = 0; n < names; ++n)
    rt.register_workflow("workflow-" + std::to_string(n), steps_of);
  rt.start();
  admin::endpoint ep{rt};
  std::vector<workflow_handle<int>> handles;
  for (int n = 0; n < names; ++n)
    handles.push_back(rt.start_workflow<int>("workflow-" + std::to_string(n), 1));
  for (auto& h : handles)
    h.get(std::chrono::seconds{300});
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  scrape_reading out;
  httplib::Client http{"127.0.0.1", ep.port()};
  std::vector<double> v, render;
  for (int i = 0; i < 21; ++i) {
    auto t0 = bench_clock::now();
    auto res = http.Get("/metrics");
    if (!res || res->status != 200
        || res->body.find("workflow-999") == std::string::npos)
      throw std::runtime_error("the scrape failed");
    v.push_back(seconds_since(t0) * 1000);
    out.bytes = res->body.size();
    t0 = bench_clock::now();
    auto text = telemetry::prometheus_text(rt.metrics());
    render.push_back(seconds_since(t0) * 1000);
  }
  out.ms = median(v);
  out.render_ms = median(render);
  return out;
}

} // namespace

void observability_overhead(const options& o) {
  int rounds = o.rounds > 0 ? o.rounds : 3;
  null_collector collector;
  double on = 0, off = 0, lat_on = 1e18, lat_off = 1e18;
  for (int r = 0; r < rounds; ++r) {
    // Alternating, best of each, the side that goes first swapped every
    // round (off-on, on-off, ...): the machine's drift and what a run
    // leaves the database to do (autovacuum, a checkpoint) hit both sides.
    auto measure = [&](bool tracing) {
      auto* c = tracing ? &collector : nullptr;
      auto& rate = tracing ? on : off;
      auto& lat = tracing ? lat_on : lat_off;
      rate = std::max(rate, throughput(o, c));
      lat = std::min(lat, latency_p50_us(o, c));
    };
    measure(r % 2 == 1);
    measure(r % 2 == 0);
  }
  auto scraped = scrape(o);
  header(o)
    .add("workflows", o.workflows)
    .add("steps", o.steps)
    .add("rounds", rounds)
    .add("steps_per_s_on", on)
    .add("steps_per_s_off", off)
    .add("steps_per_s_ratio_on_off", on / off)
    .add("p50_us_on", lat_on)
    .add("p50_us_off", lat_off)
    .add("p50_ratio_on_off", lat_on / lat_off)
    .add("scrape_ms", scraped.ms)
    .add("scrape_render_ms", scraped.render_ms)
    .add("scrape_bytes", static_cast<double>(scraped.bytes))
    .add("spans_exported", static_cast<double>(spans_exported))
    .print();
}

} // namespace perdure::bench
