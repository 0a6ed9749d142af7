#pragma once

// A clock the test moves for every process at once: the time is the
// number of ms in a file, which the test replaces (write and rename) to
// advance it. Processes notice at their next read (the schedule ticker
// polls; nothing else in these tests waits on this clock).

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "perdure/clock.hpp"

namespace perdure::test {

class file_clock final : public clock {
public:
  explicit file_clock(std::string path) : path_(std::move(path)) {}

  time_point now() const override {
    char buf[32] = {};
    int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd < 0)
      return time_point{};
    auto n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    long long ms = 0;
    if (n > 0)
      std::sscanf(buf, "%lld", &ms);
    return time_point{std::chrono::milliseconds{ms}};
  }

  /// Sets the time of every file_clock on `path` (atomically: a reader
  /// sees the old time or the new one).
  static void set(const std::string& path, std::int64_t ms) {
    auto tmp = path + ".new";
    {
      std::ofstream out{tmp, std::ios::trunc};
      out << ms;
    }
    std::rename(tmp.c_str(), path.c_str());
  }

private:
  std::string path_;
};

} // namespace perdure::test
