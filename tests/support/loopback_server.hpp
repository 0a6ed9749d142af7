#pragma once

// An HTTP server of the tests and benches on 127.0.0.1 at a free port,
// serving on a thread of its own from construction to destruction (the
// OTLP collectors). Header-only: only what includes it needs cpp-httplib.

#include <httplib.h>

#include <functional>
#include <string>
#include <thread>

namespace perdure::test {

class loopback_server {
public:
  /// `routes` adds the handlers (before the server runs: httplib's tables
  /// are not for changing while it serves).
  explicit loopback_server(const std::function<void(httplib::Server&)>& routes) {
    routes(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread{[this] { server_.listen_after_bind(); }};
    // Running before anyone may stop it (a stop before the loop starts is
    // lost, and the loop then runs for ever).
    while (!server_.is_running())
      std::this_thread::yield();
  }

  ~loopback_server() {
    server_.stop();
    thread_.join();
  }

  loopback_server(const loopback_server&) = delete;
  loopback_server& operator=(const loopback_server&) = delete;

  /// `http://127.0.0.1:<port>`.
  std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

} // namespace perdure::test
