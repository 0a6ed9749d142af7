#include "perdure/admin/endpoint.hpp"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "perdure/admin/detail/api.hpp"
#include "perdure/client.hpp"
#include "perdure/console/assets.hpp"
#include "perdure/error.hpp"
#include "perdure/telemetry/prometheus.hpp"

namespace perdure::admin {

namespace {

bool loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// Splits `host:port` (`[v6]:port` too).
std::pair<std::string, int> split_address(const std::string& listen) {
  auto colon = listen.rfind(':');
  auto bad = [&] {
    return perdure::error(errc::invalid_argument,
                          "admin_listen '" + listen
                            + "' is not host:port (e.g. 127.0.0.1:9464; "
                              "port 0 takes any free one)");
  };
  if (colon == std::string::npos || colon == 0)
    throw bad();
  auto host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    std::size_t used = 0;
    port = std::stoi(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1)
      throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  if (port < 0 || port > 65535)
    throw bad();
  return {host, port};
}

/// Checks readiness without letting a store that hangs hang `/readyz`:
/// one check at a time, waited for at most two seconds.
class readiness {
public:
  explicit readiness(client& c) : c_(c) {
  }

  ~readiness() {
    std::lock_guard guard{mtx_};
    if (pending_.valid())
      pending_.wait();
  }

  std::string check() {
    std::shared_future<std::string> mine;
    {
      std::lock_guard guard{mtx_};
      if (!pending_.valid()
          || pending_.wait_for(std::chrono::seconds{0})
               == std::future_status::ready)
        pending_ = std::async(std::launch::async, [this] {
                     return c_.not_ready();
                   }).share();
      mine = pending_;
    }
    if (mine.wait_for(std::chrono::seconds{2}) != std::future_status::ready)
      return "the store did not answer within 2 s";
    return mine.get();
  }

private:
  client& c_;
  std::mutex mtx_;
  std::shared_future<std::string> pending_;
};

} // namespace

/// Buffers a /metrics text is made in, kept between scrapes: a thousand
/// workflows make megabytes, and memory already touched is written at a
/// fraction of the cost of fresh pages (a scrape took twice as long).
/// Two scrapes at once take two buffers; at most `kept` wait in between.
class scrape_buffers {
public:
  std::shared_ptr<std::string> take() {
    std::lock_guard guard{mtx_};
    if (free_.empty())
      return std::make_shared<std::string>();
    auto b = std::move(free_.back());
    free_.pop_back();
    b->clear();
    return b;
  }
  void give_back(std::shared_ptr<std::string> b) {
    std::lock_guard guard{mtx_};
    if (free_.size() < kept)
      free_.push_back(std::move(b));
  }

private:
  static constexpr std::size_t kept = 2;
  std::mutex mtx_;
  std::vector<std::shared_ptr<std::string>> free_;
};

struct endpoint::impl {
  client& c;
  std::string token;
  readiness ready{c};
  scrape_buffers scrapes;
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> ended{false};
  int port = 0;

