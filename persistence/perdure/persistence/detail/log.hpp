#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace perdure::persistence::detail {

/// Where the persistence layer logs: the runtime's logger (its
/// `config::logger`), else spdlog's default one (tools, tests).
inline spdlog::logger& log_to(const std::shared_ptr<spdlog::logger>& logger) {
  return logger ? *logger : *spdlog::default_logger_raw();
}

} // namespace perdure::persistence::detail
