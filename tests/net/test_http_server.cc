#include "tests/net/test_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace ringcast::test::net_server {

namespace {
constexpr int kPollMs = 10;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Blocking-style I/O over a non-blocking fd (and optional SSL) that gives up when `stop` is set.
class Io {
 public:
  Io(int fd, SSL* ssl, const std::atomic<bool>& stop) : fd_(fd), ssl_(ssl), stop_(stop) {}

  bool wait(short events) {
    while (!stop_) {
      pollfd p{fd_, events, 0};
      int rc = ::poll(&p, 1, kPollMs);
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
    }
    return false;
  }
  bool handshake() {
    for (;;) {
      int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      int err = SSL_get_error(ssl_, rc);
      if (err == SSL_ERROR_WANT_READ) {
        if (!wait(POLLIN)) return false;
      } else if (err == SSL_ERROR_WANT_WRITE) {
        if (!wait(POLLOUT)) return false;
      } else {
        ERR_clear_error();
        return false;
      }
    }
  }
  // > 0 bytes, 0 EOF, < 0 error/stop.
  ssize_t read_some(char* buf, size_t len) {
    for (;;) {
      if (ssl_) {
        int n = SSL_read(ssl_, buf, static_cast<int>(len));
        if (n > 0) return n;
        int err = SSL_get_error(ssl_, n);
        if (err == SSL_ERROR_WANT_READ) {
          if (!wait(POLLIN)) return -1;
          continue;
        }
        ERR_clear_error();
        return err == SSL_ERROR_ZERO_RETURN || err == SSL_ERROR_SYSCALL ? 0 : -1;
      }
      ssize_t n = ::recv(fd_, buf, len, 0);
      if (n >= 0) return n;
      if (errno == EAGAIN || errno == EINTR) {
        if (!wait(POLLIN)) return -1;
        continue;
      }
      return -1;
    }
  }
  bool write_all(const char* data, size_t len) {
    size_t off = 0;
    while (off < len) {
      if (ssl_) {
        int n = SSL_write(ssl_, data + off, static_cast<int>(len - off));
        if (n > 0) {
          off += static_cast<size_t>(n);
          continue;
        }
        int err = SSL_get_error(ssl_, n);
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
          if (!wait(err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN)) return false;
          continue;
        }
        ERR_clear_error();
        return false;
      }
      ssize_t n = ::send(fd_, data + off, len - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (!wait(POLLOUT)) return false;
        continue;
      }
      return false;
    }
    return true;
  }
  bool sleep_for(std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      if (stop_) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(kPollMs, d.count())));
    }
    return !stop_;
  }
  // Reads and discards until EOF or stop.
  void drain() {
    char buf[4096];
    while (read_some(buf, sizeof(buf)) > 0) {
    }
  }

 private:
  int fd_;
  SSL* ssl_;
  const std::atomic<bool>& stop_;
};
}  // namespace

HttpAction respond(int status, const std::string& body, const std::string& extra_headers) {
  HttpAction a;
  a.response = "HTTP/1.1 " + std::to_string(status) +
               " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers +
               "\r\n" + body;
  return a;
}

TestHttpServer::TestHttpServer(Handler handler, ServerOptions options)
    : handler_(std::move(handler)), options_(std::move(options)) {
  const bool v6 = options_.bind.find(':') != std::string::npos;
  listen_fd_ = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, options_.bind.c_str(), &a->sin6_addr);
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    ::inet_pton(AF_INET, options_.bind.c_str(), &a->sin_addr);
    len = sizeof(*a);
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::listen(listen_fd_, 512) != 0) {
    throw std::runtime_error("bind/listen failed on " + options_.bind);
  }
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (!options_.tls_cert_pem.empty()) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_method());
    BIO* cb = BIO_new_mem_buf(options_.tls_cert_pem.data(), -1);
    X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
    BIO* kb = BIO_new_mem_buf(options_.tls_key_pem.data(), -1);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
    if (!cert || !key || !SSL_CTX_use_certificate(ctx, cert) || !SSL_CTX_use_PrivateKey(ctx, key)) {
      throw std::runtime_error("bad test certificate");
    }
    X509_free(cert);
    EVP_PKEY_free(key);
    BIO_free(cb);
    BIO_free(kb);
    ssl_ctx_ = ctx;
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

