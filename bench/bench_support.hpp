#pragma once

// What every perdure-bench scenario shares: its options, a fresh database,
// a runtime config, and the JSON line it prints.

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "perdure/config.hpp"
#include "support/test_support.hpp"

namespace perdure::bench {

using namespace std::chrono_literals;
using bench_clock = std::chrono::steady_clock;

// -- options ----------------------------------------------------------------------

struct options {
  std::string scenario;
  std::string store = "sqlite";
  std::string url;
  std::string schema;
  int workflows = 0;
  int steps = 0;
  int incarnation = 0;
  int processes = 1;
  int in_flight = 256;
  int rounds = 0;
  double baseline_rows_per_s = 0;
  /// object_throughput: "blocking" callers, or "async" calls in flight.
  std::string mode = "blocking";
  std::string self; // argv[0], for the recovery child
};

inline options parse(int argc, char** argv) {
  options o;
  o.self = argv[0];
  if (argc < 2)
    throw std::runtime_error("usage: perdure-bench <scenario> --store pg|sqlite ...");
  o.scenario = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--store") o.store = v;
    else if (k == "--url") o.url = v;
    else if (k == "--schema") o.schema = v;
    else if (k == "--workflows") o.workflows = std::stoi(v);
    else if (k == "--steps") o.steps = std::stoi(v);
    else if (k == "--incarnation") o.incarnation = std::stoi(v);
    else if (k == "--processes") o.processes = std::stoi(v);
    else if (k == "--in-flight") o.in_flight = std::stoi(v);
    else if (k == "--mode") o.mode = v;
    else if (k == "--rounds") o.rounds = std::stoi(v);
    else if (k == "--baseline-rows-per-s") o.baseline_rows_per_s = std::stod(v);
    else throw std::runtime_error("unknown option " + k);
  }
  if (o.store != "pg" && o.store != "sqlite")
    throw std::runtime_error("--store must be pg or sqlite");
  return o;
}

/// A fresh database for one scenario (a new schema or a new file), unless
/// one is named (the recovery child reuses its parent's).
inline test::database database_for(const options& o) {
  test::database db;
  db.postgres = o.store == "pg";
  std::random_device rd;
  auto suffix = std::to_string(::getpid()) + "_" + std::to_string(rd() % 100000);
  if (db.postgres) {
    db.url = o.url;
    if (db.url.empty())
      throw std::runtime_error("--url postgresql://... is required for pg");
    db.schema = o.schema.empty() ? "bench_" + suffix : o.schema;
  } else {
    if (!o.url.empty()) {
      db.url = o.url;
    } else {
      auto dir = std::filesystem::temp_directory_path() / "perdure-bench";
      std::filesystem::create_directories(dir);
      db.url = "sqlite://" + (dir / ("bench_" + suffix + ".db")).string();
    }
    db.schema = "perdure";
  }
  return db;
}

inline config runtime_config(const test::database& db) {
  auto c = db.runtime_config("bench");
  c.poll_interval = 10ms;
  if (auto v = std::getenv("BENCH_POOL")) c.pooled_connections = std::stoul(v);
  if (auto v = std::getenv("BENCH_STEP_THREADS")) c.step_threads = std::stoul(v);
  if (auto v = std::getenv("BENCH_CAF_THREADS")) c.scheduler_threads = std::stoul(v);
  if (auto v = std::getenv("BENCH_WRITERS")) c.journal_connections = std::stoul(v);
  if (auto v = std::getenv("BENCH_METRICS")) c.metrics = std::string{v} != "0";
  return c;
}

// -- JSON line --------------------------------------------------------------------

class json_line {
public:
  json_line& add(const std::string& k, const std::string& v) {
    sep();
    out_ << '"' << k << "\":\"" << v << '"';
    return *this;
  }

  json_line& add(const std::string& k, double v) {
    sep();
    out_ << '"' << k << "\":" << v;
    return *this;
  }

  void print() {
    std::cout << '{' << out_.str() << '}' << std::endl;
  }

private:
  void sep() {
    if (!first_)
      out_ << ',';
    first_ = false;
  }

  bool first_ = true;
  std::ostringstream out_;
};

inline json_line header(const options& o) {
  json_line j;
  j.add("scenario", o.scenario).add("store", o.store);
  return j;
}

inline double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

} // namespace perdure::bench
