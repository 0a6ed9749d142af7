// The observability_overhead scenario: what metrics and traces cost.
//   steps_per_s_on/off   --workflows runs of --steps steps started at once,
//                        the median of --rounds rounds, each round one run
//                        on and one off (on: config::metrics, and every
//                        span exported as OTLP/HTTP JSON to a collector on
//                        loopback, in a process of its own, that takes and
//                        drops them; off: neither)
//   steps_per_s_ratio_on_off  the median of the rounds' on/off ratios
//                        (with their quartiles, _q1 and _q3)
//   cpu_us_per_step_on/off  this process's CPU time per step in those runs
//                        (medians; the CAF scheduler's idle polling
//                        included, so noisy too)
//   p50_ratio_on_off     a lone run's step latency (p50), on over off,
//                        the median of the rounds' ratios
//   scrape_ms            a /metrics scrape (HTTP, the admin endpoint) of a
//                        runtime that ran 1 000 workflow names, median, read
//                        as Prometheus reads it (a new connection, the body
//                        taken in large reads)
//   scrape_httplib_ms    the same through cpp-httplib's client, which reads
//                        4 KiB at a time (what a small client adds)
//   scrape_render_ms     the same text made in process (no HTTP, a new
//                        string each time), median
//   scrape_bytes         its size

#include "observability_bench.hpp"

#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

/// A collector that takes spans and drops them, in a process of its own
/// (forked before any runtime starts): a real collector's work is not
/// this process's, so the CPU measured here is Perdure's alone (the
/// exporter's encoding and sending included).
class null_collector {
public:
  null_collector() {
    int url_pipe[2], hold_pipe[2];
    if (::pipe(url_pipe) != 0 || ::pipe(hold_pipe) != 0)
      throw std::runtime_error("pipe() failed");
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error("fork() failed");
    if (pid_ == 0) {
      ::close(url_pipe[0]);
      ::close(hold_pipe[1]);
      {
        test::loopback_server server{[](httplib::Server& s) {
          s.Post("/v1/traces",
                 [](const httplib::Request&, httplib::Response& res) {
                   res.set_content("{}", "application/json");
                 });
        }};
        auto url = server.base_url() + "/v1/traces";
        (void)!::write(url_pipe[1], url.data(), url.size());
        ::close(url_pipe[1]);
        char c;
        while (::read(hold_pipe[0], &c, 1) > 0) {
        } // until the bench closes its end (or ends)
      }
      ::_exit(0);
    }
    ::close(url_pipe[1]);
    ::close(hold_pipe[0]);
    hold_ = hold_pipe[1];
    char buf[256];
    for (ssize_t n; (n = ::read(url_pipe[0], buf, sizeof buf)) > 0;)
      endpoint_.append(buf, static_cast<std::size_t>(n));
    ::close(url_pipe[0]);
    if (endpoint_.empty())
      throw std::runtime_error("the null collector did not start");
  }
  ~null_collector() {
    ::close(hold_);
    ::waitpid(pid_, nullptr, 0);
  }
  null_collector(const null_collector&) = delete;
  null_collector& operator=(const null_collector&) = delete;

  const std::string& endpoint() const { return endpoint_; }

private:
  pid_t pid_ = -1;
  int hold_ = -1;
  std::string endpoint_;
};

/// This process's CPU time so far (user and system), in µs.
double cpu_us() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto us = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
  };
  return us(u.ru_utime) + us(u.ru_stime);
}

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

struct throughput_reading {
  double steps_per_s = 0;
  double cpu_us_per_step = 0; // this process's, from start to last end
};

/// Steps per second of `workflows` runs started at once.
throughput_reading throughput(const options& o,
                              const null_collector* collector) {
  auto db = database_for(o);
  auto cfg = observed(o, db, collector);
  runtime rt{cfg};
  rt.register_workflow("trivial", steps_of);
  rt.start();
  auto t0 = bench_clock::now();
  auto cpu0 = cpu_us();
  std::vector<workflow_handle<int>> handles;
  handles.reserve(static_cast<size_t>(o.workflows));
  for (int w = 0; w < o.workflows; ++w)
    handles.push_back(rt.start_workflow<int>("trivial", o.steps));
  for (auto& h : handles)
    h.get(std::chrono::seconds{300});
  auto steps = static_cast<double>(o.workflows) * o.steps;
  throughput_reading out{steps / seconds_since(t0), 0};
  // The exporter's work for these spans is theirs: counted after the
  // flush that sends the last of them.
  count_spans(cfg);
  out.cpu_us_per_step = (cpu_us() - cpu0) / steps;
  return out;
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

/// The body of `GET path` on loopback `port`, read as Prometheus reads
/// it: a new connection, the response taken in large reads until the
/// server closes, into `buffer`, kept from the scrape before (Prometheus
/// keeps a pool sized to its last scrapes). Throws unless the status is
/// 200.
std::string_view http_get(int port, std::string_view path,
                          std::string& response) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error("socket() failed");
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_at_end{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("connect() failed");
  std::string request = "GET " + std::string{path}
                        + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Connection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), 0)
      != static_cast<ssize_t>(request.size()))
    throw std::runtime_error("send() failed");
  constexpr std::size_t chunk = 1 << 20;
  std::size_t got = 0;
  for (;;) {
    if (response.size() < got + chunk)
      response.resize(std::max(got + chunk, 2 * response.size()));
    auto n = ::recv(fd, response.data() + got, chunk, 0);
    if (n < 0)
      throw std::runtime_error("recv() failed");
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  std::string_view all{response.data(), got};
  auto body = all.find("\r\n\r\n");
  if (all.substr(0, 12) != "HTTP/1.1 200" || body == std::string_view::npos)
    throw std::runtime_error("the scrape failed: "
                             + std::string{all.substr(0, all.find('\r'))});
  return all.substr(body + 4);
}

