// Helpers shared by the redis tests: a loop, bounded loop driving, a synchronous call, and a
// loopback TCP proxy that can cut a connection after a byte budget (a reply cut mid-way).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "net/loop.h"
#include "redis/client.h"
#include "redis/connection.h"

namespace ringcast::redis::testing {

inline std::unique_ptr<net::Loop> make_loop() {
  auto r = net::Loop::create({});
  if (!r) throw std::runtime_error("cannot create a loop");
  return std::move(r).value();
}

// Runs loop turns until `done()` or `limit` of wall time has passed.
template <class Pred>
bool run_until(net::Loop& loop, Pred done,
               std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) loop.run_once(milliseconds(10));
  return done();
}

// Runs turns for `d` (lets timers and completions happen).
inline void run_for(net::Loop& loop, std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) loop.run_once(milliseconds(5));
}

// One command, waited for (bounded).
inline Result<Reply> call(Client& c, std::initializer_list<std::string_view> args,
                          const CommandOptions& o = {}) {
  std::optional<Result<Reply>> got;
  c.command(
      args, [&](Result<Reply> r) { got.emplace(std::move(r)); }, o);
  EXPECT_FALSE(got.has_value()) << "completed inline inside command()";
  run_until(c.loop(), [&] { return got.has_value(); });
  if (!got) return make_error(Errc::kInternal, "test: no completion within 10 s");
  return std::move(*got);
}

inline std::string show(const Result<Reply>& r) {
  if (!r.ok()) {
    return std::string("error ") + r.error().reason_or_code() + ": " + r.error().message;
  }
  return r->debug_string();
}

// Stops `server`; a command sent while `c` is down waits, and goes out on the connection made
// once `server` is back (restart()). `read_back()` is what the server then holds for "queued".
template <class Server, class ReadBack>
void expect_queued_while_down_goes_out(Connection& c, Server& server, ReadBack read_back) {
  server.stop();
  ASSERT_TRUE(run_until(c.loop(), [&] { return c.state() != ConnState::kReady; }));
  std::optional<Result<Reply>> got;
  CommandOptions wait;
  wait.timeout = std::chrono::seconds(8);
  c.command(
      {"SET", "queued", "yes"}, [&](Result<Reply> r) { got.emplace(std::move(r)); }, wait);
  run_for(c.loop(), std::chrono::milliseconds(100));
  EXPECT_FALSE(got.has_value());
  server.restart();
  ASSERT_TRUE(run_until(c.loop(), [&] { return got.has_value(); }));
  ASSERT_TRUE(got->ok()) << show(*got);
  EXPECT_EQ(read_back(), "yes");
}

// A TCP proxy 127.0.0.1:port() -> upstream, one connection at a time, on its own thread.
// cut_after(n): of the bytes the upstream sends from now on, forward n, then close both sides
// (once; the next connection flows normally). drop(): closes the current connection now.
// hold(true): a connection accepted from now on is left unanswered (what its client sends waits
// in the socket) until hold(false); then it is connected upstream and flows.
class CutProxy {
 public:
  explicit CutProxy(uint16_t upstream_port) : upstream_(upstream_port) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (lfd_ < 0 || ::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(lfd_, 8) != 0 || ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("proxy: cannot listen");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~CutProxy() {
    stop_ = true;
    thread_.join();
    ::close(lfd_);
  }
  uint16_t port() const { return port_; }
  void cut_after(int64_t bytes) { budget_ = bytes; }
  void drop() { drop_ = true; }
  void hold(bool on) { hold_ = on; }
  int cuts() const { return cuts_; }
  int connections() const { return connections_; }

 private:
  void run() {
    while (!stop_) {
      pollfd p{lfd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      connections_++;
      while (hold_ && !stop_) ::usleep(2000);
      const int u = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(upstream_);
      if (u < 0 || ::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(c);
        if (u >= 0) ::close(u);
        continue;
      }
      pump(c, u);
      ::close(c);
      ::close(u);
    }
  }
  void pump(int c, int u) {
    char buf[16384];
    while (!stop_) {
      if (drop_.exchange(false)) return;
      pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0 || !send_all(u, buf, static_cast<size_t>(n))) return;
      }
      if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ssize_t n = ::recv(u, buf, sizeof(buf), 0);
        if (n <= 0) return;
        const int64_t b = budget_.load();
        if (b >= 0 && n >= b) {
          send_all(c, buf, static_cast<size_t>(b));
          budget_ = -1;
          cuts_++;
          return;  // both sides close
        }
        if (b >= 0) budget_ = b - n;
        if (!send_all(c, buf, static_cast<size_t>(n))) return;
      }
    }
  }
  static bool send_all(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  uint16_t upstream_;
  uint16_t port_ = 0;
  int lfd_ = -1;
  std::atomic<bool> stop_{false}, drop_{false}, hold_{false};
  std::atomic<int64_t> budget_{-1};
  std::atomic<int> cuts_{0};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace ringcast::redis::testing
