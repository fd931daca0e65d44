#include "net/blocking_http.h"

#include <llhttp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "core/ip_address.h"

namespace ringcast::net {

namespace {

int remaining_ms(SteadyTime deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 3'600'000 ? 3'600'000 : static_cast<int>(left.count()) + 1;
}

// Waits for `events` on `fd` until `deadline`: 1 ready, 0 deadline passed, -1 error (errno).
int wait_fd(int fd, short events, SteadyTime deadline) {
  for (;;) {
    const int ms = remaining_ms(deadline);
    if (ms == 0) return 0;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return 1;
    if (n == 0) continue;  // rounding: remaining_ms() decides
    if (errno != EINTR) return -1;
  }
}

bool is_ip_literal(const std::string& host) {
  return parse_ip(host).has_value();
}

// Collects one whole answer (status, headers, body up to a cap) from llhttp; 1xx skipped.
struct Collector {
  BlockingReply reply;
  std::string field;
  std::string value;
  bool in_value = false;
  bool done = false;
  bool too_large = false;
  size_t max_bytes = 0;
  size_t bytes = 0;

  static Collector* self(llhttp_t* p) { return static_cast<Collector*>(p->data); }
  void flush_header() {
    if (!field.empty()) {
      for (char& ch : field) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      reply.headers.push_back({std::move(field), std::move(value)});
    }
    field.clear();
    value.clear();
    in_value = false;
  }
  bool add(size_t n) {
    bytes += n;
    if (bytes > max_bytes) too_large = true;
    return !too_large;
  }
  static const llhttp_settings_t& settings() {
    static const llhttp_settings_t s = [] {
      llhttp_settings_t st;
      llhttp_settings_init(&st);
      st.on_header_field = [](llhttp_t* p, const char* at, size_t n) {
        Collector* c = self(p);
        if (c->in_value) c->flush_header();
        c->field.append(at, n);
        return c->add(n) ? 0 : -1;
      };
      st.on_header_value = [](llhttp_t* p, const char* at, size_t n) {
        Collector* c = self(p);
        c->in_value = true;
        c->value.append(at, n);
        return c->add(n) ? 0 : -1;
      };
      st.on_headers_complete = [](llhttp_t* p) {
        Collector* c = self(p);
        c->flush_header();
        c->reply.status = static_cast<int>(p->status_code);
        return 0;
      };
      st.on_body = [](llhttp_t* p, const char* at, size_t n) {
        Collector* c = self(p);
        c->reply.body.append(at, n);
        return c->add(n) ? 0 : -1;
      };
      st.on_message_complete = [](llhttp_t* p) -> int {
        Collector* c = self(p);
        if (c->reply.status >= 100 && c->reply.status < 200) {  // an interim answer: skip it
          c->reply = BlockingReply();
          return 0;
        }
        c->reply.keep_alive = llhttp_should_keep_alive(p) != 0;
        c->done = true;
        return HPE_PAUSED;
      };
      return st;
    }();
    return s;
  }
};

}  // namespace

std::string tls_error_text() {
  const uint32_t e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

const std::string* BlockingReply::header(std::string_view lower_name) const {
  for (const auto& h : headers)
    if (h.name == lower_name) return &h.value;
  return nullptr;
}

BlockingHttpConnection::~BlockingHttpConnection() {
  close();
}

void BlockingHttpConnection::close() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Error BlockingHttpConnection::fail(const char* reason, const char* message, int sys_errno,
                                   Errc code) {
  close();
  Error e = make_error(code, message, nullptr, reason);
  e.sys_errno = sys_errno;
  return e;
}

Result<void> BlockingHttpConnection::connect(const std::string& host, uint16_t port,
                                             const BlockingTls* tls, SteadyTime deadline) {
  if (auto o = open(host, port, deadline); !o.ok()) return o;
  if (tls != nullptr) return start_tls(host, *tls, deadline);
  return ok();
}

Result<void> BlockingHttpConnection::open(const std::string& host, uint16_t port,
                                          SteadyTime deadline) {
  close();
  detail_.clear();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (is_ip_literal(host)) hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    detail_ = gai_strerror(rc);
    return fail("resolve_failed", "the name does not resolve");
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(res, ::freeaddrinfo);
  int last_errno = EHOSTUNREACH;
  bool timed_out = false;
  for (addrinfo* ai = res; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    int err = r == 0 ? 0 : errno;
    if (r != 0 && err == EINPROGRESS) {
      const int w = wait_fd(fd, POLLOUT, deadline);
      if (w == 0) {
        timed_out = true;
        ::close(fd);
        break;  // the deadline is the caller's, for every address together
      }
      socklen_t el = sizeof err;
      if (w < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
    }
    if (err != 0) {
      last_errno = err;
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
  }
  if (fd_ < 0) {
    if (timed_out) {
      detail_ = "connect timed out";
      return fail("timeout", "no answer before the deadline");
    }
    detail_ = std::strerror(last_errno);
    return fail("connect_failed", "socket error", last_errno);
  }
  return ok();
}

Result<void> BlockingHttpConnection::start_tls(const std::string& host, const BlockingTls& tls,
                                               SteadyTime deadline) {
  if (fd_ < 0) return fail("io_failed", "not connected", ENOTCONN);
  if (tls.ctx == nullptr) return fail("tls_failed", "no TLS context for an https peer");
  ssl_ = SSL_new(tls.ctx);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
    detail_ = tls_error_text();
    return fail("tls_failed", "TLS setup failed");
  }
  SSL_set_connect_state(ssl_);
  const bool pinned = !tls.pinned_der.empty();
  const bool ip = is_ip_literal(host);
  if (!ip) SSL_set_tlsext_host_name(ssl_, host.c_str());
  if (pinned) {
    SSL_set_verify(ssl_, SSL_VERIFY_NONE, nullptr);  // the pin below is the check
  } else {
    SSL_set_verify(ssl_, SSL_VERIFY_PEER, nullptr);
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
    const int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                       : X509_VERIFY_PARAM_set1_host(param, host.data(), host.size());
    if (set != 1) {
      detail_ = tls_error_text();
      return fail("tls_failed", "TLS setup failed");
    }
  }
  for (;;) {
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) break;
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      ERR_clear_error();
      const int w = wait_fd(fd_, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
      if (w == 0) {
        detail_ = "the TLS handshake timed out";
        return fail("timeout", "no answer before the deadline");
      }
      if (w > 0) continue;
    }
    const long v = SSL_get_verify_result(ssl_);
    if (!pinned && v != X509_V_OK) {
      detail_ = X509_verify_cert_error_string(v);
      ERR_clear_error();
      return fail("tls_untrusted", "the peer's certificate is not trusted");
    }
    detail_ = tls_error_text();
    return fail("tls_failed", "the TLS handshake failed");
  }
  if (pinned) {
    X509* peer = SSL_get_peer_certificate(ssl_);
    uint8_t* der = nullptr;
    const int len = peer != nullptr ? i2d_X509(peer, &der) : -1;
    if (peer != nullptr) X509_free(peer);
    const bool same = len > 0 && static_cast<size_t>(len) == tls.pinned_der.size() &&
                      std::memcmp(der, tls.pinned_der.data(), tls.pinned_der.size()) == 0;
    if (der != nullptr) OPENSSL_free(der);
    if (!same) {
      detail_ = "not the pinned certificate";
      return fail("tls_untrusted", "the peer's certificate is not the pinned one");
    }
  }
  return ok();
}

long BlockingHttpConnection::send_some(const char* data, size_t n, short* want) {
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

long BlockingHttpConnection::recv_some(char* buf, size_t n, short* want) {
  *want = POLLIN;
  if (ssl_ == nullptr) return ::recv(fd_, buf, n, 0);
  const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1u << 30)));
  if (r > 0) return r;
  const int e = SSL_get_error(ssl_, r);
  ERR_clear_error();
  if (e == SSL_ERROR_ZERO_RETURN) return 0;  // close_notify: the end, like EOF
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    errno = EAGAIN;
    return -1;
  }
  // A peer that closes without close_notify ends the answer like EOF (Connection: close); a
  // truncated answer is caught by the parser.
  if (e == SSL_ERROR_SYSCALL && (r == 0 || errno == 0)) return 0;
  if (e != SSL_ERROR_SYSCALL || errno == 0) errno = EPROTO;
  return -1;
}

