// HTTP/1.1 server on the io_uring loop (docs/operations.md "HTTP API"): accept/recv/send through
// net::Loop, llhttp request parsing, keep-alive, pipelining, header/body limits, and handlers
// that may answer later from any thread. Invariants: responses leave a connection in request
// order; memory per connection is bounded by the limits; every HttpServer method runs on the
// loop's thread except Responder::send(), which may run anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/ip_address.h"
#include "core/result.h"
#include "core/time.h"
#include "net/loop.h"

namespace ringcast::net {

// Request bodies carry this many spare bytes of capacity so simdjson can parse them in place
// (SIMDJSON_PADDING is 64; net/api static_asserts the relation).
inline constexpr size_t kBodyPadding = 64;

struct HttpHeader {
  std::string name;  // lower-case
  std::string value;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/tenants/a/events?x=1"
  std::vector<HttpHeader> headers;
  std::string body;  // capacity() >= size() + kBodyPadding when it comes from the server
  bool keep_alive = true;
  IpAddress peer{};  // the client's address (set by the server; v4-mapped v6 read as v4)
  bool tls = false;  // it came over TLS (HttpServerOptions::tls_cert_file)

  std::string_view path() const;   // target up to '?'
  std::string_view query() const;  // after '?', "" when none
  // The first header with this (lower-case) name, or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

struct HttpResponse {
  uint16_t status = 200;
  std::string content_type = "application/json";
  std::vector<HttpHeader> headers;  // extra headers (not Content-Length / Connection / Date)
  std::string body;
  bool close = false;  // close the connection after this response

  // {"error": {"code": code, "message": message[, "field": field]}} with `status`.
  static HttpResponse error(uint16_t status, std::string_view code, std::string_view message,
                            std::string_view field = {});
  static HttpResponse json(uint16_t status, std::string body);
};

const char* http_reason(uint16_t status);

namespace detail {
class HttpServerCore;  // the implementation (http_server.cc)

// Where a Responder delivers its response. Implemented by the server (a pending slot in a
// connection's queue) and by Responder::from_function().
class ResponseSlot {
 public:
  virtual void fulfil(HttpResponse&& response) = 0;  // exactly once; any thread

 protected:
  ~ResponseSlot() = default;
};
}  // namespace detail

// The handle a handler answers through: move-only, answers at most once, from any thread.
// Destroying it without send() answers 500 (a handler bug must not hang the client).
class Responder {
 public:
  Responder() = default;
  explicit Responder(detail::ResponseSlot* slot) : slot_(slot) {}
  Responder(Responder&& o) noexcept : slot_(o.slot_) { o.slot_ = nullptr; }
  Responder& operator=(Responder&& o) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();

  void send(HttpResponse response);
  bool valid() const { return slot_ != nullptr; }

  // A responder that calls `fn` on the thread that sends (tests, sans-I/O use).
  static Responder from_function(std::function<void(HttpResponse)> fn);

 private:
  detail::ResponseSlot* slot_ = nullptr;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Called once the request head is known (no body yet): the largest body to accept for it.
  // Larger → 413 and the connection is closed.
  virtual size_t max_body_bytes(const HttpRequest& head) = 0;
  // Runs on the server's loop thread; answer through `responder`, now or later.
  virtual void handle(HttpRequest&& request, Responder responder) = 0;
};

struct HttpServerOptions {
  IpAddress address = IpAddress::v4(127, 0, 0, 1);
  uint16_t port = 0;  // 0: the kernel picks; see HttpServer::port()
  int backlog = 1024;
  size_t max_header_bytes = 64 * 1024;  // request line + headers → 431 beyond
  uint32_t max_headers = 100;
  uint32_t max_connections = 1024;  // accepting pauses at the cap
  // Open connections from one client address; a connection past it is closed at once (SPEC
  // R14: one client cannot take the listener). 0: no cap.
  uint32_t max_connections_per_ip = 0;
  uint32_t max_pipelined = 32;  // requests queued per connection before reading pauses
  size_t recv_buffer_bytes = 64 * 1024;
  Duration idle_timeout = seconds(60);  // no request in progress (also bounds a slow head)
  Duration linger = seconds(2);         // after an error response, drain the peer this long
  // TLS on this listener (BoringSSL, TLS 1.2 at least): the certificate chain and its private
  // key, PEM files; both empty: plain HTTP. start() fails when they do not load.
  std::string tls_cert_file;
  std::string tls_key_file;
};

struct HttpServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t requests = 0;
  uint64_t responses = 0;
  uint64_t parse_errors = 0;
  uint64_t too_large = 0;  // 413 + 431
  uint64_t idle_closed = 0;
  uint64_t refused_per_ip = 0;  // closed at accept: max_connections_per_ip
};

class HttpServer {
 public:
  // The loop and the handler must outlive the server. Call on the loop's thread.
  HttpServer(Loop& loop, HttpHandler& handler, HttpServerOptions options);
  ~HttpServer();  // closes everything at once; responders still out are safely orphaned
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts accepting. The bound port is port() afterwards.
  Result<void> start();
  uint16_t port() const { return port_; }

  // Graceful stop: stops accepting, closes idle connections, lets queued requests finish
  // (their responses say Connection: close), then calls `done` on the loop thread. After
  // `grace` whatever is left is closed. Idempotent; `done` runs once.
  void stop(Duration grace, std::function<void()> done);

  const HttpServerStats& stats() const;

 private:
  std::unique_ptr<detail::HttpServerCore> impl_;
  uint16_t port_ = 0;
};

// A server on its own thread with its own loop: what the daemon and tests use.
// start() returns once it listens; stop() returns once it stopped (graceful, bounded).
class HttpServerThread {
 public:
  HttpServerThread(HttpHandler& handler, HttpServerOptions options, LoopOptions loop_options = {});
  ~HttpServerThread();  // stop(0)
  HttpServerThread(const HttpServerThread&) = delete;
  HttpServerThread& operator=(const HttpServerThread&) = delete;

  Result<void> start();
  uint16_t port() const { return port_; }
  void stop(Duration grace = seconds(5));
  Loop* loop() { return loop_.get(); }  // valid between start() and stop()

 private:
  HttpHandler& handler_;
  HttpServerOptions options_;
  LoopOptions loop_options_;
  std::unique_ptr<Loop> loop_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  uint16_t port_ = 0;
  bool running_ = false;
};

}  // namespace ringcast::net
