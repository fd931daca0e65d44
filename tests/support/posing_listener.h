// A listener that poses as a partition's owner (SPEC R14.4, docs/security.md "Between nodes"):
// its address is what a node looks the owner up as (planted in Redis, or the lookup a unit test
// sets). It records the one request it gets and answers 200 {}. Loopback only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace ringcast::test {

class PosingListener {
 public:
  PosingListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4) != 0)
      throw std::runtime_error("bind");
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string got;
      char buf[4096];
      for (;;) {
        const size_t head_end = got.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          const size_t cl = got.find("Content-Length: ");
          const size_t n = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
          if (got.size() >= head_end + 4 + n) break;
        }
        const ssize_t r = ::recv(c, buf, sizeof buf, 0);
        if (r <= 0) break;
        got.append(buf, static_cast<size_t>(r));
      }
      const std::string answer =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
          "Connection: close\r\n\r\n{}";
      (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
      std::lock_guard lk(mu_);
      request_ = std::move(got);
    });
  }
  ~PosingListener() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  std::string request() {
    if (thread_.joinable()) thread_.join();
    std::lock_guard lk(mu_);
    return request_;
  }
  uint16_t port = 0;

 private:
  int fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::string request_;
};

}  // namespace ringcast::test
