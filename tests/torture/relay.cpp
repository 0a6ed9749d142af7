#include "torture/relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "torture/effects.hpp"

namespace perdure::torture {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/// Writes all of `n` bytes (blocking socket); false if the peer is gone.
bool write_all(int fd, const char* p, ssize_t n) {
  while (n > 0) {
    auto w = ::send(fd, p, static_cast<std::size_t>(n), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= w;
  }
  return true;
}

/// Closes `fd` with a reset instead of an orderly end.
void reset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

struct link {
  int client = -1;
  int server = -1;
};

} // namespace

tcp_relay::tcp_relay(int target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  auto a = loopback(0);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
      || ::listen(listen_fd_, 512) != 0)
    throw std::runtime_error("relay: cannot listen");
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("relay: cannot make a pipe");
  thread_ = std::thread{[this] { loop(); }};
}

tcp_relay::~tcp_relay() {
  stop_ = true;
  wake();
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void tcp_relay::wake() {
  char c = 0;
  (void)!::write(wake_[1], &c, 1);
}

void tcp_relay::cut_all() {
  cut_ = true;
  wake();
}

void tcp_relay::stall(std::chrono::milliseconds d) {
  stalled_until_ns_ = mono_ns()
                      + std::chrono::duration_cast<std::chrono::nanoseconds>(d)
                          .count();
  wake();
}

void tcp_relay::loop() {
  std::vector<link> links;
  std::vector<char> buf(64 * 1024);
  while (!stop_) {
    if (cut_.exchange(false)) {
      for (auto& l : links) {
        reset(l.client);
        ::close(l.server);
      }
      cuts_ += static_cast<int>(links.size());
      links.clear();
    }
    auto now = mono_ns();
    bool stalled = stalled_until_ns_.load() > now;
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (!stalled)
      for (auto& l : links) {
        fds.push_back({l.client, POLLIN, 0});
        fds.push_back({l.server, POLLIN, 0});
      }
    int timeout = stalled ? static_cast<int>((stalled_until_ns_ - now)
                                             / 1'000'000)
                              + 1
                          : 1000;
    if (::poll(fds.data(), fds.size(), timeout) < 0)
      continue;
    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    if (fds[1].revents & POLLIN) {
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
          std::perror("relay: socket");
        auto a = loopback(target_port_);
        if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
          int one = 1;
          ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          // A peer that reads nothing (a stopped process) must not hold
          // the relay: a write blocked this long drops that link only.
          timeval limit{0, 500'000};
          ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
          ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
          links.push_back({c, s});
        } else { // the server is down: refuse, as it would
          if (errno != ECONNREFUSED)
            std::perror("relay: connect");
          ::close(s);
          reset(c);
        }
      }
    }
    if (stalled)
      continue;
    // Only the links polled above (one accepted just now was not).
    auto polled = (fds.size() - 2) / 2;
    std::vector<bool> dead(links.size(), false);
    for (std::size_t i = 0; i < polled; ++i) {
      for (int side = 0; side < 2; ++side) {
        auto& p = fds[2 + 2 * i + static_cast<std::size_t>(side)];
        if (p.revents == 0)
          continue;
        int from = side == 0 ? links[i].client : links[i].server;
        int to = side == 0 ? links[i].server : links[i].client;
        auto n = ::recv(from, buf.data(), buf.size(), 0);
        if (n <= 0 || !write_all(to, buf.data(), n))
          dead[i] = true;
      }
    }
    std::vector<link> alive;
    for (std::size_t i = 0; i < links.size(); ++i) {
      if (dead[i]) {
        ::close(links[i].client);
        ::close(links[i].server);
      } else {
        alive.push_back(links[i]);
      }
    }
    links.swap(alive);
    open_ = static_cast<int>(links.size());
  }
  for (auto& l : links) {
    ::close(l.client);
    ::close(l.server);
  }
}

} // namespace perdure::torture
