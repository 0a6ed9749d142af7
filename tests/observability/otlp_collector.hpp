#pragma once

// A collector of the tests' own: an HTTP server on loopback that takes
// OTLP/HTTP JSON (POST /v1/traces) and keeps the spans it was sent.

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace perdure::test {

struct received_span {
  std::string trace_id, span_id, parent_span_id, name, service;
  std::vector<std::pair<std::string, std::string>> links; // trace, span
  std::map<std::string, nlohmann::json> attributes;
  bool error = false;
};

class otlp_collector {
public:
  otlp_collector() {
    server_.Post("/v1/traces", [this](const httplib::Request& req,
                                      httplib::Response& res) {
      try {
        take(nlohmann::json::parse(req.body));
        res.set_content("{}", "application/json");
      } catch (const std::exception& ex) {
        res.status = 400;
        std::lock_guard guard{mtx_};
        malformed_.push_back(ex.what());
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread{[this] { server_.listen_after_bind(); }};
    // Running before anyone may stop it (a stop before the loop starts is
    // lost, and the loop then runs for ever).
    while (!server_.is_running())
      std::this_thread::yield();
  }

  ~otlp_collector() {
    server_.stop();
    thread_.join();
  }

  /// The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it.
  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

  std::vector<received_span> spans() const {
    std::lock_guard guard{mtx_};
    return spans_;
  }

  /// The spans named `name`.
  std::vector<received_span> named(const std::string& name) const {
    std::vector<received_span> out;
    for (auto& s : spans())
      if (s.name == name)
        out.push_back(s);
    return out;
  }

  std::vector<std::string> malformed() const {
    std::lock_guard guard{mtx_};
    return malformed_;
  }

private:
  void take(const nlohmann::json& request) {
    std::vector<received_span> got;
    for (auto& rs : request.at("resourceSpans")) {
      std::string service;
      for (auto& a : rs.at("resource").at("attributes"))
        if (a.at("key") == "service.name")
          service = a.at("value").at("stringValue");
      for (auto& ss : rs.at("scopeSpans"))
        for (auto& s : ss.at("spans")) {
          received_span r;
          r.service = service;
          r.trace_id = s.at("traceId");
          r.span_id = s.at("spanId");
          r.parent_span_id = s.value("parentSpanId", "");
          r.name = s.at("name");
          for (auto& a : s.value("attributes", nlohmann::json::array()))
            r.attributes[a.at("key")] = a.at("value");
          for (auto& l : s.value("links", nlohmann::json::array()))
            r.links.emplace_back(l.at("traceId"), l.at("spanId"));
          r.error = s.contains("status") && s["status"].value("code", 0) == 2;
          // What the OTLP JSON encoding requires of every span.
          if (r.trace_id.size() != 32 || r.span_id.size() != 16
              || !s.at("startTimeUnixNano").is_string()
              || !s.at("endTimeUnixNano").is_string())
            throw std::runtime_error("span '" + r.name + "' is malformed");
          got.push_back(std::move(r));
        }
    }
    std::lock_guard guard{mtx_};
    spans_.insert(spans_.end(), got.begin(), got.end());
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mtx_;
  std::vector<received_span> spans_;
  std::vector<std::string> malformed_;
};

} // namespace perdure::test
