// A small HTTP/1.1 receiver on loopback for the tests, in the test process (the OTLP collector of
// the tracing tests, docs/tracing.md): it records every request (method, target, headers, body)
// and answers each with the next status of its script, then 200 `{}`, one request per connection
// (`Connection: close`). Bodies need a Content-Length (what ringcast's HttpTransport sends).
// Invariant: the destructor stops the listener and joins every thread it started.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace ringcast::test {

class HttpRecorder {
 public:
  struct Request {
    std::string method, target;
    std::vector<std::pair<std::string, std::string>> headers;  // as received, values trimmed
    std::string body;
    int status = 0;  // what it was answered
    // The first value of `name` (ASCII case-insensitive), or nullopt.
    std::optional<std::string> header(std::string_view name) const;
  };

  HttpRecorder();  // binds 127.0.0.1:0 and starts accepting; throws std::runtime_error
  ~HttpRecorder();
  HttpRecorder(const HttpRecorder&) = delete;
  HttpRecorder& operator=(const HttpRecorder&) = delete;

  uint16_t port() const { return port_; }
  std::string url(const std::string& path) const;  // "http://127.0.0.1:<port><path>"
  // The next requests are answered with these statuses, in order; then 200 again.
  void answer_next(std::vector<int> statuses);
  std::vector<Request> requests() const;
  size_t count() const;

 private:
  void accept_loop();
  void serve(int fd);

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::deque<int> script_;
  std::vector<Request> requests_;
  std::vector<std::thread> workers_;  // guarded by mu_
  std::thread acceptor_;
};

}  // namespace ringcast::test
