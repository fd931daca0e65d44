// A small scriptable HTTP/1.1 (+TLS) server for the transport tests: one thread per
// connection, blocking sockets with short polls so it always stops promptly. Loopback only.
// Invariant: stop() (or the destructor) returns only after every thread has exited.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringcast::test::net_server {

struct HttpRequest {
  std::string method, target, version;
  std::map<std::string, std::string> headers;  // lower-case names; repeated: joined by ", "
  std::string body;
  std::string head;  // the raw request head (for exact-bytes checks)
  int connection_index = 0;
  int request_on_connection = 0;  // 0 for the first request of a connection
};

struct HttpAction {
  enum Kind {
    kRespond,  // send `response` (then keep the connection unless close_after)
    kHang,     // read the request, never answer (until the client or stop closes)
    kClose,    // close without answering (FIN)
    kReset,    // close with RST
    kTrickle,  // send `response` one byte per `interval`
    kEndless,  // send `response` (a chunked head) then chunks forever
  };
  Kind kind = kRespond;
  std::string response;
  bool close_after = false;
  std::chrono::milliseconds interval{0};
};

HttpAction respond(int status, const std::string& body = "ok",
                   const std::string& extra_headers = "");

struct ServerOptions {
  std::string bind = "127.0.0.1";         // or "::1", "127.0.0.2"
  std::string tls_cert_pem, tls_key_pem;  // both set: TLS
  bool stall_handshake = false;           // accept TCP, never speak (TLS handshake stall)
  bool never_read = false;                // accept and hold the connection, read nothing
};

class TestHttpServer {
 public:
  using Handler = std::function<HttpAction(const HttpRequest&)>;
  explicit TestHttpServer(Handler handler, ServerOptions options = {});
  ~TestHttpServer();
  void stop();

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }
  std::vector<HttpRequest> received();  // copies
  std::string url(const std::string& path = "/hook", const std::string& host = "") const;

 private:
  void accept_loop();
  void serve(int fd, int index);

  Handler handler_;
  ServerOptions options_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  void* ssl_ctx_ = nullptr;  // SSL_CTX*
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::vector<HttpRequest> received_;
  std::vector<std::thread> threads_;
  std::vector<int> fds_;
  std::thread acceptor_;
};

}  // namespace ringcast::test::net_server
