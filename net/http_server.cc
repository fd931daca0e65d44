#include "net/http_server.h"

#include <pthread.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <unordered_set>

#include "core/check.h"
#include "net/http_request_parser.h"
#include "net/json_writer.h"

namespace ringcast::net {

// ---------------------------------------------------------------------------------------------
// Requests and responses

std::string_view HttpRequest::path() const {
  std::string_view t = target;
  size_t q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

std::string_view HttpRequest::query() const {
  std::string_view t = target;
  size_t q = t.find('?');
  return q == std::string_view::npos ? std::string_view() : t.substr(q + 1);
}

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

HttpResponse HttpResponse::error(uint16_t status, std::string_view code, std::string_view message,
                                 std::string_view field) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.field("code", code).field("message", message);
  if (!field.empty()) w.field("field", field);
  w.end_object().end_object();
  return json(status, w.take());
}

HttpResponse HttpResponse::json(uint16_t status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

const char* http_reason(uint16_t status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

// ---------------------------------------------------------------------------------------------
// Responder

namespace {
class FunctionSlot final : public detail::ResponseSlot {
 public:
  explicit FunctionSlot(std::function<void(HttpResponse)> fn) : fn_(std::move(fn)) {}
  void fulfil(HttpResponse&& r) override {
    auto fn = std::move(fn_);
    delete this;
    fn(std::move(r));
  }

 private:
  ~FunctionSlot() = default;
  std::function<void(HttpResponse)> fn_;
};
}  // namespace

Responder& Responder::operator=(Responder&& o) noexcept {
  if (this != &o) {
    if (slot_) send(HttpResponse::error(500, "internal", "response replaced"));
    slot_ = o.slot_;
    o.slot_ = nullptr;
  }
  return *this;
}

Responder::~Responder() {
  if (slot_) send(HttpResponse::error(500, "internal", "the handler did not answer"));
}

void Responder::send(HttpResponse response) {
  RC_CHECK(slot_ && "Responder::send called twice or on an empty responder");
  if (!slot_) return;
  detail::ResponseSlot* s = slot_;
  slot_ = nullptr;
  s->fulfil(std::move(response));
}

Responder Responder::from_function(std::function<void(HttpResponse)> fn) {
  return Responder(new FunctionSlot(std::move(fn)));
}

// ---------------------------------------------------------------------------------------------
// Server internals

namespace {

// Shared between the server and every slot a Responder may still hold, so a late answer from
// another thread never touches a server (or loop) that is gone.
struct Gate {
  std::mutex mu;
  Loop* loop = nullptr;  // guarded by mu; null once the server is destroyed
  std::thread::id loop_thread;
  bool server_alive = false;  // loop thread only
};

class Connection;

// One request's place in its connection's response queue. Owned by the Responder until
// fulfilled, then by the connection (or by nobody if orphaned: it deletes itself).
class PendingResponse final : public detail::ResponseSlot, public Task {
 public:
  enum class State : uint8_t { kWaiting, kPosted, kReady };
  PendingResponse(std::shared_ptr<Gate> gate, Connection* conn)
      : gate_(std::move(gate)), conn(conn) {}

  void fulfil(HttpResponse&& r) override {
    response = std::move(r);
    std::unique_lock lock(gate_->mu);
    if (gate_->loop == nullptr) {
      lock.unlock();
      delete this;
      return;
    }
    state.store(State::kPosted, std::memory_order_release);
    if (std::this_thread::get_id() == gate_->loop_thread) {
      gate_->loop->defer(this);
    } else {
      gate_->loop->post(this);
    }
  }

  void run() override;  // on the loop thread

  std::shared_ptr<Gate> gate_;
  Connection* conn;  // loop thread; null when the connection is gone
  HttpResponse response;
  std::atomic<State> state{State::kWaiting};
  bool head = false;       // HEAD request: no body bytes
  bool keep_alive = true;  // the request allows another one after it
  bool http10 = false;
};

// Releases a slot the connection no longer wants: ready ones are freed, others are orphaned
// (they free themselves when answered).
void release_slot(PendingResponse* s) {
  if (s->state.load(std::memory_order_acquire) == PendingResponse::State::kReady) {
    delete s;
  } else {
    s->conn = nullptr;
  }
}

std::string http_date(WallTime now) {
  time_t t = static_cast<time_t>(now.ms() / 1000);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[64];
  size_t n = strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

}  // namespace

class detail::HttpServerCore {
 public:
  HttpServerCore(Loop& loop, HttpHandler& handler, HttpServerOptions options)
      : loop_(loop),
        handler_(handler),
        options_(std::move(options)),
        gate_(std::make_shared<Gate>()) {}
  ~HttpServerCore();

  Result<void> start(uint16_t* port);
  void stop(Duration grace, std::function<void()> done);
  void on_connection_destroyed(Connection* c);
  void maybe_finish_stop();
  const std::string& date();

  Loop& loop_;
  HttpHandler& handler_;
  HttpServerOptions options_;
  std::shared_ptr<Gate> gate_;
  HttpServerStats stats_;
  std::unordered_set<Connection*> connections_;
  // Open connections per client address (max_connections_per_ip); an entry goes at 0.
  std::map<std::pair<IpAddress::Family, std::array<uint8_t, 16>>, uint32_t> per_ip_;
  void release_ip(const IpAddress& ip);
  SSL_CTX* tls_ctx_ = nullptr;  // set when the listener serves TLS

 private:
  void arm_accept();
  void on_accept(int res);

  struct AcceptOp final : IoOp {
    explicit AcceptOp(HttpServerCore* s) : s(s) {}
    void complete(int res, uint32_t) override { s->on_accept(res); }
    HttpServerCore* s;
  };
  struct RetryTimer final : Timer {
    explicit RetryTimer(HttpServerCore* s) : s(s) {}
    void on_timer() override { s->arm_accept(); }
    HttpServerCore* s;
  };
  struct GraceTimer final : Timer {
    explicit GraceTimer(HttpServerCore* s) : s(s) {}
    void on_timer() override;
    HttpServerCore* s;
  };

  int listen_fd_ = -1;
  AcceptOp accept_op_{this};
  RetryTimer retry_timer_{this};
  GraceTimer grace_timer_{this};
  bool accept_in_flight_ = false;
  bool accept_paused_ = false;  // at max_connections
  bool stopping_ = false;
  bool stop_done_ = false;
  std::function<void()> stop_callback_;
  int64_t date_second_ = -1;
  std::string date_;
};

namespace {

class Connection final : RequestParser::Sink {
 public:
  Connection(detail::HttpServerCore& server, int fd, IpAddress peer)
      : server_(server),
        peer_(peer),
        fd_(fd),
        parser_(*this,
                RequestLimits{server.options_.max_header_bytes, server.options_.max_headers}) {
    rbuf_.resize(server_.options_.recv_buffer_bytes);
    last_activity_ = server_.loop_.now();
  }
  const IpAddress& peer() const { return peer_; }
  ~Connection() {
    RC_CHECK(ops_ == 0);
    server_.loop_.disarm(&timer_);
    if (ssl_ != nullptr) SSL_free(ssl_);  // and its BIOs
    if (fd_ >= 0) ::close(fd_);
  }

  void start() {
    if (server_.tls_ctx_ != nullptr && !start_tls()) {
      close_now();
      return finish_entry();
    }
    server_.loop_.arm_after(&timer_, server_.options_.idle_timeout);
    arm_recv();
    finish_entry();
  }

  // Server is stopping: finish what is queued, take no new request after the current one.
  void drain() {
    draining_ = true;
    if (idle()) {
      close_now();
    }
    finish_entry();
  }

  void force_close() {
    close_now();
    finish_entry();
  }

  // TLS: the socket carries ciphertext, memory BIOs turn it into the plaintext the parser reads
  // and back (the loop keeps doing every socket I/O).
  bool start_tls() {
    ssl_ = SSL_new(server_.tls_ctx_);
    if (ssl_ == nullptr) return false;
    BIO* rbio = BIO_new(BIO_s_mem());
    BIO* wbio = BIO_new(BIO_s_mem());
    if (rbio == nullptr || wbio == nullptr) {
      if (rbio) BIO_free(rbio);
      if (wbio) BIO_free(wbio);
      return false;
    }
    BIO_set_mem_eof_return(rbio, -1);  // empty = "retry", not EOF
    SSL_set_bio(ssl_, rbio, wbio);
    SSL_set_accept_state(ssl_);
    rbio_ = rbio;
    wbio_ = wbio;
    return true;
  }

  // Ciphertext from the socket: decrypts what it can and parses it. False on a TLS error.
  bool tls_in(const char* data, size_t len) {
    if (BIO_write(rbio_, data, static_cast<int>(len)) != static_cast<int>(len)) return false;
    char plain[16384];
    for (;;) {
      const int n = SSL_read(ssl_, plain, sizeof plain);
      if (n > 0) {
        if (no_more_requests_) continue;  // after a last request: ignored, like plain bytes
        if (paused_) {
          pending_.append(plain, static_cast<size_t>(n));
        } else {
          feed(plain, static_cast<size_t>(n));
        }
        continue;
      }
      const int err = SSL_get_error(ssl_, n);
      ERR_clear_error();
      if (err == SSL_ERROR_WANT_READ) return true;  // the handshake or a record goes on
      if (err == SSL_ERROR_ZERO_RETURN) {           // close_notify: no more requests
        no_more_requests_ = true;
        return true;
      }
      return false;
    }
  }

  bool has_output() const { return !out_.empty() || (ssl_ != nullptr && BIO_pending(wbio_) > 0); }

  // Moves what is to be sent into sending_ (encrypted under TLS); false when nothing is.
  bool take_for_send() {
    if (ssl_ == nullptr) {
      if (out_.empty()) return false;
      sending_.swap(out_);
      out_.clear();
      return true;
    }
    if (!out_.empty()) {
      if (SSL_write(ssl_, out_.data(), static_cast<int>(out_.size())) <= 0) {
        ERR_clear_error();
        close_now();
        return false;
      }
      out_.clear();
    }
    const size_t n = BIO_pending(wbio_);
    if (n == 0) return false;
    sending_.resize(n);
    BIO_read(wbio_, sending_.data(), static_cast<int>(n));
    return true;
  }

  // A queued slot got its response (from PendingResponse::run).
  void on_slot_ready() {
    flush();
    arm_recv();
    finish_entry();
  }

  // --- RequestParser::Sink --------------------------------------------------------------------
  void on_request_begin() override { request_started_ = server_.loop_.now(); }
  size_t body_limit(const HttpRequest& head) override {
    return server_.handler_.max_body_bytes(head);
  }
  void on_head(const HttpRequest& head) override {
    const std::string* expect = head.header("expect");
    if (expect && strcasecmp(expect->c_str(), "100-continue") == 0 && queue_.empty() &&
        out_.empty() && !send_in_flight_) {
      out_ += "HTTP/1.1 100 Continue\r\n\r\n";
      want_flush_ = true;
    }
  }
  bool on_request(HttpRequest&& request, const RequestParser::RequestInfo& info) override {
    auto* slot = new PendingResponse(server_.gate_, this);
    slot->head = request.method == "HEAD";
    slot->keep_alive = info.keep_alive && !draining_;
    slot->http10 = info.http10;
    queue_.push_back(slot);
    server_.stats_.requests++;
    const bool more = slot->keep_alive;
    request.peer = peer_;
    request.tls = ssl_ != nullptr;
    server_.handler_.handle(std::move(request), Responder(slot));
    if (!more) {
      no_more_requests_ = true;
      return false;  // bytes after a last request are ignored
    }
    return queue_.size() < server_.options_.max_pipelined;
  }

  bool dead() const { return closed_; }

 private:
  friend class detail::HttpServerCore;

  struct RecvOp final : IoOp {
    explicit RecvOp(Connection* c) : c(c) {}
    void complete(int res, uint32_t) override { c->on_recv(res); }
    Connection* c;
  };
  struct SendOp final : IoOp {
    explicit SendOp(Connection* c) : c(c) {}
    void complete(int res, uint32_t) override { c->on_send(res); }
    Connection* c;
  };
  struct IdleTimer final : Timer {
    explicit IdleTimer(Connection* c) : c(c) {}
    void on_timer() override {
      c->on_timer();
      c->finish_entry();
    }
    Connection* c;
  };

  // Ends request parsing on this connection with `r` as the last response.
  void fail_request(HttpResponse r) {
    if (r.status == 413 || r.status == 431) {
      server_.stats_.too_large++;
    }
    r.close = true;
    auto* slot = new PendingResponse(server_.gate_, this);
    slot->response = std::move(r);
    slot->state.store(PendingResponse::State::kReady, std::memory_order_relaxed);
    slot->keep_alive = false;
    queue_.push_back(slot);
    no_more_requests_ = true;
  }

  bool in_message() const { return parser_.in_message(); }

  bool idle() const {
    return queue_.empty() && !in_message() && !send_in_flight_ && out_.empty() && !lingering_;
  }

  void arm_recv() {
    if (closed_ || recv_in_flight_) return;
    if (!lingering_) {
      if (no_more_requests_ || paused_ || out_.size() > kMaxBufferedOutput) return;
      if (draining_ && !in_message()) return;
    }
    if (!server_.loop_.recv(&recv_op_, fd_, rbuf_.data(), rbuf_.size())) {
      close_now();
      return;
    }
    recv_in_flight_ = true;
    ops_++;
  }

  void on_recv(int res) {
    recv_in_flight_ = false;
    ops_--;
    if (closed_) return finish_entry();
    if (res <= 0) {
      // EOF or error. A linger ends here; otherwise the peer is gone or half-closed: answer
      // what is queued (a half-close may still read), accept nothing more.
      if (res < 0 || lingering_ || (queue_.empty() && out_.empty() && !send_in_flight_)) {
        close_now();
      } else {
        no_more_requests_ = true;
      }
      return finish_entry();
    }
    last_activity_ = server_.loop_.now();
    if (lingering_) {
      arm_recv();  // discard
      return finish_entry();
    }
    if (ssl_ != nullptr) {
      if (!tls_in(rbuf_.data(), static_cast<size_t>(res))) {
        close_now();
        return finish_entry();
      }
    } else {
      feed(rbuf_.data(), static_cast<size_t>(res));
    }
    flush();
    arm_recv();
    finish_entry();
  }

  // Parses `len` bytes at `data`; remembers the unparsed rest when the parser pauses.
  void feed(const char* data, size_t len) {
    const RequestParser::Feed r = parser_.feed(data, len);
    switch (r.status) {
      case RequestParser::Status::kNeedMore:
        return;
      case RequestParser::Status::kPaused:
        if (!no_more_requests_) {  // else: the last request; what follows is ignored
          paused_ = true;
          pending_.assign(data + r.consumed, len - r.consumed);
        }
        return;
      case RequestParser::Status::kUpgrade:
        no_more_requests_ = true;  // the request was answered normally; no protocol switch
        return;
      case RequestParser::Status::kFailed: {
        HttpResponse e = parser_.error();
        if (e.status != 413 && e.status != 431) server_.stats_.parse_errors++;
        fail_request(std::move(e));
        return;
      }
    }
  }

  void maybe_resume_parsing() {
    if (!paused_ || closed_ || queue_.size() >= server_.options_.max_pipelined) return;
    paused_ = false;
    parser_.resume();
    std::string rest = std::move(pending_);
    pending_.clear();
    if (!rest.empty()) feed(rest.data(), rest.size());
  }

  void flush() {
    if (closed_) return;
    while (!queue_.empty() && queue_.front()->state.load(std::memory_order_acquire) ==
                                  PendingResponse::State::kReady) {
      PendingResponse* s = queue_.front();
      queue_.pop_front();
      // While draining, the last answer we owe says so (the client reconnects elsewhere).
      bool close =
          s->response.close || !s->keep_alive || (draining_ && queue_.empty() && !in_message());
      serialize(*s, close);
      delete s;
      server_.stats_.responses++;
      if (close) {
        close_after_write_ = true;
        no_more_requests_ = true;
        for (PendingResponse* rest : queue_) release_slot(rest);
        queue_.clear();
        break;
      }
    }
    maybe_resume_parsing();
    if (closed_) return;
    // Parsing may have queued more (and answered synchronously-ready ones next turn).
    if (!send_in_flight_ && has_output()) {
      sent_ = 0;
      if (take_for_send()) submit_send();
    } else if (!send_in_flight_ && !has_output() && close_after_write_ && queue_.empty()) {
      begin_linger();
    }
    want_flush_ = false;
  }

  void serialize(const PendingResponse& s, bool close) {
    const HttpResponse& r = s.response;
    std::string& o = out_;
    o += "HTTP/1.1 ";
    o += std::to_string(r.status);
    o += ' ';
    o += http_reason(r.status);
    o += "\r\n";
    if (!r.content_type.empty()) {
      o += "Content-Type: ";
      o += r.content_type;
      o += "\r\n";
    }
    o += "Content-Length: ";
    o += std::to_string(r.body.size());
    o += "\r\n";
    for (const auto& h : r.headers) {
      o += h.name;
      o += ": ";
      o += h.value;
      o += "\r\n";
    }
    if (close) {
      o += "Connection: close\r\n";
    } else if (s.http10) {
      o += "Connection: keep-alive\r\n";
    }
    o += "Date: ";
    o += server_.date();
    o += "\r\n\r\n";
    if (!s.head) o += r.body;
  }

  void submit_send() {
    if (!server_.loop_.send(&send_op_, fd_, sending_.data() + sent_, sending_.size() - sent_)) {
      close_now();
      return;
    }
    send_in_flight_ = true;
    ops_++;
  }

  void on_send(int res) {
    send_in_flight_ = false;
    ops_--;
    if (closed_) return finish_entry();
    if (res < 0) {
      close_now();
      return finish_entry();
    }
    last_activity_ = server_.loop_.now();
    sent_ += static_cast<size_t>(res);
    if (sent_ < sending_.size()) {
      submit_send();
      return finish_entry();
    }
    sending_.clear();
    sent_ = 0;
    if (has_output()) {
      if (take_for_send()) submit_send();
      if (closed_) return finish_entry();
    } else if (close_after_write_ && queue_.empty()) {
      begin_linger();
    } else if (draining_ && idle()) {
      close_now();
    } else {
      arm_recv();
    }
    finish_entry();
  }

  // After a last response: stop sending, read and drop what the peer still sends (so our
  // response is not destroyed by a RST), until EOF or the linger time.
  void begin_linger() {
    if (lingering_ || closed_) return;
    lingering_ = true;
    ::shutdown(fd_, SHUT_WR);
    linger_until_ = server_.loop_.now() + server_.options_.linger;
    server_.loop_.arm(&timer_, linger_until_);
    arm_recv();
  }

  void on_timer() {
    if (closed_) return;
    MonoTime now = server_.loop_.now();
    if (lingering_) {
      if (now >= linger_until_) {
        close_now();
      } else {
        server_.loop_.arm(&timer_, linger_until_);
      }
      return;
    }
    const Duration idle_limit = server_.options_.idle_timeout;
    if (!queue_.empty() || send_in_flight_ || !out_.empty()) {
      // A handler or the peer's reading is in progress; that is not idleness.
      server_.loop_.arm_after(&timer_, idle_limit);
      return;
    }
    MonoTime since = in_message() ? request_started_ : last_activity_;
    if (now - since >= idle_limit) {
      server_.stats_.idle_closed++;
      close_now();
      return;
    }
    server_.loop_.arm(&timer_, since + idle_limit);
  }

  void close_now() {
    if (closed_) return;
    closed_ = true;
    server_.loop_.disarm(&timer_);
    for (PendingResponse* s : queue_) release_slot(s);
    queue_.clear();
    if (ops_ > 0) server_.loop_.cancel_fd(fd_);
  }

  // Called last in every entry point (completion, timer, task): frees a closed connection
  // once no op of it is in flight. Nothing may touch `this` afterwards.
  void finish_entry() {
    if (closed_ && ops_ == 0) {
      server_.on_connection_destroyed(this);
    } else if (want_flush_ && !closed_) {
      flush();
    }
  }

  static constexpr size_t kMaxBufferedOutput = 4 * 1024 * 1024;

  detail::HttpServerCore& server_;
  const IpAddress peer_;
  SSL* ssl_ = nullptr;   // TLS: owns the two memory BIOs below
  BIO* rbio_ = nullptr;  // socket → SSL
  BIO* wbio_ = nullptr;  // SSL → socket
  int fd_;
  RequestParser parser_;
  std::vector<char> rbuf_;
  std::string pending_;  // parsed-later bytes while the parser is paused
  RecvOp recv_op_{this};
  SendOp send_op_{this};
  IdleTimer timer_{this};
  int ops_ = 0;
  bool recv_in_flight_ = false;
  bool send_in_flight_ = false;
  bool paused_ = false;
  bool no_more_requests_ = false;
  bool close_after_write_ = false;
  bool lingering_ = false;
  bool draining_ = false;
  bool closed_ = false;
  bool want_flush_ = false;
  std::deque<PendingResponse*> queue_;
  std::string out_;
  std::string sending_;
  size_t sent_ = 0;
  MonoTime last_activity_;
  MonoTime request_started_;
  MonoTime linger_until_;
};

}  // namespace

void PendingResponse::run() {
  if (!gate_->server_alive || conn == nullptr) {
    delete this;
    return;
  }
  state.store(State::kReady, std::memory_order_release);
  conn->on_slot_ready();
}

detail::HttpServerCore::~HttpServerCore() {
  {
    std::lock_guard lock(gate_->mu);
    gate_->loop = nullptr;
  }
  gate_->server_alive = false;
  loop_.disarm(&retry_timer_);
  loop_.disarm(&grace_timer_);
  // Ops still in flight are cancelled; their completions must not reach freed memory, so
  // the loop is asked to cancel and the connections are freed only after the ring forgets
  // them. A loop that keeps running after this would deliver -ECANCELED completions to
  // freed ops: the server is therefore destroyed only after stop() finished (or with the
  // loop itself). Connections left here are closed by fd.
  for (Connection* c : connections_) {
    c->closed_ = true;
    for (PendingResponse* s : c->queue_) release_slot(s);
    c->queue_.clear();
    c->ops_ = 0;
    delete c;
  }
  connections_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (tls_ctx_ != nullptr) SSL_CTX_free(tls_ctx_);
}

Result<void> detail::HttpServerCore::start(uint16_t* port) {
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    auto tls_failed = [](const std::string& what) {
      ERR_clear_error();
      return make_error(Errc::kInvalidArgument, "TLS setup failed", nullptr,
                        what == "cert" ? "tls_cert" : "tls_key");
    };
    if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
      return make_error(Errc::kInvalidArgument, "TLS needs a certificate and a key", nullptr,
                        "tls_config");
    }
    tls_ctx_ = SSL_CTX_new(TLS_method());
    if (tls_ctx_ == nullptr) return tls_failed("cert");
    SSL_CTX_set_min_proto_version(tls_ctx_, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(tls_ctx_, options_.tls_cert_file.c_str()) != 1)
      return tls_failed("cert");
    if (SSL_CTX_use_PrivateKey_file(tls_ctx_, options_.tls_key_file.c_str(), SSL_FILETYPE_PEM) !=
            1 ||
        SSL_CTX_check_private_key(tls_ctx_) != 1)
      return tls_failed("key");
  }
  const bool v4 = options_.address.is_v4();
  int fd = ::socket(v4 ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    Error e = make_error(Errc::kIo, "socket() failed");
    e.sys_errno = errno;
    return e;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len;
  if (v4) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(options_.port);
    std::memcpy(&sa->sin_addr, options_.address.bytes.data(), 4);
    len = sizeof(sockaddr_in);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(options_.port);
    std::memcpy(&sa->sin6_addr, options_.address.bytes.data(), 16);
    len = sizeof(sockaddr_in6);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    Error e = make_error(Errc::kIo, "bind() failed: address in use or not available", "listen");
    e.sys_errno = errno;
    ::close(fd);
    return e;
  }
  if (::listen(fd, options_.backlog) != 0) {
    Error e = make_error(Errc::kIo, "listen() failed", "listen");
    e.sys_errno = errno;
    ::close(fd);
    return e;
  }
  socklen_t slen = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &slen);
  *port = ntohs(v4 ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                   : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  listen_fd_ = fd;
  {
    std::lock_guard lock(gate_->mu);
    gate_->loop = &loop_;
    gate_->loop_thread = std::this_thread::get_id();
  }
  gate_->server_alive = true;
  arm_accept();
  return ok();
}

void detail::HttpServerCore::arm_accept() {
  if (stopping_ || accept_in_flight_ || listen_fd_ < 0) return;
  if (connections_.size() >= options_.max_connections) {
    accept_paused_ = true;
    return;
  }
  accept_paused_ = false;
  if (!loop_.accept(&accept_op_, listen_fd_, nullptr, nullptr)) {
    loop_.arm_after(&retry_timer_, milliseconds(10));
    return;
  }
  accept_in_flight_ = true;
}

void detail::HttpServerCore::on_accept(int res) {
  accept_in_flight_ = false;
  if (stopping_) {
    if (res >= 0) ::close(res);
    if (listen_fd_ >= 0) {
      ::close(listen_fd_);
      listen_fd_ = -1;
    }
    maybe_finish_stop();
    return;
  }
  if (res < 0) {
    // EMFILE, ENFILE, ENOBUFS, ECONNABORTED ...: try again shortly, without a hot loop.
    loop_.arm_after(&retry_timer_, res == -ECONNABORTED ? Duration(0) : milliseconds(50));
    return;
  }
  IpAddress peer;
  sockaddr_storage ss{};
  socklen_t slen = sizeof ss;
  if (::getpeername(res, reinterpret_cast<sockaddr*>(&ss), &slen) == 0) {
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      std::memcpy(peer.bytes.data(), &a->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      std::array<uint8_t, 16> b{};
      std::memcpy(b.data(), &a->sin6_addr, 16);
      static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      if (std::memcmp(b.data(), kMapped, 12) == 0) {
        peer = IpAddress::v4(b[12], b[13], b[14], b[15]);
      } else {
        peer = IpAddress::v6(b);
      }
    }
  }
  if (options_.max_connections_per_ip > 0) {
    uint32_t& open = per_ip_[{peer.family, peer.bytes}];
    if (open >= options_.max_connections_per_ip) {
      ::close(res);
      stats_.refused_per_ip++;
      arm_accept();
      return;
    }
    ++open;
  }
  int one = 1;
  ::setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto* c = new Connection(*this, res, peer);
  connections_.insert(c);
  stats_.connections_accepted++;
  stats_.connections_open = connections_.size();
  arm_accept();
  c->start();
}

void detail::HttpServerCore::release_ip(const IpAddress& ip) {
  if (options_.max_connections_per_ip == 0) return;
  auto it = per_ip_.find({ip.family, ip.bytes});
  if (it != per_ip_.end() && --it->second == 0) per_ip_.erase(it);
}

void detail::HttpServerCore::on_connection_destroyed(Connection* c) {
  release_ip(c->peer());
  connections_.erase(c);
  delete c;
  stats_.connections_open = connections_.size();
  if (accept_paused_) arm_accept();
  maybe_finish_stop();
}

void detail::HttpServerCore::stop(Duration grace, std::function<void()> done) {
  if (stopping_) {
    if (done) {
      if (stop_done_) {
        loop_.post(std::move(done));
      } else {
        auto prev = std::move(stop_callback_);
        stop_callback_ = [prev = std::move(prev), done = std::move(done)] {
          if (prev) prev();
          done();
        };
      }
    }
    return;
  }
  stopping_ = true;
  stop_callback_ = std::move(done);
  loop_.disarm(&retry_timer_);
  if (accept_in_flight_) {
    loop_.cancel(&accept_op_);
  } else if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  loop_.arm_after(&grace_timer_, grace);
  std::vector<Connection*> all(connections_.begin(), connections_.end());
  for (Connection* c : all) c->drain();  // may destroy c
  maybe_finish_stop();
}

void detail::HttpServerCore::GraceTimer::on_timer() {
  std::vector<Connection*> all(s->connections_.begin(), s->connections_.end());
  for (Connection* c : all) c->force_close();
}

void detail::HttpServerCore::maybe_finish_stop() {
  if (!stopping_ || stop_done_ || accept_in_flight_ || !connections_.empty()) return;
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  stop_done_ = true;
  loop_.disarm(&grace_timer_);
  if (stop_callback_) {
    // Not inline: the caller may be deep inside a connection's completion.
    loop_.post(std::move(stop_callback_));
    stop_callback_ = nullptr;
  }
}

const std::string& detail::HttpServerCore::date() {
  WallTime now = loop_.wall_now();
  int64_t second = now.ms() / 1000;
  if (second != date_second_) {
    date_second_ = second;
    date_ = http_date(now);
  }
  return date_;
}

// ---------------------------------------------------------------------------------------------

HttpServer::HttpServer(Loop& loop, HttpHandler& handler, HttpServerOptions options)
    : impl_(std::make_unique<detail::HttpServerCore>(loop, handler, std::move(options))) {}

HttpServer::~HttpServer() = default;

Result<void> HttpServer::start() {
  return impl_->start(&port_);
}

void HttpServer::stop(Duration grace, std::function<void()> done) {
  impl_->stop(grace, std::move(done));
}

const HttpServerStats& HttpServer::stats() const {
  return impl_->stats_;
}

// ---------------------------------------------------------------------------------------------

HttpServerThread::HttpServerThread(HttpHandler& handler, HttpServerOptions options,
                                   LoopOptions loop_options)
    : handler_(handler), options_(std::move(options)), loop_options_(loop_options) {}

HttpServerThread::~HttpServerThread() {
  stop(Duration(0));
}

Result<void> HttpServerThread::start() {
  if (running_) return ok();
  std::promise<Result<void>> started;
  auto started_future = started.get_future();
  // The loop is created and driven on the server thread: the ring and everything it completes
  // belong to that thread alone.
  thread_ = std::thread([this, started = std::move(started)]() mutable {
    ::pthread_setname_np(::pthread_self(), "rc-http");
    auto loop = Loop::create(loop_options_);
    if (!loop) {
      started.set_value(loop.error());
      return;
    }
    loop_ = std::move(loop).value();
    server_ = std::make_unique<HttpServer>(*loop_, handler_, options_);
    loop_->run_once(Duration(0));  // binds the ring to this thread
    Result<void> r = server_->start();
    if (!r) {
      server_.reset();
      loop_.reset();
      started.set_value(r);
      return;
    }
    port_ = server_->port();
    started.set_value(ok());
    loop_->run();  // until the stop callback below: then no op of the server is in flight
    server_.reset();
    // The loop itself is destroyed by stop() after the join: the thread that posted the stop
    // request may still be inside Loop::post()/wake() when this thread gets here.
  });
  Result<void> r = started_future.get();
  if (!r) {
    thread_.join();
    return r;
  }
  running_ = true;
  return ok();
}

void HttpServerThread::stop(Duration grace) {
  if (!running_) return;
  running_ = false;
  Loop* loop = loop_.get();
  HttpServer* server = server_.get();
  loop->post([loop, server, grace] { server->stop(grace, [loop] { loop->stop(); }); });
  thread_.join();
  loop_.reset();
}

}  // namespace ringcast::net
