#include "perdure/config.hpp"

#include <cstdlib>
#include <string_view>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "perdure/json_lines_formatter.hpp"
#include "perdure/telemetry/otlp.hpp"

namespace perdure {

config config::from_env() {
  config result;
  auto read = [](const char* name, std::string& field) {
    if (auto value = std::getenv(name); value != nullptr && *value != '\0')
      field = value;
  };
  read("PERDURE_DATABASE_URL", result.database_url);
  read("PERDURE_SCHEMA", result.schema);
  read("PERDURE_EXECUTOR_ID", result.executor_id);
  read("PERDURE_APP_VERSION", result.app_version);
  read("PERDURE_ADMIN_LISTEN", result.admin_listen);
  read("PERDURE_ADMIN_TOKEN", result.admin_token);
  result.span_sink = telemetry::otlp_exporter::from_env();
  if (auto format = std::getenv("PERDURE_LOG_FORMAT");
      format != nullptr && std::string_view{format} == "json") {
    // JSON lines on stderr (see json_lines_formatter.hpp).
    result.logger = std::make_shared<spdlog::logger>(
      "perdure", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    result.logger->set_formatter(std::make_unique<json_lines_formatter>());
  }
  return result;
}

} // namespace perdure
