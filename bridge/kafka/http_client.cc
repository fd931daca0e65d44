#include "bridge/kafka/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace ringcast::kafka_bridge {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::ceil<Millis>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

HttpClient::HttpClient(ApiUrl url, Millis connect_timeout, Millis request_timeout)
    : url_(std::move(url)), connect_timeout_(connect_timeout), request_timeout_(request_timeout) {}

HttpClient::~HttpClient() {
  close();
}

void HttpClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buf_.clear();
}

bool HttpClient::open(Clock::time_point deadline, std::string& error) {
  close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url_.port);
  int rc = ::getaddrinfo(url_.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    error = "cannot resolve ";
    error += url_.host;
    error += ": ";
    error += ::gai_strerror(rc);
    return false;
  }
  const auto connect_deadline = std::min(deadline, Clock::now() + connect_timeout_);
  error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    if (!wait_fd(fd, POLLOUT, connect_deadline)) {
      error = "connect timeout";
      ::close(fd);
      continue;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      error = std::strerror(soerr);
      ::close(fd);
      continue;
    }
    fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  return fd_ >= 0;
}

HttpAnswer HttpClient::post(std::string_view path, std::string_view content_type,
                            std::string_view body, std::string_view token) {
  std::string head = "POST ";
  head += url_.prefix;
  head += path;
  head += " HTTP/1.1\r\nHost: ";
  if (url_.host.find(':') != std::string::npos) {
    head += '[';
    head += url_.host;
    head += ']';
  } else {
    head += url_.host;
  }
  if (url_.port != 80) {
    head += ':';
    head += std::to_string(url_.port);
  }
  head += "\r\nUser-Agent: ringcast-kafka-bridge/" RINGCAST_VERSION "\r\nAuthorization: Bearer ";
  head += token;
  head += "\r\nContent-Type: ";
  head += content_type;
  head += "\r\nContent-Length: ";
  head += std::to_string(body.size());
  head += "\r\n\r\n";
  const auto deadline = Clock::now() + request_timeout_;
  // A kept-alive connection the server closed meanwhile fails before any answer byte: once more
  // on a fresh one (the request was not taken; the bulk route is idempotent anyway).
  for (int round = 0; round < 2; ++round) {
    const bool reused = fd_ >= 0;
    if (!reused) {
      HttpAnswer a;
      if (!open(deadline, a.error)) return a;
    }
    bool nothing_answered = false;
    HttpAnswer a = exchange(head, body, deadline, nothing_answered);
    if (a.status != 0 || !reused || !nothing_answered || Clock::now() >= deadline) return a;
    close();
  }
  return HttpAnswer{0, "connection closed", {}};
}

