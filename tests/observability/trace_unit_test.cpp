// Spans' ids and W3C trace context, their OTLP JSON encoding, and the
// exporter's bounded queue.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <cstdlib>

#include "perdure/telemetry/otlp.hpp"
#include "perdure/telemetry/percent_decoding.hpp"
#include "perdure/telemetry/trace.hpp"

using namespace perdure::telemetry;
using namespace std::chrono_literals;

TEST(trace_context, a_traceparent_reads_back_as_written) {
  auto text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto c = span_context::parse(text);
  ASSERT_TRUE(c);
  EXPECT_EQ(hex(c->trace), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(hex(c->span), "00f067aa0ba902b7");
  EXPECT_EQ(c->flags, 1);
  EXPECT_EQ(c->traceparent(), text);
  // A later version may add fields; its first four are read.
  auto later = span_context::parse(
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes");
  ASSERT_TRUE(later);
  EXPECT_EQ(later->flags, 0);
}

TEST(trace_context, what_is_not_a_traceparent_is_refused) {
  for (auto bad : {
         "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
         "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // case
         "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zeros
         "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
         "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version
         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
         "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
         "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
       })
    EXPECT_FALSE(span_context::parse(bad)) << bad;
}

TEST(trace_context, derived_ids_agree_everywhere_and_differ_by_text) {
  EXPECT_EQ(derived_trace_id("run-1"), derived_trace_id("run-1"));
  EXPECT_NE(derived_trace_id("run-1"), derived_trace_id("run-2"));
  EXPECT_EQ(derived_span_id("run-1:3"), derived_span_id("run-1:3"));
  EXPECT_NE(derived_span_id("run-1:3"), derived_span_id("run-1:4"));
  EXPECT_NE(random_span_id(), random_span_id());
  EXPECT_TRUE((span_context{random_trace_id(), random_span_id()}).valid());
}

TEST(percent_decoding, escapes_are_decoded_and_the_rest_kept) {
  using perdure::telemetry::percent_decoded;
  EXPECT_EQ(percent_decoded("Basic%20dXNlcjpwdw=="), "Basic dXNlcjpwdw==");
  EXPECT_EQ(percent_decoded("order%2f7%2F8"), "order/7/8");
  EXPECT_EQ(percent_decoded("%41%4a%4A"), "AJJ");
  // Not an escape: kept as written.
  EXPECT_EQ(percent_decoded("50%"), "50%");
  EXPECT_EQ(percent_decoded("%4"), "%4");
  EXPECT_EQ(percent_decoded("%zz%"), "%zz%");
  EXPECT_EQ(percent_decoded(""), "");
}

TEST(otlp_json, spans_are_encoded_as_the_specification_asks) {
  span s;
  s.context = *span_context::parse(
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  s.parent = derived_span_id("parent");
  s.name = "step \"charge\"\n";
  s.kind = span_kind::consumer;
  s.start_ns = 1700000000123456789;
  s.end_ns = 1700000000223456789;
  s.attributes = {{"perdure.run_id", std::string{"o1"}},
                  {"perdure.journal_index", std::int64_t{3}},
                  {"ratio", 0.5},
                  {"perdure.ended", true}};
  s.links.push_back({*span_context::parse(
                       "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                       "1111111111111111-01"),
                     {}});
  s.error = "boom";
  auto doc = nlohmann::json::parse(otlp_json({s}, "svc"));
  auto& rs = doc.at("resourceSpans").at(0);
  EXPECT_EQ(rs.at("resource").at("attributes").at(0).at("value").at(
              "stringValue"),
            "svc");
  auto& j = rs.at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(j.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(j.at("spanId"), "00f067aa0ba902b7");
  EXPECT_EQ(j.at("parentSpanId"), hex(s.parent));
  EXPECT_EQ(j.at("name"), "step \"charge\"\n");
  EXPECT_EQ(j.at("kind"), 5);
  EXPECT_EQ(j.at("startTimeUnixNano"), "1700000000123456789");
  EXPECT_EQ(j.at("endTimeUnixNano"), "1700000000223456789");
  EXPECT_EQ(j.at("attributes").at(0).at("value").at("stringValue"), "o1");
  EXPECT_EQ(j.at("attributes").at(1).at("value").at("intValue"), "3");
  EXPECT_EQ(j.at("attributes").at(2).at("value").at("doubleValue"), 0.5);
  EXPECT_EQ(j.at("attributes").at(3).at("value").at("boolValue"), true);
  EXPECT_EQ(j.at("links").at(0).at("spanId"), "1111111111111111");
  EXPECT_EQ(j.at("status").at("code"), 2);
  EXPECT_EQ(j.at("status").at("message"), "boom");
}

TEST(otlp_exporter, a_full_queue_drops_spans_and_never_blocks) {
  otlp_exporter e{{.endpoint = "http://127.0.0.1:1/v1/traces",
                   .max_queue = 4,
                   .flush_every = std::chrono::hours{1}}};
  for (int i = 0; i < 10; ++i) {
    span s;
    s.context = {random_trace_id(), random_span_id()};
    s.name = "s";
    e.on_end(std::move(s));
  }
  EXPECT_EQ(e.totals().dropped, 6u);
  e.flush(); // the four go, and fail: nothing listens
  EXPECT_EQ(e.totals().dropped, 10u);
  EXPECT_EQ(e.totals().exported, 0u);
  EXPECT_EQ(e.totals().failed_requests, 1u);
}

TEST(otlp_exporter, an_endpoint_that_is_not_a_url_is_refused) {
  EXPECT_THROW(otlp_exporter({.endpoint = "localhost:4318"}),
               std::invalid_argument);
}

TEST(otlp_json, any_bytes_make_valid_json) {
  span s;
  s.context = {random_trace_id(), random_span_id()};
  s.name = std::string{"bad \xff\xfe utf-8 \xe2\x82"} + "\x01";
  s.attributes = {{"nan", std::nan("")}, {"inf", std::numeric_limits<double>::infinity()}};
  auto doc = nlohmann::json::parse(otlp_json({s}, "svc"));
  auto& j = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
  EXPECT_EQ(j["name"], "bad \xEF\xBF\xBD\xEF\xBF\xBD utf-8 \xEF\xBF\xBD"
                       "\xEF\xBF\xBD\x01");
  EXPECT_EQ(j["attributes"][0]["value"]["stringValue"], "NaN");
  EXPECT_EQ(j["attributes"][1]["value"]["stringValue"], "+Inf");
}

TEST(otlp_exporter, the_environment_is_read_as_the_sdks_read_it) {
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/", 1);
  setenv("OTEL_SERVICE_NAME", "checkout", 1);
  setenv("OTEL_EXPORTER_OTLP_HEADERS",
         "Authorization=Basic%20dXNlcjpwdw==,x-team = pay", 1);
  setenv("OTEL_BSP_SCHEDULE_DELAY", "250", 1);
  auto e = otlp_exporter::from_env();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->options().endpoint, "http://collector:4318/v1/traces");
  EXPECT_EQ(e->options().service_name, "checkout");
  ASSERT_EQ(e->options().headers.size(), 2u);
  EXPECT_EQ(e->options().headers[0].second, "Basic dXNlcjpwdw==");
  EXPECT_EQ(e->options().headers[1].first, "x-team");
  EXPECT_EQ(e->options().flush_every, 250ms);
  setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", 1);
  EXPECT_THROW(otlp_exporter::from_env(), std::invalid_argument);
  setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", 1);
  setenv("OTEL_TRACES_EXPORTER", "none", 1);
  EXPECT_FALSE(otlp_exporter::from_env());
  for (auto v : {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME",
                 "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_BSP_SCHEDULE_DELAY",
                 "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_EXPORTER"})
    unsetenv(v);
}
