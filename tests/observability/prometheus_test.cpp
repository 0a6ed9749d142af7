// The metrics library and its Prometheus text: exact values and the
// format's rules (escaping, cumulative buckets, +Inf, names), checked by
// Debian's promtool where it is installed.

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "perdure/telemetry/metrics.hpp"
#include "perdure/telemetry/prometheus.hpp"

using namespace perdure::telemetry;

namespace {

TEST(prometheus_text, whole_values_read_as_the_shortest_double_writes_them) {
  // Integers are written by a faster path; its text must be the shortest
  // double's (100000 is 1e+05 there; a changed `le` text is a new series).
  std::vector<double> values{0,      -0.0,    1,       7,      99999,
                             100000, 100001,  123450,  1e6,    1.2e7,
                             3e5,    4096,    1e14,    1e15,   1e16,
                             0.5,    -3,      -100000, 2.5e-4, 86400};
  registry r;
  auto& g = r.add_gauge("v", "values", {"i"});
  for (std::size_t i = 0; i < values.size(); ++i)
    g.with({std::to_string(i)}).set(values[i]);
  auto text = prometheus_text(r.read());
  for (std::size_t i = 0; i < values.size(); ++i) {
    char buf[32];
    auto end = std::to_chars(buf, buf + sizeof buf, values[i]).ptr;
    auto line = "v{i=\"" + std::to_string(i) + "\"} " + std::string{buf, end}
                + "\n";
    EXPECT_NE(text.find(line), std::string::npos)
      << "missing: " << line << "in:\n" << text;
  }
}

TEST(metrics, counters_gauges_and_histograms_read_what_was_recorded) {
  registry r;
  auto& started = r.add_counter("perdure_test_started_total", "Started.",
                                {"workflow"});
  auto& mem = r.add_gauge("perdure_test_in_memory", "In memory.");
  constexpr double bounds[] = {0.1, 1, 10};
  auto& took = r.add_histogram("perdure_test_seconds", "Took.", bounds,
                               {"workflow"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      auto& c = started.with({"order"});
      for (int i = 0; i < 10000; ++i)
        c.add();
    });
  for (auto& t : threads)
    t.join();
  started.with({"cart"}).add(3);
  mem.with().set(7);
  mem.with().add(-2);
  auto& h = took.with({"order"});
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0})
    h.observe(v);
  auto snap = r.read();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].series.size(), 2u);
  EXPECT_EQ(snap[0].series[0].label_values[0], "cart"); // label order
  EXPECT_EQ(snap[0].series[0].value, 3);
  EXPECT_EQ(snap[0].series[1].value, 40000);
  EXPECT_EQ(snap[1].series[0].value, 5);
  auto reading = snap[2].series[0].buckets;
  // `le` is inclusive: 0.1 falls in the 0.1 bucket, 1.0 in the 1 bucket.
  EXPECT_EQ(reading.cumulative, (std::vector<std::uint64_t>{2, 4, 5, 6}));
  EXPECT_EQ(reading.count, 6u);
  EXPECT_DOUBLE_EQ(reading.sum, 56.65);
}

TEST(metrics, bad_names_and_bounds_are_refused) {
  registry r;
  EXPECT_THROW(r.add_counter("perdure-bad", "x"), std::invalid_argument);
  EXPECT_THROW(r.add_counter("0perdure", "x"), std::invalid_argument);
  EXPECT_THROW(r.add_counter("perdure_ok", "x", {"le"}), std::invalid_argument);
  EXPECT_THROW(r.add_counter("perdure_ok", "x", {"a:b"}), std::invalid_argument);
  r.add_counter("perdure_ok", "x");
  EXPECT_THROW(r.add_gauge("perdure_ok", "again"), std::invalid_argument);
  constexpr double unsorted[] = {1, 0.5};
  EXPECT_THROW(r.add_histogram("perdure_h", "x", unsorted), std::invalid_argument);
}

TEST(prometheus, the_text_follows_the_exposition_format) {
  registry r;
  r.add_counter("perdure_empty_total", "Never recorded: left out.");
  auto& runs = r.add_counter("perdure_runs_total", "Runs \\ ended.\nBy status.",
                             {"workflow", "status"});
  runs.with({"pay \"now\"\n\\", "SUCCESS"}).add(2);
  r.add_gauge("perdure_lease_age_seconds", "Lease age.").with().set(0.25);
  constexpr double bounds[] = {0.5, 1};
  auto& h = r.add_histogram("perdure_step_seconds", "Step time.", bounds);
  h.with().observe(0.5);
  h.with().observe(3);
  // Written straight from the registry (the /metrics path) or from a
  // snapshot (a team's own), the text is the same, and appended.
  std::string direct = "# before\n";
  append_prometheus_text(direct, r);
  EXPECT_EQ(direct, "# before\n" + prometheus_text(r.read()));
  EXPECT_EQ(prometheus_text(r.read()),
            "# HELP perdure_runs_total Runs \\\\ ended.\\nBy status.\n"
            "# TYPE perdure_runs_total counter\n"
            "perdure_runs_total{workflow=\"pay \\\"now\\\"\\n\\\\\",status=\"SUCCESS\"} 2\n"
            "# HELP perdure_lease_age_seconds Lease age.\n"
            "# TYPE perdure_lease_age_seconds gauge\n"
            "perdure_lease_age_seconds 0.25\n"
            "# HELP perdure_step_seconds Step time.\n"
            "# TYPE perdure_step_seconds histogram\n"
            "perdure_step_seconds_bucket{le=\"0.5\"} 1\n"
            "perdure_step_seconds_bucket{le=\"1\"} 1\n"
            "perdure_step_seconds_bucket{le=\"+Inf\"} 2\n"
            "perdure_step_seconds_sum 3.5\n"
            "perdure_step_seconds_count 2\n");
}

// Debian's promtool (package prometheus) checks the text as Prometheus
// would parse it, with its lint rules.
TEST(prometheus, promtool_accepts_the_text) {
  const char* promtool = std::getenv("PERDURE_PROMTOOL");
  if (!promtool)
    promtool = "/usr/bin/promtool";
  if (!std::filesystem::exists(promtool))
    GTEST_SKIP() << "no promtool (scripts/test unpacks Debian's into build/tools)";
  registry r;
  auto& ended = r.add_counter("perdure_runs_ended_total", "Runs ended.",
                              {"workflow", "status"});
  ended.with({"order", "SUCCESS"}).add(5);
  ended.with({"odd \"name\"", "ERROR"}).add(1);
  r.add_gauge("perdure_runs_in_memory", "Runs in memory.").with().set(3);
  auto& h = r.add_histogram("perdure_step_duration_seconds", "Step time.",
                            latency_buckets(), {"workflow"});
  h.with({"order"}).observe(0.003);
  auto path = std::filesystem::temp_directory_path() / "perdure-promtool.txt";
  std::ofstream{path} << prometheus_text(r.read());
  auto cmd = std::string{promtool} + " check metrics < " + path.string()
             + " > " + path.string() + ".out 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in{path.string() + ".out"};
  std::string said{std::istreambuf_iterator<char>{in}, {}};
  EXPECT_EQ(rc, 0) << said;
  EXPECT_EQ(said, "") << said;
}

} // namespace