Result<BlockingReply> BlockingHttpConnection::exchange(std::string_view request,
                                                       SteadyTime deadline,
                                                       size_t max_response_bytes) {
  if (fd_ < 0) return fail("io_failed", "not connected", ENOTCONN);
  size_t off = 0;
  short want = POLLOUT;
  while (off < request.size()) {
    const long n = send_some(request.data() + off, request.size() - off, &want);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int w = wait_fd(fd_, want, deadline);
      if (w == 0) return fail("timeout", "no answer before the deadline");
      if (w < 0) return fail("io_failed", "socket error", errno);
      continue;
    }
    break;  // the peer may have answered early (413) and closed: read what it said
  }
  Collector c;
  c.max_bytes = max_response_bytes;
  llhttp_t parser;
  llhttp_init(&parser, HTTP_RESPONSE, &Collector::settings());
  parser.data = &c;
  bool nothing_read = true;
  char buf[16384];
  for (;;) {
    const long n = recv_some(buf, sizeof buf, &want);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        const int w = wait_fd(fd_, want, deadline);
        if (w == 0) return fail("timeout", "no answer before the deadline");
        if (w < 0) return fail("io_failed", "socket error", errno);
        continue;
      }
      if (nothing_read && errno == ECONNRESET) {
        return fail("closed", "the peer closed the connection without answering", errno);
      }
      return fail("io_failed", "socket error", errno);
    }
    if (n == 0 && nothing_read) {
      return fail("closed", "the peer closed the connection without answering");
    }
    if (n > 0) nothing_read = false;
    const llhttp_errno_t e =
        n == 0 ? llhttp_finish(&parser) : llhttp_execute(&parser, buf, static_cast<size_t>(n));
    if (c.done) {
      if (!c.reply.keep_alive) close();
      return std::move(c.reply);
    }
    if (c.too_large)
      return fail("too_large", "the answer is larger than its limit", 0, Errc::kLimitExceeded);
    if (e != HPE_OK) {
      detail_ = llhttp_errno_name(e);
      return fail("bad_response", "malformed HTTP answer", 0, Errc::kInvalidArgument);
    }
    if (n == 0) {
      return fail("bad_response", "the connection closed before a whole answer", 0,
                  Errc::kInvalidArgument);
    }
  }
}

Result<BlockingReply> blocking_exchange(const std::string& host, uint16_t port,
                                        const BlockingTls* tls, std::string_view request,
                                        SteadyTime deadline, size_t max_response_bytes) {
  BlockingHttpConnection conn;
  if (auto c = conn.connect(host, port, tls, deadline); !c.ok()) return c.error();
  return conn.exchange(request, deadline, max_response_bytes);
}

}  // namespace ringcast::net