  explicit impl(client& c, std::string token)
    : c(c), token(std::move(token)) {
  }
};

endpoint::endpoint(client& c, endpoint_options opts) {
  if (opts.listen.empty())
    opts.listen = c.cfg().admin_listen;
  if (opts.token.empty())
    opts.token = c.cfg().admin_token;
  if (opts.listen.empty())
    return; // off: not configured
  auto [host, port] = split_address(opts.listen);
  if (!loopback(host) && opts.token.empty())
    throw perdure::error(errc::invalid_argument,
                         "admin endpoint on '" + opts.listen
                           + "' without a token: anyone who reaches it could "
                             "read payloads and cancel runs. Set admin_token "
                             "(PERDURE_ADMIN_TOKEN), or listen on 127.0.0.1");
  impl_ = std::make_unique<impl>(c, std::move(opts.token));
  auto& s = impl_->server;
  auto* self = impl_.get();
  detail::authorizer may_act = [](const httplib::Request& req,
                                  httplib::Response& res) {
    // A page in the operator's browser may POST a form here (no
    // preflight): an action must be JSON, which a form cannot send.
    if (req.get_header_value("Content-Type").rfind("application/json", 0)
        != 0) {
      res.status = 415;
      res.set_content(
        nlohmann::json{{"error", "actions take Content-Type: "
                                 "application/json"}}
          .dump(),
        "application/json");
      return false;
    }
    return true;
  };
  // With a token, every /api request needs it (reads show payloads).
  s.set_pre_routing_handler([self, loopback_only = loopback(host)](
                              const httplib::Request& req,
                              httplib::Response& res) {
    // DNS rebinding: a page served by another name that resolves here.
    if (loopback_only) {
      auto h = req.get_header_value("Host");
      auto name = h.substr(0, h.rfind(':'));
      if (!h.empty() && name != "127.0.0.1" && name != "localhost"
          && name != "[::1]") {
        res.status = 403;
        res.set_content("forbidden host\n", "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (self->token.empty() || req.path.rfind("/api/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    auto given = req.get_header_value("Authorization");
    auto want = "Bearer " + self->token;
    // Compared in constant time.
    unsigned char diff = given.size() == want.size() ? 0 : 1;
    for (std::size_t i = 0; i < given.size() && i < want.size(); ++i)
      diff |= static_cast<unsigned char>(given[i] ^ want[i]);
    if (diff == 0)
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(nlohmann::json{{"error", "this needs the admin token: "
                                             "Authorization: Bearer <token>"}}
                      .dump(),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Prometheus's scrape (as /healthz, outside the token: it shows counts,
  // never payloads).
  s.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    try {
      // Sent from a kept buffer, not copied into the response.
      auto text = self->scrapes.take();
      telemetry::prometheus_writer writer{*text};
      self->c.read_metrics(writer);
      res.set_content_provider(
        text->size(), telemetry::prometheus_content_type,
        [text](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
          return sink.write(text->data() + offset, length);
        },
        [self, text](bool) { self->scrapes.give_back(text); });
    } catch (const std::exception& ex) {
      res.status = 500;
      res.set_content(std::string{"metrics failed: "} + ex.what() + "\n",
                      "text/plain");
    }
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/readyz", [self](const httplib::Request&, httplib::Response& res) {
    auto why = self->ready.check();
    res.status = why.empty() ? 200 : 503;
    res.set_content(why.empty() ? "ready\n" : "not ready: " + why + "\n",
                    "text/plain");
  });
  detail::add_api_routes(s, c, may_act);
  // The console: its files, and every other GET outside /api.
  s.Get(R"(/(|index\.html|console\.js|console\.css))",
        [](const httplib::Request& req, httplib::Response& res) {
          auto file = console::find(req.path);
          if (!file) {
            res.status = 404;
            return;
          }
          res.set_header("Cache-Control", "no-cache");
          res.set_content(std::string{file->body},
                          std::string{file->content_type});
        });
  // Runs outside httplib's try: it must not throw (a path of invalid
  // UTF-8 would make a strict dump throw and end the process).
  s.set_error_handler([](const httplib::Request& req,
                         httplib::Response& res) noexcept {
    try {
      if (res.status == 404 && res.body.empty())
        res.set_content(
          nlohmann::json{{"error", "no such path: " + req.path}}.dump(
            -1, ' ', false, nlohmann::json::error_handler_t::replace),
          "application/json");
    } catch (...) {
      res.set_content("no such path\n", "text/plain");
    }
  });
  bool bound = port == 0 ? (impl_->port = s.bind_to_any_port(host)) > 0
                         : (impl_->port = port, s.bind_to_port(host, port));
  if (!bound) {
    impl_.reset();
    throw perdure::error(errc::invalid_argument,
                         "admin endpoint cannot listen on '" + opts.listen
                           + "' (in use, or not an address of this host)");
  }
  impl_->thread = std::thread{[self] {
    self->server.listen_after_bind();
    self->ended = true;
  }};
  // A stop() before the thread listens would be lost (and its join hang):
  // return once it listens.
  while (!impl_->server.is_running() && !impl_->ended)
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
}

endpoint::~endpoint() {
  stop();
}

void endpoint::stop() {
  if (!impl_)
    return;
  impl_->server.stop();
  if (impl_->thread.joinable())
    impl_->thread.join();
  impl_.reset();
}

bool endpoint::listening() const noexcept {
  return impl_ != nullptr;
}

int endpoint::port() const noexcept {
  return impl_ ? impl_->port : 0;
}

} // namespace perdure::admin
