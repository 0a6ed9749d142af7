#pragma once

// JSON lines for log pipelines (Loki, Elasticsearch, Cloud Logging): an
// spdlog formatter that writes each line as one JSON object. A line of
// `ctx.log()` has its tags as fields of their own (run, workflow, step,
// attempt, executor, version, trace_id); Perdure's own lines and the
// application's are `message`s.
//
//   logger->set_formatter(std::make_unique<perdure::json_lines_formatter>());
//   // {"time":"2026-11-28T01:02:03.456Z","level":"info","logger":"app",
//   //  "run":"order-42","workflow":"checkout","step":"3 (charge)",...,
//   //  "message":"charging 1250 cents"}
//
// `config::from_env()` with `PERDURE_LOG_FORMAT=json` logs so to stderr.

#include <spdlog/formatter.h>

#include <memory>

namespace perdure {

class json_lines_formatter final : public spdlog::formatter {
public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

} // namespace perdure
