#pragma once

// `ctx.log()`: the application's spdlog logger (config::logger) as seen
// from a run's code. Silent while the run replays what its journal
// recorded, so a recovered run does not repeat its lines; each line is
// tagged with where it comes from.

#include <spdlog/logger.h>

#include <string>
#include <utility>

namespace perdure {

class run_logger {
public:
  /// `target` null: silent (the code replays).
  run_logger(spdlog::logger* target, std::string tags)
    : target_(target), tags_(std::move(tags)) {
  }

  /// Whether lines go out (false while the code replays its journal).
  bool live() const noexcept {
    return target_ != nullptr;
  }

  /// `run=<id> workflow=<name> step=<index> attempt=<n> executor=<id>
  /// version=<app version>`: what each line starts with.
  const std::string& tags() const noexcept {
    return tags_;
  }

  template <class... Args>
  void log(spdlog::level::level_enum level,
           spdlog::format_string_t<Args...> fmt, Args&&... args) {
    if (target_ == nullptr || !target_->should_log(level))
      return;
    target_->log(level, "[{}] {}", tags_,
                 fmt::format(fmt, std::forward<Args>(args)...));
  }

  template <class... Args>
  void debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
    log(spdlog::level::debug, fmt, std::forward<Args>(args)...);
  }
  template <class... Args>
  void info(spdlog::format_string_t<Args...> fmt, Args&&... args) {
    log(spdlog::level::info, fmt, std::forward<Args>(args)...);
  }
  template <class... Args>
  void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
    log(spdlog::level::warn, fmt, std::forward<Args>(args)...);
  }
  template <class... Args>
  void error(spdlog::format_string_t<Args...> fmt, Args&&... args) {
    log(spdlog::level::err, fmt, std::forward<Args>(args)...);
  }

private:
  spdlog::logger* target_;
  std::string tags_;
};

} // namespace perdure
