#pragma once

// The admin endpoint: health checks, a JSON API mirroring the `perdure`
// CLI's reads and actions, and the web console, over HTTP (Debian's
// cpp-httplib). Off unless configured; loopback by default.

#include <memory>
#include <string>

namespace perdure {
class client;
} // namespace perdure

namespace perdure::admin {

/// Where and how the endpoint listens.
struct endpoint_options {
  /// `host:port` (port 0: any free one); empty: `config::admin_listen`.
  std::string listen;
  /// The bearer token every `/api` request requires; empty:
  /// `config::admin_token` (none at all: only on a loopback address).
  std::string token;
};

/// Serves `/healthz` (the process answers), `/readyz` (started, lease
/// held, store answering), `/api/...` (runs, objects, queues, executors,
/// versions, doctor, and actions) and the console at `/`, for the runtime
/// or client it is given, which must outlive it.
///
/// ```cpp
/// perdure::runtime rt{perdure::config::from_env()};   // PERDURE_ADMIN_LISTEN
/// rt.start();
/// perdure::admin::endpoint admin{rt};                 // off if not configured
/// ```
class endpoint {
public:
  /// Starts listening if `opts.listen` (or the client's
  /// `config::admin_listen`) is set; does nothing otherwise. Throws
  /// `perdure::error` (`invalid_argument`) for an address it cannot bind
  /// or a non-loopback address without a token.
  explicit endpoint(client& c, endpoint_options opts = {});

  /// Stops listening and waits for requests in flight.
  ~endpoint();

  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// Whether it listens.
  bool listening() const noexcept;

  /// The port it listens on (0 if off).
  int port() const noexcept;

  /// Stops listening (also done by the destructor).
  void stop();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace perdure::admin
