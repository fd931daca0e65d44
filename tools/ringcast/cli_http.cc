#include "tools/ringcast/cli_http.h"

#include <arpa/inet.h>
#include <llhttp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "engine/version.h"

namespace ringcast::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxResponseBytes = 512u * 1024 * 1024;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

struct ResponseReader {
  llhttp_t parser;
  llhttp_settings_t settings;
  HttpReply reply;
  std::string field, value;
  bool done = false;
  bool keep_alive = true;
  bool too_big = false;

  ResponseReader() {
    llhttp_settings_init(&settings);
    settings.on_header_field = [](llhttp_t* p, const char* at, size_t n) {
      self(p)->field.append(at, n);
      return 0;
    };
    settings.on_header_value = [](llhttp_t* p, const char* at, size_t n) {
      self(p)->value.append(at, n);
      return 0;
    };
    settings.on_header_value_complete = [](llhttp_t* p) {
      auto* s = self(p);
      if (strcasecmp(s->field.c_str(), "content-type") == 0) s->reply.content_type = s->value;
      s->field.clear();
      s->value.clear();
      return 0;
    };
    settings.on_body = [](llhttp_t* p, const char* at, size_t n) {
      auto* s = self(p);
      if (s->reply.body.size() + n > kMaxResponseBytes) {
        s->too_big = true;
        return -1;
      }
      s->reply.body.append(at, n);
      return 0;
    };
    settings.on_message_complete = [](llhttp_t* p) {
      auto* s = self(p);
      int status = llhttp_get_status_code(p);
      if (status >= 100 && status < 200) {  // 1xx: keep reading for the final answer
        s->reply = HttpReply();
        return 0;
      }
      s->reply.status = status;
      s->keep_alive = llhttp_should_keep_alive(p) != 0;
      s->done = true;
      return static_cast<int>(HPE_PAUSED);
    };
    llhttp_init(&parser, HTTP_RESPONSE, &settings);
    parser.data = this;
  }
  static ResponseReader* self(llhttp_t* p) { return static_cast<ResponseReader*>(p->data); }
};

}  // namespace

std::string ServerAddress::authority() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::optional<ServerAddress> parse_server(std::string_view text, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<ServerAddress> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  std::string_view t = text;
  if (t.rfind("https://", 0) == 0) {
    return fail(
        "https:// is not supported by the CLI; give the daemon's plain HTTP address "
        "(e.g. 127.0.0.1:8080)");
  }
  if (t.rfind("http://", 0) == 0) t.remove_prefix(7);
  while (!t.empty() && t.back() == '/') t.remove_suffix(1);
  ServerAddress out;
  std::string_view port;
  if (!t.empty() && t.front() == '[') {
    size_t close = t.find(']');
    if (close == std::string_view::npos || close + 1 >= t.size() || t[close + 1] != ':') {
      return fail("expected [v6-address]:port, got \"" + std::string(text) + "\"");
    }
    out.host = std::string(t.substr(1, close - 1));
    port = t.substr(close + 2);
  } else {
    size_t colon = t.rfind(':');
    if (colon == std::string_view::npos || t.substr(0, colon).find(':') != std::string_view::npos) {
      return fail("expected host:port (e.g. 127.0.0.1:8080), got \"" + std::string(text) + "\"");
    }
    out.host = std::string(t.substr(0, colon));
    port = t.substr(colon + 1);
  }
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (out.host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      p == 0 || p > 65535) {
    return fail("expected host:port with a port in 1..65535, got \"" + std::string(text) + "\"");
  }
  out.port = static_cast<uint16_t>(p);
  return out;
}

HttpClient::HttpClient(ServerAddress server, std::string token, std::chrono::milliseconds timeout)
    : server_(std::move(server)), token_(std::move(token)), timeout_(timeout) {}

HttpClient::~HttpClient() {
  close_socket();
}

void HttpClient::close_socket() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  reused_ = false;
}

bool HttpClient::connect_socket(std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(server_.port);
  int rc = ::getaddrinfo(server_.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "cannot resolve " + server_.host + ": " + gai_strerror(rc);
    return false;
  }
  auto deadline = Clock::now() + timeout_;
  std::string last = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        last = "connect timed out";
        ::close(fd);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r != 0) {
      last = std::strerror(errno);
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
    reused_ = false;
    ::freeaddrinfo(res);
    return true;
  }
  ::freeaddrinfo(res);
  *error = "cannot connect to " + server_.authority() + ": " + last +
           " (is `ringcast serve` running there?)";
  return false;
}

HttpOutcome HttpClient::exchange(const std::string& request, bool* stale) {
  HttpOutcome out;
  bool nothing_read = true;
  *stale = false;
  auto deadline = Clock::now() + timeout_;
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd_, POLLOUT, deadline)) {
        out.error = "timed out sending the request";
        return out;
      }
      continue;
    }
    // The server may have answered early (e.g. 413) and closed: read what it said.
    break;
  }
  ResponseReader rr;
  char buf[65536];
  while (!rr.done) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      nothing_read = false;
      llhttp_errno_t e = llhttp_execute(&rr.parser, buf, static_cast<size_t>(n));
      if (rr.done) break;
      if (e != HPE_OK) {
        out.error = rr.too_big ? "response larger than 512 MiB"
                               : std::string("malformed HTTP response: ") + llhttp_errno_name(e);
        return out;
      }
      continue;
    }
    if (n == 0) {
      if (llhttp_finish(&rr.parser) == HPE_OK && rr.done) break;
      out.error = nothing_read ? "the server closed the connection without answering"
                               : "the server closed the connection mid-response";
      *stale = nothing_read;
      return out;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd_, POLLIN, deadline)) {
        out.error = "timed out waiting for the server's answer";
        return out;
      }
      continue;
    }
    *stale = nothing_read && errno == ECONNRESET;
    out.error = std::string("receive failed: ") + std::strerror(errno);
    return out;
  }
  out.ok = true;
  out.reply = std::move(rr.reply);
  if (!rr.keep_alive) close_socket();
  return out;
}

HttpOutcome HttpClient::request(std::string_view method, std::string_view target,
                                std::string_view body, std::string_view content_type) {
  std::string req;
  req.reserve(body.size() + 256);
  req.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  req.append("Host: ").append(server_.authority()).append("\r\n");
  req.append("User-Agent: ringcast-cli/").append(version_string()).append("\r\n");
  if (!token_.empty()) req.append("Authorization: Bearer ").append(token_).append("\r\n");
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    if (!body.empty()) req.append("Content-Type: ").append(content_type).append("\r\n");
    req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  req.append("\r\n").append(body);

  for (int attempt = 0; attempt < 2; ++attempt) {
    if (fd_ < 0) {
      HttpOutcome out;
      if (!connect_socket(&out.error)) return out;
    }
    bool was_reused = reused_;
    bool stale = false;
    HttpOutcome out = exchange(req, &stale);
    if (out.ok) {
      if (fd_ >= 0) reused_ = true;
      return out;
    }
    close_socket();
    // A keep-alive connection the server had already closed (EOF or reset before any answer
    // byte, e.g. its idle timeout): it read nothing of this request; try once anew.
    if (!(was_reused && stale)) return out;
  }
  HttpOutcome out;
  out.error = "the connection failed twice";
  return out;
}

}  // namespace ringcast::cli