TestHttpServer::~TestHttpServer() {
  stop();
  if (ssl_ctx_) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

void TestHttpServer::stop() {
  if (stop_.exchange(true)) return;
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> g(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  ::close(listen_fd_);
}

std::vector<HttpRequest> TestHttpServer::received() {
  std::lock_guard<std::mutex> g(mu_);
  return received_;
}

std::string TestHttpServer::url(const std::string& path, const std::string& host) const {
  std::string h = host;
  if (h.empty())
    h = options_.bind.find(':') != std::string::npos ? "[" + options_.bind + "]" : options_.bind;
  return std::string(ssl_ctx_ ? "https" : "http") + "://" + h + ":" + std::to_string(port_) + path;
}

void TestHttpServer::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    const int index = connections_++;
    std::lock_guard<std::mutex> g(mu_);
    threads_.emplace_back([this, fd, index] { serve(fd, index); });
  }
}

void TestHttpServer::serve(int fd, int index) {
  SSL* ssl = nullptr;
  Io plain_io(fd, nullptr, stop_);
  if (options_.stall_handshake || options_.never_read) {
    while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    ::close(fd);
    return;
  }
  if (ssl_ctx_) {
    ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    SSL_set_fd(ssl, fd);
  }
  Io io(fd, ssl, stop_);
  if (ssl && !io.handshake()) {
    SSL_free(ssl);
    ::close(fd);
    return;
  }
  std::string buf;
  char tmp[16384];
  bool open = true;
  for (int req_no = 0; open && !stop_; ++req_no) {
    // Read a head.
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = io.read_some(tmp, sizeof(tmp));
      if (n <= 0) {
        open = false;
        break;
      }
      buf.append(tmp, static_cast<size_t>(n));
    }
    if (!open) break;
    HttpRequest rq;
    rq.connection_index = index;
    rq.request_on_connection = req_no;
    rq.head = buf.substr(0, head_end + 4);
    size_t line_end = buf.find("\r\n");
    std::string line = buf.substr(0, line_end);
    size_t s1 = line.find(' '), s2 = line.rfind(' ');
    rq.method = line.substr(0, s1);
    rq.target = line.substr(s1 + 1, s2 - s1 - 1);
    rq.version = line.substr(s2 + 1);
    size_t pos = line_end + 2;
    while (pos < head_end) {
      size_t e = buf.find("\r\n", pos);
      std::string h = buf.substr(pos, e - pos);
      size_t colon = h.find(':');
      std::string name = lower(h.substr(0, colon));
      std::string value = h.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      auto& slot = rq.headers[name];
      slot = slot.empty() ? value : slot + ", " + value;
      pos = e + 2;
    }
    buf.erase(0, head_end + 4);
    size_t clen = 0;
    if (auto it = rq.headers.find("content-length"); it != rq.headers.end()) {
      clen = std::stoul(it->second);
    }
    while (buf.size() < clen) {
      ssize_t n = io.read_some(tmp, sizeof(tmp));
      if (n <= 0) {
        open = false;
        break;
      }
      buf.append(tmp, static_cast<size_t>(n));
    }
    if (!open) break;
    rq.body = buf.substr(0, clen);
    buf.erase(0, clen);
    requests_++;
    HttpAction a = handler_(rq);
    {
      std::lock_guard<std::mutex> g(mu_);
      received_.push_back(rq);
    }
    switch (a.kind) {
      case HttpAction::kRespond:
        open = io.write_all(a.response.data(), a.response.size()) && !a.close_after;
        break;
      case HttpAction::kHang:
        io.drain();
        open = false;
        break;
      case HttpAction::kClose:
        open = false;
        break;
      case HttpAction::kReset: {
        linger l{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        open = false;
        break;
      }
      case HttpAction::kTrickle:
        for (char c : a.response) {
          if (!io.write_all(&c, 1) || !io.sleep_for(a.interval)) break;
        }
        open = false;
        break;
      case HttpAction::kEndless: {
        if (!io.write_all(a.response.data(), a.response.size())) break;
        const std::string chunk = "400\r\n" + std::string(1024, 'e') + "\r\n";
        while (!stop_ && io.write_all(chunk.data(), chunk.size())) {
        }
        open = false;
        break;
      }
    }
  }
  if (ssl) {
    SSL_free(ssl);
  }
  ::close(fd);
}

}  // namespace ringcast::test::net_server
