#include "perdure/config.hpp"

#include <cstdlib>

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
  return result;
}

} // namespace perdure
