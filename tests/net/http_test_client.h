// A blocking HTTP/1.1 test client over a loopback socket: sends raw bytes, reads whole
// responses (llhttp), with a receive timeout so a test can never hang.
#pragma once

#include <arpa/inet.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringcast::test {

struct ClientResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  std::string body;

  const std::string* header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

class TestClient {
 public:
  explicit TestClient(uint16_t port, int timeout_ms = 5000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc;
    do {
      rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    } while (rc != 0 && errno == EINTR);
    connected_ = rc == 0;
    llhttp_settings_init(&settings_);
    settings_.on_message_begin = [](llhttp_t* p) {
      self(p)->cur_ = ClientResponse();
      return 0;
    };
    settings_.on_header_field = [](llhttp_t* p, const char* at, size_t n) {
      self(p)->field_.append(at, n);
      return 0;
    };
    settings_.on_header_value = [](llhttp_t* p, const char* at, size_t n) {
      self(p)->value_.append(at, n);
      return 0;
    };
    settings_.on_header_value_complete = [](llhttp_t* p) {
      auto* s = self(p);
      for (char& c : s->field_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      s->cur_.headers.emplace_back(std::move(s->field_), std::move(s->value_));
      s->field_.clear();
      s->value_.clear();
      return 0;
    };
    settings_.on_body = [](llhttp_t* p, const char* at, size_t n) {
      self(p)->cur_.body.append(at, n);
      return 0;
    };
    settings_.on_message_complete = [](llhttp_t* p) {
      auto* s = self(p);
      s->cur_.status = static_cast<int>(p->status_code);
      s->done_.push_back(std::move(s->cur_));
      return 0;
    };
    llhttp_init(&parser_, HTTP_RESPONSE, &settings_);
    parser_.data = this;
  }
  ~TestClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send_raw(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads until `n` responses are complete; fewer on EOF, error or timeout.
  std::vector<ClientResponse> read_responses(size_t n) {
    char buf[65536];
    while (done_.size() < n) {
      ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
      if (got < 0 && errno == EINTR) continue;  // signals from elsewhere in the process
      if (got <= 0) {
        eof_ = got == 0;
        if (got == 0) llhttp_finish(&parser_);
        break;
      }
      if (llhttp_execute(&parser_, buf, static_cast<size_t>(got)) != HPE_OK) {
        // 1xx responses are messages too; anything else is a client-side parse failure.
        if (llhttp_get_errno(&parser_) != HPE_PAUSED_UPGRADE) break;
      }
    }
    std::vector<ClientResponse> out;
    while (!done_.empty() && out.size() < n) {
      out.push_back(std::move(done_.front()));
      done_.pop_front();
    }
    return out;
  }

  ClientResponse read_one() {
    auto v = read_responses(1);
    return v.empty() ? ClientResponse() : std::move(v[0]);
  }

  // One request with a body; adds Host and Content-Length.
  ClientResponse request(std::string_view method, std::string_view target,
                         std::string_view body = {},
                         std::vector<std::pair<std::string, std::string>> headers = {}) {
    send_raw(format(method, target, body, headers));
    return read_one();
  }

  static std::string format(std::string_view method, std::string_view target, std::string_view body,
                            const std::vector<std::pair<std::string, std::string>>& headers) {
    std::string req;
    req.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: test\r\n");
    for (const auto& [k, v] : headers) req.append(k).append(": ").append(v).append("\r\n");
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
      req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    }
    req.append("\r\n").append(body);
    return req;
  }

  // True when the server closed the connection (reads EOF within the timeout).
  bool wait_eof() {
    char buf[4096];
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  static TestClient* self(llhttp_t* p) { return static_cast<TestClient*>(p->data); }
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  llhttp_settings_t settings_;
  llhttp_t parser_;
  ClientResponse cur_;
  std::string field_, value_;
  std::deque<ClientResponse> done_;
};

}  // namespace ringcast::test
