// The CLI's HTTP/1.1 client: one keep-alive connection of net/blocking_http.h, Bearer auth;
// over TLS (BoringSSL) for an https:// server, the API listener's
// server.tls_cert (SPEC R14, docs/security.md "Listener").
// Invariants: every wait is bounded by the timeout; a stale keep-alive connection is retried
// once on a fresh one only when the server provably read nothing of the request; a TLS server
// is always verified (chain and host name or IP, TLS 1.2 at least): the token never goes to
// a server that did not prove its name.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/blocking_http.h"

namespace ringcast::cli {

struct ServerAddress {
  std::string host;  // as given (IP literal or name), without brackets
  uint16_t port = 8080;
  bool tls = false;               // https://
  std::string authority() const;  // "host:port", brackets around IPv6
};

// How a TLS server is verified: by the system's CAs plus `ca_file` (PEM) when set, chain and
// name; or, with `pinned_cert` (the daemon's own certificate from its config, PEM, the leaf
// first), by being exactly that certificate (whatever name the CLI reached it by).
struct TlsTrust {
  std::string system_ca_file = "/etc/ssl/certs/ca-certificates.crt";
  std::string ca_file;
  std::string pinned_cert;
};

// "127.0.0.1:8080", "localhost:9000", "[::1]:8080", "http://host:port[/]",
// "https://host:port[/]". A missing port or junk → nullopt with `error` set.
std::optional<ServerAddress> parse_server(std::string_view text, std::string* error);

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

struct HttpOutcome {
  bool ok = false;    // a complete response arrived (any status)
  std::string error;  // otherwise: what went wrong (connect refused, timeout, ...)
  HttpReply reply;
};

class HttpClient {
 public:
  using Clock = std::chrono::steady_clock;
  HttpClient(ServerAddress server, std::string token,
             std::chrono::milliseconds timeout = std::chrono::seconds(60), TlsTrust trust = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpOutcome request(std::string_view method, std::string_view target, std::string_view body = {},
                      std::string_view content_type = "application/json");

  const ServerAddress& server() const { return server_; }

 private:
  bool make_tls_context(std::string* error);  // once, at the first https connect
  bool connect(std::string* error);

  ServerAddress server_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  TlsTrust trust_;
  net::BlockingHttpConnection conn_;
  net::BlockingTls tls_;  // its ctx made by make_tls_context(), owned
  bool reused_ = false;   // conn_ has carried a request already
};

}  // namespace ringcast::cli
