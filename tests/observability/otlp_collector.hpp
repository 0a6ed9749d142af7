#pragma once

// A collector of the tests' own: an HTTP server on loopback that takes
// OTLP/HTTP JSON (POST /v1/traces) and keeps the spans it was sent.

#include <nlohmann/json.hpp>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "support/loopback_server.hpp"

namespace perdure::test {

struct received_span {
  std::string trace_id, span_id, parent_span_id, name, service;
  std::vector<std::pair<std::string, std::string>> links; // trace, span
  std::map<std::string, nlohmann::json> attributes;
  bool error = false;
};

class otlp_collector {
public:
  otlp_collector()
    : server_([this](httplib::Server& s) {
        s.Post("/v1/traces", [this](const httplib::Request& req,
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
      }) {}

  /// The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it.
  std::string endpoint() const { return server_.base_url(); }

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

  mutable std::mutex mtx_;
  std::vector<received_span> spans_;
  std::vector<std::string> malformed_;
  loopback_server server_; // last: stopped before what its handler uses
};

} // namespace perdure::test
