#pragma once

// A PostgreSQL cluster of one test's own (temporary data directory,
// loopback, a free port), so the test can stop it for longer than the retry
// budget, restart it or kill its backends without touching the server other
// tests share. Runs the server as the `postgres` user (the tests run as
// root, as scripts/test does). Removed on destruction.

#include <string>

namespace perdure::test {

class pg_cluster {
public:
  /// Creates and starts the cluster with one database, `perdure_test`.
  pg_cluster();
  ~pg_cluster();

  pg_cluster(const pg_cluster&) = delete;
  pg_cluster& operator=(const pg_cluster&) = delete;

  /// Returns whether a cluster can be made here (PostgreSQL's binaries
  /// exist and the tests may run commands as the postgres user).
  static bool available();

  /// Returns the URL of its database.
  const std::string& url() const noexcept {
    return url_;
  }

  /// Stops the server (`mode`: fast or immediate) and waits until it is down.
  void stop(const char* mode = "fast");

  /// Starts the server again and waits until it accepts connections.
  void start();

  /// Restarts the server with `pg_ctl restart -m <mode>`.
  void restart(const char* mode);

  /// Terminates every client backend (as if each connection was cut).
  /// Returns how many were terminated.
  int kill_backends();

  /// Refuses (or again accepts) connections to its database, and with
  /// `refuse` also cuts every one it has: a network partition between the
  /// clients and a server that stays up.
  void refuse_connections(bool refuse);

private:
  void pg_ctl(const std::string& args);

  std::string bin_;
  std::string dir_;
  int port_ = 0;
  std::string url_;
};

} // namespace perdure::test
