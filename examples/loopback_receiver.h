// A tiny HTTP/1.1 webhook receiver on 127.0.0.1 (an ephemeral port), standing in for a
// platform's customer in examples/embed.cc and tests/engine. Not a server to deploy: one
// thread, one request per connection (it answers `Connection: close`), blocking sockets.
// Invariant: stop() (or the destructor) returns only after the thread has exited.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

namespace ringcast::examples {

struct ReceivedRequest {
  std::string method, target;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // the exact bytes received
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class LoopbackReceiver {
 public:
  // `handler` runs on the receiver's thread and returns the HTTP status to answer with.
  explicit LoopbackReceiver(std::function<int(const ReceivedRequest&)> handler)
      : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // loopback only
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 128) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("loopback receiver: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~LoopbackReceiver() { stop(); }
  LoopbackReceiver(const LoopbackReceiver&) = delete;
  LoopbackReceiver& operator=(const LoopbackReceiver&) = delete;

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  uint16_t port() const { return port_; }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  void run() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};  // short polls so that stop() is prompt
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ReceivedRequest req;
      if (read_request(c, req)) {
        int status = handler_(req);
        std::string resp = "HTTP/1.1 " + std::to_string(status) +
                           " X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      }
      ::close(c);
    }
  }

  // Reads one request with a Content-Length body (what ringcast sends); false on a bad or
  // incomplete request, or when the peer is silent for 5 s.
  bool read_request(int c, ReceivedRequest& req) {
    std::string buf;
    size_t head_end = std::string::npos, need = 0;
    for (;;) {
      if (head_end == std::string::npos && (head_end = buf.find("\r\n\r\n")) != buf.npos) {
        if (!parse_head(buf.substr(0, head_end), req)) return false;
        need = head_end + 4 + std::strtoull(req.header("content-length").c_str(), nullptr, 10);
      }
      if (head_end != std::string::npos && buf.size() >= need) break;
      pollfd p{c, POLLIN, 0};
      char chunk[16384];
      ssize_t n = ::poll(&p, 1, 5000) == 1 ? ::recv(c, chunk, sizeof chunk, 0) : -1;
      if (n <= 0) return false;
      buf.append(chunk, static_cast<size_t>(n));
    }
    req.body = buf.substr(head_end + 4, need - head_end - 4);
    return true;
  }

  static bool parse_head(const std::string& head, ReceivedRequest& req) {
    size_t eol = head.find("\r\n");
    std::string line = head.substr(0, eol);
    size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == line.npos || sp2 == sp1) return false;
    req.method = line.substr(0, sp1);
    req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    while (eol != std::string::npos) {
      size_t start = eol + 2;
      eol = head.find("\r\n", start);
      std::string h = head.substr(start, eol == head.npos ? head.npos : eol - start);
      size_t colon = h.find(':');
      if (colon == h.npos) continue;
      std::string name = h.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char ch) { return std::tolower(ch); });
      size_t v = h.find_first_not_of(' ', colon + 1);
      req.headers[name] = v == h.npos ? "" : h.substr(v);
    }
    return true;
  }

  std::function<int(const ReceivedRequest&)> handler_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ringcast::examples
