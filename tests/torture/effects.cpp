#include "torture/effects.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace perdure::torture {

std::int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

effects_log::effects_log(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open " + path + ": "
                             + std::strerror(errno));
}

effects_log::~effects_log() {
  if (fd_ >= 0)
    ::close(fd_);
}

void effects_log::write(const std::vector<std::string>& fields) {
  std::string line;
  for (auto& f : fields) {
    if (!line.empty())
      line += ' ';
    line += f;
  }
  line += '\n';
  std::lock_guard guard{mtx_};
  // One write(2) per line: a SIGKILL leaves whole lines (a crash of the
  // machine could tear the last one; the reader skips a torn line).
  auto n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    throw std::runtime_error("effects log: short write");
  ::fdatasync(fd_);
}

std::vector<log_line> read_logs(const std::string& dir,
                                const std::string& prefix) {
  std::vector<log_line> out;
  for (auto& entry : std::filesystem::directory_iterator(dir)) {
    auto name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0)
      continue;
    std::ifstream in{entry.path()};
    std::string text;
    while (std::getline(in, text)) {
      if (in.eof()) // no newline: a torn last line
        break;
      std::istringstream words{text};
      log_line line;
      for (std::string w; words >> w;)
        line.push_back(w);
      if (!line.empty())
        out.push_back(std::move(line));
    }
  }
  return out;
}

} // namespace perdure::torture
