#include "tools/ringcast/cli_http.h"

#include <arpa/inet.h>
#include <llhttp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
bool wait_fd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
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
  ServerAddress out;
  if (t.rfind("https://", 0) == 0) {
    out.tls = true;
    t.remove_prefix(8);
  } else if (t.rfind("http://", 0) == 0) {
    t.remove_prefix(7);
  }
  while (!t.empty() && t.back() == '/') t.remove_suffix(1);
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

HttpClient::HttpClient(ServerAddress server, std::string token, std::chrono::milliseconds timeout,
                       TlsTrust trust)
    : server_(std::move(server)),
      token_(std::move(token)),
      timeout_(timeout),
      trust_(std::move(trust)) {}

HttpClient::~HttpClient() {
  close_socket();
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

void HttpClient::close_socket() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  reused_ = false;
}

namespace {

std::string tls_error_text() {
  const uint32_t e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

}  // namespace

bool HttpClient::tls_handshake(Clock::time_point deadline, std::string* error) {
  if (ctx_ == nullptr) {
    ctx_ = SSL_CTX_new(TLS_method());
    if (ctx_ == nullptr) {
      *error = "cannot set up TLS: " + tls_error_text();
      return false;
    }
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (!trust_.pinned_cert.empty()) {
      // Pinned: the peer must present exactly this leaf (checked after the handshake, before
      // a byte of the request); no CA is involved.
      BIO* bio = BIO_new_file(trust_.pinned_cert.c_str(), "r");
      X509* leaf = bio != nullptr ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
      if (bio != nullptr) BIO_free(bio);
      uint8_t* der = nullptr;
      const int len = leaf != nullptr ? i2d_X509(leaf, &der) : -1;
      if (leaf != nullptr) X509_free(leaf);
      if (len <= 0) {
        *error = "cannot read the certificate in " + trust_.pinned_cert + ": " + tls_error_text();
        SSL_CTX_free(ctx_);
        ctx_ = nullptr;
        return false;
      }
      pinned_der_.assign(reinterpret_cast<const char*>(der), static_cast<size_t>(len));
      OPENSSL_free(der);
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    } else {
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
      // The system's CAs when present; a file the operator named must load.
      if (!trust_.system_ca_file.empty() && ::access(trust_.system_ca_file.c_str(), R_OK) == 0) {
        SSL_CTX_load_verify_locations(ctx_, trust_.system_ca_file.c_str(), nullptr);
        ERR_clear_error();
      }
      if (!trust_.ca_file.empty() &&
          SSL_CTX_load_verify_locations(ctx_, trust_.ca_file.c_str(), nullptr) != 1) {
        *error = "cannot read the certificates in " + trust_.ca_file + ": " + tls_error_text();
        SSL_CTX_free(ctx_);
        ctx_ = nullptr;
        return false;
      }
    }
  }
  ssl_ = SSL_new(ctx_);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
    *error = "cannot set up TLS: " + tls_error_text();
    return false;
  }
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
  const bool pinned = !pinned_der_.empty();
  in6_addr a6;
  in_addr a4;
  const bool is_ip = ::inet_pton(AF_INET, server_.host.c_str(), &a4) == 1 ||
                     ::inet_pton(AF_INET6, server_.host.c_str(), &a6) == 1;
  if (!is_ip) SSL_set_tlsext_host_name(ssl_, server_.host.c_str());
  if (is_ip && !pinned) {
    X509_VERIFY_PARAM_set1_ip_asc(param, server_.host.c_str());
  } else if (!pinned) {
    X509_VERIFY_PARAM_set1_host(param, server_.host.data(), server_.host.size());
  }
  while (true) {
    const int r = SSL_connect(ssl_);
    if (r == 1 && pinned) {
      X509* peer = SSL_get_peer_certificate(ssl_);
      uint8_t* der = nullptr;
      const int len = peer != nullptr ? i2d_X509(peer, &der) : -1;
      if (peer != nullptr) X509_free(peer);
      const bool same = len > 0 && static_cast<size_t>(len) == pinned_der_.size() &&
                        std::memcmp(der, pinned_der_.data(), pinned_der_.size()) == 0;
      if (der != nullptr) OPENSSL_free(der);
      if (!same) {
        *error = "the certificate of " + server_.authority() + " is not the one in " +
                 trust_.pinned_cert + " (server.tls_cert)";
        return false;
      }
      return true;
    }
    if (r == 1) return true;
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (!wait_fd(fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
        *error = "the TLS handshake with " + server_.authority() + " timed out";
        return false;
      }
      continue;
    }
    const long v = SSL_get_verify_result(ssl_);
    if (v != X509_V_OK) {
      *error = "the certificate of " + server_.authority() +
               " is not trusted: " + X509_verify_cert_error_string(v) +
               " (give its CA with --cacert)";
    } else {
      *error = "the TLS handshake with " + server_.authority() + " failed: " + tls_error_text() +
               " (is it serving https?)";
    }
    ERR_clear_error();
    return false;
  }
}

ssize_t HttpClient::send_some(const char* data, size_t n, short* want) {
  *want = POLLOUT;
  if (ssl_ == nullptr) return ::send(fd_, data, n, MSG_NOSIGNAL);
  const int r = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(n, 1u << 30)));
  if (r > 0) return r;
  const int e = SSL_get_error(ssl_, r);
  ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    errno = EAGAIN;
    return -1;
  }
  if (e != SSL_ERROR_SYSCALL || errno == 0) errno = EPIPE;
  return -1;
}

ssize_t HttpClient::recv_some(char* buf, size_t n, short* want) {
  *want = POLLIN;
  if (ssl_ == nullptr) return ::recv(fd_, buf, n, 0);
  const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1u << 30)));
  if (r > 0) return r;
  const int e = SSL_get_error(ssl_, r);
  ERR_clear_error();
  if (e == SSL_ERROR_ZERO_RETURN) return 0;  // close_notify
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_SYSCALL && r == 0) return 0;  // EOF without close_notify
  if (e != SSL_ERROR_SYSCALL || errno == 0) errno = EPROTO;
  return -1;
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
    if (server_.tls && !tls_handshake(deadline, error)) {
      close_socket();
      return false;
    }
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
  short want = POLLOUT;
  while (sent < request.size()) {
    ssize_t n = send_some(request.data() + sent, request.size() - sent, &want);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd_, want, deadline)) {
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
    ssize_t n = recv_some(buf, sizeof buf, &want);
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
      if (!wait_fd(fd_, want, deadline)) {
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