struct scrape_reading {
  double ms = 0;         // over HTTP, median
  double httplib_ms = 0; // the same through httplib's client, median
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
  std::vector<double> v, small, render;
  std::string buffer;
  for (int i = 0; i < 21; ++i) {
    auto t0 = bench_clock::now();
    auto body = http_get(ep.port(), "/metrics", buffer);
    v.push_back(seconds_since(t0) * 1000);
    if (body.find("workflow-999") == std::string_view::npos)
      throw std::runtime_error("the scrape missed a workflow");
    out.bytes = body.size();
    t0 = bench_clock::now();
    auto res = http.Get("/metrics");
    if (!res || res->status != 200)
      throw std::runtime_error("the scrape failed");
    small.push_back(seconds_since(t0) * 1000);
    t0 = bench_clock::now();
    std::string text;
    telemetry::prometheus_writer writer{text};
    rt.read_metrics(writer);
    render.push_back(seconds_since(t0) * 1000);
  }
  out.ms = median(v);
  out.httplib_ms = median(small);
  out.render_ms = median(render);
  return out;
}

} // namespace

namespace {

/// The median of `v` (and, for the spread, its quartiles).
struct spread {
  double q1 = 0, median = 0, q3 = 0;
};
spread spread_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
  };
  return {at(0.25), at(0.5), at(0.75)};
}

} // namespace

void observability_overhead(const options& o) {
  int rounds = o.rounds > 0 ? o.rounds : 3;
  null_collector collector;
  // Per round, on and off back to back, the side that goes first swapped
  // every round (off-on, on-off, ...): the machine's drift and what a run
  // leaves the database to do (autovacuum, a checkpoint) hit both sides.
  // The ratios are the medians of the rounds' own ratios: on this machine
  // two runs of the same side differ by up to 10 %, so a 3 % bar is read
  // from many pairs, not from a best of a few.
  std::vector<double> on, off, rate_ratio, cpu_on, cpu_off, cpu_ratio;
  std::vector<double> lat_on, lat_off, lat_ratio;
  for (int r = 0; r < rounds; ++r) {
    throughput_reading t[2];
    double lat[2];
    auto measure = [&](bool tracing) {
      auto* c = tracing ? &collector : nullptr;
      t[tracing] = throughput(o, c);
      lat[tracing] = latency_p50_us(o, c);
    };
    measure(r % 2 == 1);
    measure(r % 2 == 0);
    on.push_back(t[1].steps_per_s);
    off.push_back(t[0].steps_per_s);
    rate_ratio.push_back(t[1].steps_per_s / t[0].steps_per_s);
    cpu_on.push_back(t[1].cpu_us_per_step);
    cpu_off.push_back(t[0].cpu_us_per_step);
    cpu_ratio.push_back(t[1].cpu_us_per_step / t[0].cpu_us_per_step);
    lat_on.push_back(lat[1]);
    lat_off.push_back(lat[0]);
    lat_ratio.push_back(lat[1] / lat[0]);
  }
  auto ratio = spread_of(rate_ratio);
  auto latency = spread_of(lat_ratio);
  auto scraped = scrape(o);
  header(o)
    .add("workflows", o.workflows)
    .add("steps", o.steps)
    .add("rounds", rounds)
    .add("steps_per_s_on", spread_of(on).median)
    .add("steps_per_s_off", spread_of(off).median)
    .add("steps_per_s_ratio_on_off", ratio.median)
    .add("steps_per_s_ratio_q1", ratio.q1)
    .add("steps_per_s_ratio_q3", ratio.q3)
    .add("cpu_us_per_step_on", spread_of(cpu_on).median)
    .add("cpu_us_per_step_off", spread_of(cpu_off).median)
    .add("cpu_ratio_on_off", spread_of(cpu_ratio).median)
    .add("p50_us_on", spread_of(lat_on).median)
    .add("p50_us_off", spread_of(lat_off).median)
    .add("p50_ratio_on_off", latency.median)
    .add("p50_ratio_q1", latency.q1)
    .add("p50_ratio_q3", latency.q3)
    .add("scrape_ms", scraped.ms)
    .add("scrape_httplib_ms", scraped.httplib_ms)
    .add("scrape_render_ms", scraped.render_ms)
    .add("scrape_bytes", static_cast<double>(scraped.bytes))
    .add("spans_exported", static_cast<double>(spans_exported))
    .print();
}

} // namespace perdure::bench
