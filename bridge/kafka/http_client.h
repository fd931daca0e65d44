// A small blocking HTTP/1.1 client for the bridge's calls to the daemon's API: one keep-alive
// connection over plain TCP, a connect timeout and a whole-request deadline, Content-Length and
// chunked answers. The bridge is its own process without BoringSSL (docs/operations.md §6, "Kafka
// bridge"), so it cannot use net/blocking_http. Invariant: post() never throws and never retries
// on its own beyond re-opening a kept-alive connection the server had closed before answering;
// retries are the bridge's, with backoff (SPEC R12.3: one retry owner).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "bridge/kafka/config.h"

namespace ringcast::kafka_bridge {

struct HttpAnswer {
  int status = 0;     // 0: no answer; `error` says why (refused, timeout, reset, malformed)
  std::string error;  // for the log; never holds request bytes
  std::string body;
};

class HttpClient {
 public:
  static constexpr size_t kMaxHeaderBytes = 64 << 10;
  static constexpr size_t kMaxBodyBytes = 256u << 20;

  HttpClient(ApiUrl url, Millis connect_timeout, Millis request_timeout);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // POST url.prefix + path with `Authorization: Bearer <token>`.
  HttpAnswer post(std::string_view path, std::string_view content_type, std::string_view body,
                  std::string_view token);
  void close();

 private:
  using Clock = std::chrono::steady_clock;
  bool open(Clock::time_point deadline, std::string& error);
  HttpAnswer exchange(const std::string& head, std::string_view body, Clock::time_point deadline,
                      bool& sent_nothing_answered);

  ApiUrl url_;
  Millis connect_timeout_;
  Millis request_timeout_;
  int fd_ = -1;
  std::string buf_;  // bytes read past the last answer (none with a well-behaved server)
};

}  // namespace ringcast::kafka_bridge