HttpAnswer HttpClient::exchange(const std::string& head, std::string_view body,
                                Clock::time_point deadline, bool& nothing_answered) {
  HttpAnswer out;
  auto fail = [&](std::string why) {
    close();
    out.status = 0;
    out.error = std::move(why);
    out.body.clear();
    return out;
  };
  // Send the head and the body (no copy of the body).
  std::string_view parts[2] = {head, body};
  for (std::string_view part : parts) {
    size_t off = 0;
    while (off < part.size()) {
      ssize_t n = ::send(fd_, part.data() + off, part.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!wait_fd(fd_, POLLOUT, deadline)) return fail("timeout sending the request");
        continue;
      }
      // The server may have answered (413) and closed: read what it said below.
      off = part.size();
      break;
    }
  }
  // Read the answer's head.
  std::string& in = buf_;
  in.clear();
  size_t head_end = std::string::npos;
  char chunk[65536];
  constexpr int kTimedOut = -2;
  auto read_more = [&]() -> int {  // 1: got bytes, 0: EOF, -1: error, kTimedOut
    for (;;) {
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        in.append(chunk, static_cast<size_t>(n));
        return 1;
      }
      if (n == 0) return 0;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (!wait_fd(fd_, POLLIN, deadline)) return kTimedOut;
        continue;
      }
      return -1;
    }
  };
  while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
    if (in.size() > kMaxHeaderBytes) return fail("the answer's headers are too large");
    int r = read_more();
    if (r <= 0) {
      const bool timed_out = r == kTimedOut;
      nothing_answered = in.empty() && !timed_out;
      if (timed_out) return fail("timeout waiting for the answer");
      return fail(in.empty() ? "connection closed before an answer" : "truncated answer");
    }
  }
  std::string_view h(in.data(), head_end);
  if (h.substr(0, 9) != "HTTP/1.1 " && h.substr(0, 9) != "HTTP/1.0 ") {
    return fail("not an HTTP answer");
  }
  int status = 0;
  auto [p, ec] = std::from_chars(h.data() + 9, h.data() + std::min<size_t>(h.size(), 12), status);
  if (ec != std::errc() || status < 100 || status > 599) return fail("bad status line");
  size_t content_length = std::string::npos;
  bool chunked = false;
  bool keep_alive = h.substr(0, 9) == "HTTP/1.1 ";
  size_t line_start = h.find("\r\n");
  while (line_start != std::string_view::npos && line_start + 2 < h.size()) {
    size_t line_end = h.find("\r\n", line_start + 2);
    std::string_view line =
        h.substr(line_start + 2, line_end == std::string_view::npos ? std::string_view::npos
                                                                    : line_end - line_start - 2);
    size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      std::string name = lower(line.substr(0, colon));
      std::string_view value = trim(line.substr(colon + 1));
      if (name == "content-length") {
        size_t v = 0;
        auto [q, e2] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (e2 != std::errc() || q != value.data() + value.size()) {
          return fail("bad Content-Length");
        }
        content_length = v;
      } else if (name == "transfer-encoding") {
        chunked = lower(value).find("chunked") != std::string::npos;
      } else if (name == "connection") {
        std::string v = lower(value);
        if (v.find("close") != std::string::npos) keep_alive = false;
        if (v.find("keep-alive") != std::string::npos) keep_alive = true;
      }
    }
    line_start = line_end;
  }
  size_t pos = head_end + 4;
  out.status = status;
  if (chunked) {
    for (;;) {
      size_t eol;
      while ((eol = in.find("\r\n", pos)) == std::string::npos) {
        if (in.size() - pos > 1024) return fail("bad chunk size line");
        if (read_more() <= 0) return fail("truncated chunked answer");
      }
      size_t size = 0;
      std::string_view line(in.data() + pos, eol - pos);
      line = line.substr(0, line.find(';'));
      auto [q, e3] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
      if (e3 != std::errc() || line.empty()) return fail("bad chunk size");
      pos = eol + 2;
      if (size == 0) {
        // Trailer fields until an empty line.
        for (;;) {
          while ((eol = in.find("\r\n", pos)) == std::string::npos) {
            if (in.size() - pos > kMaxHeaderBytes) return fail("trailers too large");
            if (read_more() <= 0) return fail("truncated chunked answer");
          }
          bool empty = eol == pos;
          pos = eol + 2;
          if (empty) break;
        }
        break;
      }
      if (out.body.size() + size > kMaxBodyBytes) return fail("answer too large");
      while (in.size() < pos + size + 2) {
        if (read_more() <= 0) return fail("truncated chunked answer");
      }
      out.body.append(in, pos, size);
      pos += size + 2;
    }
  } else if (content_length != std::string::npos) {
    if (content_length > kMaxBodyBytes) return fail("answer too large");
    while (in.size() < pos + content_length) {
      if (read_more() <= 0) return fail("truncated answer");
    }
    out.body.assign(in, pos, content_length);
    pos += content_length;
  } else if (status >= 200 && status != 204 && status != 304) {
    // Delimited by the close.
    keep_alive = false;
    for (;;) {
      if (in.size() - pos > kMaxBodyBytes) return fail("answer too large");
      int r = read_more();
      if (r == 0) break;
      if (r < 0) return fail("truncated answer");
    }
    out.body.assign(in, pos, std::string::npos);
    pos = in.size();
  }
  in.erase(0, pos);
  if (!keep_alive) {
    HttpAnswer keep = std::move(out);
    close();
    return keep;
  }
  return out;
}

}  // namespace ringcast::kafka_bridge
