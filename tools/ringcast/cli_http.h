// The CLI's HTTP/1.1 client: blocking sockets, one keep-alive connection, llhttp for responses,
// Bearer auth. Plain HTTP only: the CLI talks to a local daemon (or one the operator names).
// Invariant: every wait is bounded by the timeout; a stale keep-alive connection is retried
// once on a fresh one only when the server provably read nothing of the request.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::cli {

struct ServerAddress {
  std::string host;  // as given (IP literal or name), without brackets
  uint16_t port = 8080;
  std::string authority() const;  // "host:port", brackets around IPv6
};

// "127.0.0.1:8080", "localhost:9000", "[::1]:8080", "http://host:port[/]". An https:// URL, a
// missing port or junk → nullopt with `error` set.
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
  HttpClient(ServerAddress server, std::string token,
             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpOutcome request(std::string_view method, std::string_view target, std::string_view body = {},
                      std::string_view content_type = "application/json");

  const ServerAddress& server() const { return server_; }

 private:
  bool connect_socket(std::string* error);
  void close_socket();
  // One attempt on the current connection. `stale`: the peer closed or reset it before any
  // answer byte (a keep-alive connection it had already given up).
  HttpOutcome exchange(const std::string& request, bool* stale);

  ServerAddress server_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  bool reused_ = false;
};

}  // namespace ringcast::cli
