#include "tests/support/http_recorder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <stdexcept>

namespace ringcast::test {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// Reads what the peer sends until `pred` holds on the bytes so far, EOF, an error or 5 s.
template <class Pred>
bool read_until(int fd, std::string& got, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[16384];
  while (!pred(got)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

std::optional<std::string> HttpRecorder::Request::header(std::string_view name) const {
  const std::string want = lower(name);
  for (const auto& [n, v] : headers) {
    if (lower(n) == want) return v;
  }
  return std::nullopt;
}

HttpRecorder::HttpRecorder() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("http recorder: socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("http recorder: bind");
  }
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

HttpRecorder::~HttpRecorder() {
  stopping_.store(true);
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
}

std::string HttpRecorder::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void HttpRecorder::answer_next(std::vector<int> statuses) {
  std::lock_guard<std::mutex> lock(mu_);
  script_.assign(statuses.begin(), statuses.end());
}

std::vector<HttpRecorder::Request> HttpRecorder::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

size_t HttpRecorder::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.size();
}

void HttpRecorder::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void HttpRecorder::serve(int fd) {
  std::string got;
  size_t head_end = std::string::npos;
  if (!read_until(fd, got, [&](const std::string& g) {
        head_end = g.find("\r\n\r\n");
        return head_end != std::string::npos;
      })) {
    ::close(fd);
    return;
  }
  Request r;
  std::string_view head(got.data(), head_end);
  const size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.find(' ', sp1 + 1);
  r.method = std::string(line.substr(0, sp1));
  r.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  size_t content_length = 0;
  for (size_t at = line_end; at != std::string_view::npos && at < head.size();) {
    const size_t start = at + 2;
    const size_t next = head.find("\r\n", start);
    std::string_view h =
        head.substr(start, next == std::string_view::npos ? head.npos : next - start);
    at = next;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    r.headers.emplace_back(std::string(trim(h.substr(0, colon))),
                           std::string(trim(h.substr(colon + 1))));
    if (lower(r.headers.back().first) == "content-length")
      content_length = std::strtoull(r.headers.back().second.c_str(), nullptr, 10);
  }
  const size_t body_at = head_end + 4;
  read_until(fd, got, [&](const std::string& g) { return g.size() >= body_at + content_length; });
  r.body = got.size() > body_at ? got.substr(body_at, content_length) : std::string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.status = 200;
    if (!script_.empty()) {
      r.status = script_.front();
      script_.pop_front();
    }
    requests_.push_back(r);
  }
  std::string answer = "HTTP/1.1 ";
  answer += std::to_string(r.status);
  answer += ' ';
  answer += reason(r.status);
  answer +=
      "\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
  size_t off = 0;
  while (off < answer.size()) {
    const ssize_t n = ::send(fd, answer.data() + off, answer.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

}  // namespace ringcast::test
