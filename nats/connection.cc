#include "nats/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <simdjson.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nats/nkey.h"
#include "net/loop.h"
#include "net/signing.h"
#include "net/tls.h"

namespace ringcast::nats {
namespace {

constexpr int kDestroyTurns = 2000;  // x 1 ms: how long ~Connection waits for the kernel

Error err(Errc code, const char* message, const char* reason, int sys_errno = 0) {
  Error e = make_error(code, message, nullptr, reason);
  e.sys_errno = sys_errno;
  return e;
}

bool is_ip_literal(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

}  // namespace

Result<std::unique_ptr<net::TlsClientContext>> make_tls_context(const TlsOptions& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return make_error(Errc::kInvalidArgument,
                      "nats: a TLS client certificate needs both tls_cert_file and tls_key_file",
                      tls.cert_file.empty() ? "tls_cert_file" : "tls_key_file");
  }
  net::TlsClientOptions o;
  if (!tls.ca_file.empty()) {
    o.ca_file.clear();  // a private CA: trust it alone, not the public web PKI
    o.extra_ca_file = tls.ca_file;
  }
  o.cert_file = tls.cert_file;
  o.key_file = tls.key_file;
  o.session_cache_max = 64;
  auto r = net::TlsClientContext::create(o);
  if (r.ok()) return r;
  Error e = r.error();
  const std::string_view f = e.field != nullptr ? e.field : "";
  if (f == "extra_ca_file" || f == "ca_file") {
    e.field = "tls_ca_file";
  } else if (f == "cert_file") {
    e.field = "tls_cert_file";
  } else if (f == "key_file") {
    e.field = "tls_key_file";
  }
  return e;
}

Result<ServerAddress> parse_server(std::string_view text) {
  auto bad = [] {
    return make_error(Errc::kInvalidArgument,
                      "nats: a server is a numeric host:port such as \"127.0.0.1:4222\"",
                      "servers");
  };
  for (std::string_view scheme : {"nats://", "tls://"}) {
    if (text.substr(0, scheme.size()) == scheme) text.remove_prefix(scheme.size());
  }
  ServerAddress a;
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad();
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad();
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p == 0 || p > 65535) return bad();
  a.host.assign(host);
  a.port = static_cast<uint16_t>(p);
  if (!is_ip_literal(a.host)) return bad();
  return a;
}

const char* conn_state_name(ConnState s) {
  switch (s) {
    case ConnState::kConnecting:
      return "connecting";
    case ConnState::kHandshaking:
      return "handshaking";
    case ConnState::kReady:
      return "ready";
    case ConnState::kBackoff:
      return "backoff";
    case ConnState::kClosed:
      return "closed";
  }
  return "unknown";
}

// One TCP connection's kernel-facing state. Detached (owner == nullptr) when the connection
// drops; it then lives on until its in-flight ops have completed, and frees itself.
struct Socket {
  enum Kind { kConnectOp, kSendOp, kRecvOp };
  struct Op final : net::IoOp {
    Socket* s;
    Kind kind;
    Op(Socket* sock, Kind k) : s(sock), kind(k) {}
    void complete(int res, uint32_t flags) override;
  };

  Socket(net::Loop* l, Connection::Impl* o) : loop(l), owner(o), closer(o) {}
  net::Loop* loop;
  Connection::Impl* owner;   // null once detached
  Connection::Impl* closer;  // counts us in its closing list; null if it went away first
  int fd = -1;
  int slot = -1;
  bool connect_pending = false;
  bool send_pending = false;
  bool recv_pending = false;
  Op connect_op{this, kConnectOp};
  Op send_op{this, kSendOp};
  Op recv_op{this, kRecvOp};
  std::unique_ptr<char[]> rbuf;  // what recv read (TLS: ciphertext)
  size_t rbuf_len = 0;
  std::unique_ptr<char[]> plain;  // TLS: the plaintext it decrypts to
  std::string out;                // bytes of the send in flight (and its unsent rest)
  size_t out_off = 0;
  std::unique_ptr<net::TlsStream> tls;

  bool ops_pending() const { return connect_pending || send_pending || recv_pending; }
  net::FileRef file() const { return slot >= 0 ? net::FileRef::slot(slot) : net::FileRef(fd); }
  void release() {
    if (slot >= 0) loop->unregister_fd(slot);
    if (fd >= 0) ::close(fd);
    delete this;
  }
};

struct Connection::Impl final : OpSink {
  struct TimerCall final : net::Timer {
    Impl* impl;
    void (Impl::*fn)();
    TimerCall(Impl* i, void (Impl::*f)()) : impl(i), fn(f) {}
    void on_timer() override { (impl->*fn)(); }
  };
  // A request from request() until its reply, deadline or the connection's drop. Its own
  // deadline timer.
  struct Request final : net::Timer {
    Impl* owner = nullptr;
    uint64_t token = 0;
    bool sent = false;
    std::string bytes;  // encoded while unsent
    ReplyCallback cb;
    void on_timer() override { owner->on_request_deadline(this); }
  };
  struct Sub {
    std::string subject;
    std::string queue;
    MsgHandler handler;
  };
  enum class Phase : uint8_t { kInfo, kTls, kPong, kReady };

  Impl(net::Loop& l, ConnectionOptions o)
      : loop(l),
        opt(std::move(o)),
        parser(opt.parser),
        rng(static_cast<uint32_t>(opt.jitter_seed)) {}
  ~Impl() override;

  net::Loop& loop;
  ConnectionOptions opt;
  std::vector<ServerAddress> servers;
  size_t server_at = 0;
  std::unique_ptr<net::TlsClientContext> tls;  // set iff opt.tls.enabled
  std::optional<NkeyUser> nkey;                // set iff opt.nkey_seed
  sockaddr_storage sa{};
  socklen_t sa_len = 0;
  ConnState state = ConnState::kConnecting;
  Phase phase = Phase::kInfo;
  ConnectionStats st;
  ServerInfo info;
  Parser parser;
  simdjson::dom::parser json;
  Socket* sock = nullptr;
  std::vector<Socket*> closing;
  std::string pending;  // plaintext written and not yet handed to the socket (or TLS)
  std::unordered_map<uint64_t, Sub> subs;
  uint64_t next_sid = 1;
  std::string inbox;  // "_INBOX.<random>": requests' replies come to "<inbox>.<token>"
  uint64_t inbox_sid = 0;
  uint64_t next_token = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests;
  std::deque<Request*> unsent;  // requests waiting for the connection, in order
  // One entry per PING written since the connection came up, in order: the caller's flush()
  // callback, or empty for a keepalive.
  std::deque<std::function<void(Result<void>)>> pongs;
  uint32_t pings_out = 0;
  uint32_t failures = 0;  // consecutive failed connects (backoff exponent)
  std::minstd_rand rng;
  std::vector<std::function<void()>> soon_calls;  // completions run next turn (STYLE 5)
  TimerCall soon{this, &Impl::on_soon};
  TimerCall connect_timer{this, &Impl::on_connect_timeout};
  TimerCall reconnect_timer{this, &Impl::on_reconnect};
  TimerCall ping_timer{this, &Impl::on_ping};

  // --- output
  void schedule_soon() {
    if (!soon.armed()) loop.arm(&soon, loop.now());
  }
  void on_soon() {
    if (!soon_calls.empty()) {
      auto calls = std::move(soon_calls);
      soon_calls.clear();
      for (auto& f : calls) f();
    }
    flush_out();
  }
  void later(std::function<void()> f) {
    soon_calls.push_back(std::move(f));
    schedule_soon();
  }
  void write(std::string_view bytes) {
    pending.append(bytes);
    schedule_soon();
  }
  // Hands what is pending to the socket (through TLS), unless a send is in flight (its
  // completion calls this again). Before CONNECT went out, nothing of `pending` goes.
  void flush_out() {
    Socket* s = sock;
    if (s == nullptr || s->send_pending) return;
    s->out.clear();
    s->out_off = 0;
    if (phase >= Phase::kPong && !pending.empty()) {
      if (s->tls) {
        if (s->tls->write(pending.data(), pending.size()) != net::TlsStream::Status::kOk) {
          drop(err(Errc::kUnavailable, "nats: TLS could not encrypt", kConnectionLost, EPROTO),
               tls_detail(s));
          return;
        }
        pending.clear();
      } else {
        s->out.swap(pending);
        pending.clear();
      }
    }
    if (s->tls) s->tls->take_output(s->out);
    if (s->out.empty()) return;
    submit_send();
  }
  void submit_send() {
    Socket* s = sock;
    if (!loop.send(&s->send_op, s->file(), s->out.data() + s->out_off,
                   s->out.size() - s->out_off)) {
      drop(err(Errc::kUnavailable, "nats: no io_uring capacity to send", kConnectionLost, ENOBUFS));
      return;
    }
    s->send_pending = true;
    st.send_calls++;
  }
  void on_send(int res) {
    Socket* s = sock;
    if (res <= 0) {
      drop(err(Errc::kUnavailable, "nats: send failed", kConnectionLost, res < 0 ? -res : EPIPE));
      return;
    }
    st.bytes_out += static_cast<uint64_t>(res);
    s->out_off += static_cast<size_t>(res);
    if (s->out_off < s->out.size()) {
      submit_send();
      return;
    }
    s->out.clear();
    s->out_off = 0;
    flush_out();
  }

  // --- input
  void post_recv() {
    Socket* s = sock;
    if (!loop.recv(&s->recv_op, s->file(), s->rbuf.get(), s->rbuf_len)) {
      drop(err(Errc::kUnavailable, "nats: no io_uring capacity to receive", kConnectionLost,
               ENOBUFS));
      return;
    }
    s->recv_pending = true;
  }
  void on_recv(int res) {
    Socket* s = sock;
    if (res == 0) {
      drop(err(Errc::kUnavailable, "nats: connection closed by the server", kConnectionLost,
               ECONNRESET));
      return;
    }
    if (res < 0) {
      drop(err(Errc::kUnavailable, "nats: receive failed", kConnectionLost, -res));
      return;
    }
    st.bytes_in += static_cast<uint64_t>(res);
    if (s->tls) {
      on_recv_tls(s, static_cast<size_t>(res));
      return;
    }
    if (!consume(s, s->rbuf.get(), static_cast<size_t>(res))) return;
    post_recv();
  }
  // Plaintext from the server. False when the socket is no longer this connection's, or when
  // TLS has just started (the rest of the read, if any, was not plaintext).
  bool consume(Socket* s, const char* data, size_t n) {
    auto r = parser.feed(data, n, *this);
    if (sock != s) return false;
    if (!r.ok()) {
      drop(r.error());
      return false;
    }
    if (phase == Phase::kTls && !s->tls->handshake_done()) {
      parser.reset();
      drive_tls(s);
      if (sock != s) return false;
    }
    return true;
  }
  void on_recv_tls(Socket* s, size_t n) {
    net::TlsStream& t = *s->tls;
    t.feed(s->rbuf.get(), n);
    if (!t.handshake_done()) {
      drive_tls(s);
      if (sock != s) return;
      if (!t.handshake_done()) {
        post_recv();
        return;
      }
    }
    for (;;) {
      net::TlsStream::Status ts;
      const size_t got = t.read(s->plain.get(), s->rbuf_len, &ts);
      if (got > 0) {
        if (!consume(s, s->plain.get(), got)) return;
        continue;
      }
      if (ts == net::TlsStream::Status::kWantRead) break;
      if (ts == net::TlsStream::Status::kClosed) {
        drop(err(Errc::kUnavailable, "nats: connection closed by the server", kConnectionLost,
                 ECONNRESET));
        return;
      }
      if (state == ConnState::kHandshaking) {
        tls_failed(kTlsHandshake, s);  // TLS 1.3: a refused client certificate shows here
      } else {
        drop(err(Errc::kUnavailable, "nats: bad TLS record from the server", kConnectionLost,
                 EPROTO),
             tls_detail(s));
      }
      return;
    }
    flush_out();
    if (sock != s) return;
    post_recv();
  }

  bool on_op(Op& op) override {
    Socket* s = sock;
    switch (op.kind) {
      case OpKind::kInfo:
        on_info(op.text);
        break;
      case OpKind::kPing:
        write("PONG\r\n");
        break;
      case OpKind::kPong:
        on_pong();
        break;
      case OpKind::kOk:
        break;
      case OpKind::kErr:
        on_err(op.text);
        break;
      case OpKind::kMsg:
        on_msg(op.msg);
        break;
    }
    return sock == s && !(phase == Phase::kTls && !s->tls->handshake_done());
  }

  void on_info(std::string_view text) {
    simdjson::dom::element doc;
    std::string padded(text);
    if (json.parse(padded).get(doc) == simdjson::SUCCESS) {
      auto str = [&](const char* k, std::string& out) {
        std::string_view v;
        if (doc[k].get(v) == simdjson::SUCCESS) out.assign(v);
      };
      auto flag = [&](const char* k, bool& out) {
        bool v = false;
        if (doc[k].get(v) == simdjson::SUCCESS) out = v;
      };
      str("server_id", info.server_id);
      str("nonce", info.nonce);
      str("version", info.version);
      flag("headers", info.headers);
      flag("jetstream", info.jetstream);
      flag("tls_required", info.tls_required);
      flag("tls_available", info.tls_available);
      flag("auth_required", info.auth_required);
      int64_t mp = 0;
      if (doc["max_payload"].get(mp) == simdjson::SUCCESS && mp > 0)
        info.max_payload = static_cast<uint64_t>(mp);
    } else if (phase == Phase::kInfo) {
      drop(err(Errc::kCorruption, "nats: the server's INFO is not JSON", kProtocol));
      return;
    }
    if (phase != Phase::kInfo) return;  // an update (cluster topology): nothing to do
    if (!info.headers) {
      drop(err(Errc::kUnavailable, "nats: the server does not support headers (NATS 2.2+ needed)",
               kServerError));
      return;
    }
    if (tls != nullptr) {
      if (!info.tls_required && !info.tls_available) {
        drop(err(Errc::kUnavailable, "nats: tls is on but the server offers no TLS", kTlsRequired));
        return;
      }
      start_tls();
      return;
    }
    if (info.tls_required) {
      drop(err(Errc::kUnavailable,
               "nats: the server requires TLS (tls_required in its INFO): set tls = true",
               kTlsRequired));
      return;
    }
    send_handshake();
  }

  void on_pong() {
    pings_out = 0;
    if (phase == Phase::kPong) {
      become_ready();
      return;
    }
    if (pongs.empty()) return;
    auto done = std::move(pongs.front());
    pongs.pop_front();
    if (done) done(ok());
  }

  void on_err(std::string_view text) {
    st.server_errors++;
    if (phase != Phase::kReady) {
      std::string lower(text);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const bool auth = lower.find("authorization") != std::string::npos ||
                        lower.find("authentication") != std::string::npos ||
                        lower.find("user") != std::string::npos;
      drop(err(Errc::kUnavailable,
               auth ? "nats: the server refused the credentials (token, user or password)"
                    : "nats: the server refused the connection",
               auth ? kAuth : kServerError),
           std::string(text));
      return;
    }
    if (opt.on_server_error) opt.on_server_error(text);
  }

  void on_msg(Msg& m) {
    st.msgs_in++;
    if (m.sid == inbox_sid) {
      // "<inbox>.<token>"
      const size_t dot = m.subject.rfind('.');
      uint64_t token = 0;
      if (dot == std::string::npos) return;
      auto [p, ec] =
          std::from_chars(m.subject.data() + dot + 1, m.subject.data() + m.subject.size(), token);
      if (ec != std::errc()) return;
      auto it = requests.find(token);
      if (it == requests.end()) return;  // late: it timed out
      std::unique_ptr<Request> r = std::move(it->second);
      requests.erase(it);
      loop.disarm(r.get());
      if (m.data.empty() && header_status(m.headers) == 503) {
        r->cb(err(Errc::kUnavailable, "nats: no responders on that subject", kNoResponders));
        return;
      }
      r->cb(std::move(m));
      return;
    }
    auto it = subs.find(m.sid);
    if (it == subs.end()) return;       // unsubscribed meanwhile
    MsgHandler h = it->second.handler;  // a copy: the handler may unsubscribe
    h(m);
  }

  // --- connecting
  void start_connect() {
    state = ConnState::kConnecting;
    phase = Phase::kInfo;
    const ServerAddress& a = servers[server_at];
    sa = {};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&sa);
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&sa);
    if (::inet_pton(AF_INET, a.host.c_str(), &a4->sin_addr) == 1) {
      a4->sin_family = AF_INET;
      a4->sin_port = htons(a.port);
      sa_len = sizeof(sockaddr_in);
    } else {
      ::inet_pton(AF_INET6, a.host.c_str(), &a6->sin6_addr);
      a6->sin6_family = AF_INET6;
      a6->sin6_port = htons(a.port);
      sa_len = sizeof(sockaddr_in6);
    }
    const int fd = ::socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      drop(err(Errc::kUnavailable, "nats: socket() failed", kConnectionLost, errno));
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto* s = new Socket(&loop, this);
    s->fd = fd;
    s->slot = loop.register_fd(fd);
    s->rbuf_len = std::max<size_t>(opt.recv_buffer_bytes, 4096);
    s->rbuf = std::make_unique<char[]>(s->rbuf_len);
    sock = s;
    parser.reset();
    pending.clear();
    info = ServerInfo{};
    loop.arm(&connect_timer, loop.now() + opt.connect_timeout);
    emit(ConnState::kConnecting, Error{}, {});
    if (sock != s) return;
    if (!loop.connect(&s->connect_op, s->file(), reinterpret_cast<const sockaddr*>(&sa), sa_len)) {
      drop(err(Errc::kUnavailable, "nats: no io_uring capacity to connect", kConnectionLost,
               ENOBUFS));
      return;
    }
    s->connect_pending = true;
  }
  void on_connect(int res) {
    if (res < 0) {
      drop(err(Errc::kUnavailable, "nats: connect failed", kConnectionLost, -res));
      return;
    }
    post_recv();  // the server speaks first (INFO)
  }
  void start_tls() {
    Socket* s = sock;
    state = ConnState::kHandshaking;
    phase = Phase::kTls;
    s->tls = std::make_unique<net::TlsStream>();
    s->plain = std::make_unique<char[]>(s->rbuf_len);
    const ServerAddress& a = servers[server_at];
    const bool by_name = !opt.tls.server_name.empty();
    const std::string& name = by_name ? opt.tls.server_name : a.host;
    if (!s->tls->init(*tls, name, !by_name || is_ip_literal(name),
                      a.host + ":" + std::to_string(a.port))) {
      tls_failed(kTlsHandshake, s);
      return;
    }
    emit(ConnState::kHandshaking, Error{}, {});
    // drive_tls() runs once the parser has returned (consume()).
  }
  void drive_tls(Socket* s) {
    const net::TlsStream::Status ts = s->tls->handshake();
    flush_out();  // the records the handshake produced
    if (sock != s) return;
    switch (ts) {
      case net::TlsStream::Status::kOk:
        st.tls_handshakes++;
        send_handshake();
        return;
      case net::TlsStream::Status::kWantRead:
        return;
      case net::TlsStream::Status::kCertError:
        tls_failed(kTlsCert, s);
        return;
      default:
        tls_failed(kTlsHandshake, s);
        return;
    }
  }
  static std::string tls_detail(const Socket* s) {
    const char* why = s->tls ? s->tls->last_error() : nullptr;
    return why != nullptr ? std::string(why) : std::string();
  }
  void tls_failed(const char* reason, Socket* s) {
    const char* message =
        std::strcmp(reason, kTlsCert) == 0
            ? "nats: the server's TLS certificate did not verify (nats_tls_cert: check "
              "tls_ca_file and tls_server_name)"
            : "nats: the TLS handshake with the server failed (nats_tls_handshake)";
    drop(err(Errc::kUnavailable, message, reason, EPROTO), tls_detail(s));
  }
  // CONNECT, every subscription, PING; kReady at its PONG.
  void send_handshake() {
    state = ConnState::kHandshaking;
    phase = Phase::kPong;
    ConnectFields f;
    f.name = opt.name;
    f.version = RINGCAST_VERSION;
    f.token = opt.token;
    f.user = opt.user;
    f.pass = opt.password;
    f.tls_required = tls != nullptr;
    if (nkey) {
      f.nkey = nkey->public_key;
      f.sig = nkey_sign(*nkey, info.nonce);
    }
    std::string hs;
    encode_connect(hs, f);
    for (const auto& [sid, sub] : subs) encode_sub(hs, sub.subject, sub.queue, sid);
    hs += "PING\r\n";
    pending.insert(0, hs);  // before any PONG the server's PINGs asked for
    emit(ConnState::kHandshaking, Error{}, {});
    flush_out();
  }
  void become_ready() {
    loop.disarm(&connect_timer);
    state = ConnState::kReady;
    phase = Phase::kReady;
    failures = 0;
    pings_out = 0;
    st.connects++;
    while (!unsent.empty()) {
      Request* r = unsent.front();
      unsent.pop_front();
      pending += r->bytes;
      std::string().swap(r->bytes);
      r->sent = true;
      st.msgs_out++;
    }
    loop.arm(&ping_timer, loop.now() + opt.ping_interval);
    schedule_soon();
    emit(ConnState::kReady, Error{}, {});
  }
  void on_ping() {
    if (state != ConnState::kReady) return;
    if (pings_out >= opt.max_pings_out) {
      drop(err(Errc::kUnavailable, "nats: no PONG to the keepalive PINGs (stale connection)",
               kStale, ETIMEDOUT));
      return;
    }
    pings_out++;
    pongs.emplace_back();
    write("PING\r\n");
    loop.arm(&ping_timer, loop.now() + opt.ping_interval);
  }
  void on_connect_timeout() {
    if (sock != nullptr && sock->tls && !sock->tls->handshake_done()) {
      drop(err(Errc::kUnavailable, "nats: the TLS handshake timed out (nats_tls_handshake)",
               kTlsHandshake, ETIMEDOUT),
           "no TLS answer before connect_timeout");
      return;
    }
    drop(err(Errc::kUnavailable, "nats: connect (INFO, CONNECT, PONG) timed out", kConnectionLost,
             ETIMEDOUT));
  }
  void on_reconnect() {
    st.reconnects++;
    start_connect();
  }
  Duration backoff() {
    Duration d = opt.reconnect_min;
    for (uint32_t i = 0; i < failures && d < opt.reconnect_max; ++i) d *= 2;
    d = std::min(d, opt.reconnect_max);
    failures++;
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    return std::chrono::duration_cast<Duration>(d * jitter(rng));
  }

  // --- requests
  void on_request_deadline(Request* r) {
    auto it = requests.find(r->token);
    if (it == requests.end()) return;
    std::unique_ptr<Request> held = std::move(it->second);
    requests.erase(it);
    if (!held->sent) unsent.erase(std::find(unsent.begin(), unsent.end(), held.get()));
    st.timeouts++;
    held->cb(held->sent ? err(Errc::kUnavailable,
                              "nats: no reply before the deadline (the request may have been "
                              "acted on)",
                              kTimeout, ETIMEDOUT)
                        : err(Errc::kUnavailable,
                              "nats: deadline passed before the request was sent (no connection)",
                              kTimeoutUnsent));
  }
  // Every sent request fails (it may have been acted on); unsent ones wait.
  void fail_sent(const Error& e) {
    std::vector<std::unique_ptr<Request>> failed;
    for (auto it = requests.begin(); it != requests.end();) {
      if (it->second->sent) {
        loop.disarm(it->second.get());
        failed.push_back(std::move(it->second));
        it = requests.erase(it);
      } else {
        ++it;
      }
    }
    std::sort(failed.begin(), failed.end(),
              [](const auto& a, const auto& b) { return a->token < b->token; });
    for (auto& r : failed) r->cb(e);
    auto waiters = std::move(pongs);
    pongs.clear();
    for (auto& w : waiters)
      if (w) w(e);
  }

  // --- going down
  void detach_socket() {
    Socket* s = sock;
    if (s == nullptr) return;
    sock = nullptr;
    s->owner = nullptr;
    s->tls.reset();
    if (s->ops_pending()) {
      ::shutdown(s->fd, SHUT_RDWR);
      loop.cancel_fd(s->file());
      closing.push_back(s);
    } else {
      s->release();
    }
  }
  void socket_done(Socket* s) {
    auto it = std::find(closing.begin(), closing.end(), s);
    if (it != closing.end()) closing.erase(it);
    s->release();
  }
  void drop(Error why, std::string detail = {}) {
    if (state == ConnState::kClosed) return;
    const bool was_up = state == ConnState::kReady;
    detach_socket();
    loop.disarm(&connect_timer);
    loop.disarm(&ping_timer);
    parser.reset();
    pending.clear();
    if (was_up) st.disconnects++;
    state = ConnState::kBackoff;
    phase = Phase::kInfo;
    server_at = (server_at + 1) % servers.size();
    loop.arm(&reconnect_timer, loop.now() + backoff());
    Error lost = err(Errc::kUnavailable, "nats: the connection dropped with the request in flight",
                     kConnectionLost);
    fail_sent(lost);
    if (state == ConnState::kBackoff) emit(ConnState::kBackoff, why, std::move(detail));
  }
  void close() {
    if (state == ConnState::kClosed) return;
    state = ConnState::kClosed;
    for (net::Timer* t :
         {static_cast<net::Timer*>(&connect_timer), static_cast<net::Timer*>(&reconnect_timer),
          static_cast<net::Timer*>(&ping_timer), static_cast<net::Timer*>(&soon)})
      loop.disarm(t);
    detach_socket();
    pending.clear();
    fail_sent(err(Errc::kUnavailable,
                  "nats: connection closed by the client with the request in flight",
                  kConnectionLost));
    auto left = std::move(requests);
    requests.clear();
    unsent.clear();
    for (auto& [token, r] : left) {
      loop.disarm(r.get());
      r->cb(
          err(Errc::kUnavailable, "nats: connection closed before the request was sent", kClosed));
    }
    auto calls = std::move(soon_calls);
    soon_calls.clear();
    for (auto& f : calls) f();
    emit(ConnState::kClosed, Error{}, {});
  }
  void emit(ConnState s, const Error& e, std::string detail) {
    if (!opt.on_event) return;
    ConnectionEvent ev{s, e, st.reconnects, std::move(detail)};
    opt.on_event(ev);
  }

  void on_op(Socket* s, Socket::Kind kind, int res) {
    switch (kind) {
      case Socket::kConnectOp:
        s->connect_pending = false;
        on_connect(res);
        break;
      case Socket::kSendOp:
        s->send_pending = false;
        on_send(res);
        break;
      case Socket::kRecvOp:
        s->recv_pending = false;
        on_recv(res);
        break;
    }
  }
};

void Socket::Op::complete(int res, uint32_t) {
  if (s->owner != nullptr) {
    s->owner->on_op(s, kind, res);
    return;
  }
  switch (kind) {
    case kConnectOp:
      s->connect_pending = false;
      break;
    case kSendOp:
      s->send_pending = false;
      break;
    case kRecvOp:
      s->recv_pending = false;
      break;
  }
  if (s->ops_pending()) return;
  if (s->closer != nullptr) {
    s->closer->socket_done(s);
  } else {
    s->release();
  }
}

Connection::Impl::~Impl() {
  close();
  for (int i = 0; i < kDestroyTurns && !closing.empty(); ++i) loop.run_once(milliseconds(1));
  for (Socket* s : closing) s->closer = nullptr;
}

// --- Connection ---------------------------------------------------------------------------------

Result<std::unique_ptr<Connection>> Connection::create(net::Loop& loop, ConnectionOptions options) {
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "nats: at least one server is needed", "servers");
  if (options.reconnect_min <= Duration::zero() || options.reconnect_max < options.reconnect_min ||
      options.max_pings_out == 0 || options.ping_interval <= Duration::zero())
    return make_error(Errc::kInvalidArgument,
                      "nats: 0 < reconnect_min <= reconnect_max, ping_interval > 0 and "
                      "max_pings_out > 0 are required");
  if (!options.token.empty() + !options.user.empty() + !options.nkey_seed.empty() > 1)
    return make_error(Errc::kInvalidArgument, "nats: one of a token, a user or an NKEY", "token");
  auto impl = std::make_unique<Impl>(loop, std::move(options));
  for (const auto& s : impl->opt.servers) {
    auto a = parse_server(s);
    if (!a.ok()) return a.error();
    impl->servers.push_back(std::move(*a));
  }
  if (!impl->opt.nkey_seed.empty()) {
    auto k = nkey_from_seed(impl->opt.nkey_seed);
    if (!k.ok()) return k.error();
    impl->nkey = std::move(*k);
  }
  if (impl->opt.tls.enabled) {
    auto ctx = make_tls_context(impl->opt.tls);
    if (!ctx.ok()) return ctx.error();
    impl->tls = std::move(*ctx);
  }
  impl->inbox = "_INBOX.";
  impl->inbox += net::random_hex(11);
  impl->inbox_sid = impl->next_sid++;
  impl->subs[impl->inbox_sid] = Impl::Sub{impl->inbox + ".*", {}, nullptr};
  if (!loop.in_turn()) loop.refresh_now();
  impl->start_connect();
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

Result<uint64_t> Connection::subscribe(std::string subject, MsgHandler handler, std::string queue) {
  Impl& m = *impl_;
  if (m.state == ConnState::kClosed)
    return make_error(Errc::kUnavailable, "nats: connection closed", nullptr, kClosed);
  if (!valid_subject(subject, true) || (!queue.empty() && !valid_subject(queue)))
    return make_error(Errc::kInvalidArgument, "nats: not a valid subject", "subject", kBadSubject);
  const uint64_t sid = m.next_sid++;
  if (m.state == ConnState::kReady) {
    std::string line;
    encode_sub(line, subject, queue, sid);
    m.write(line);
  }
  m.subs[sid] = Impl::Sub{std::move(subject), std::move(queue), std::move(handler)};
  return sid;
}

void Connection::unsubscribe(uint64_t sid) {
  Impl& m = *impl_;
  if (sid == m.inbox_sid || m.subs.erase(sid) == 0) return;
  if (m.state == ConnState::kReady) {
    std::string line;
    encode_unsub(line, sid);
    m.write(line);
  }
}

Result<void> Connection::publish(std::string_view subject, std::string_view data,
                                 std::string_view reply, std::string_view headers) {
  Impl& m = *impl_;
  if (m.state != ConnState::kReady)
    return make_error(Errc::kUnavailable, "nats: not connected", nullptr,
                      m.state == ConnState::kClosed ? kClosed : kNotConnected);
  if (!valid_subject(subject) || (!reply.empty() && !valid_subject(reply)))
    return make_error(Errc::kInvalidArgument, "nats: not a valid subject", "subject", kBadSubject);
  if (data.size() + headers.size() > m.info.max_payload)
    return make_error(Errc::kInvalidArgument, "nats: larger than the server's max_payload", "data",
                      kTooLarge);
  if (m.pending.size() > m.opt.max_pending_bytes)
    return make_error(Errc::kUnavailable, "nats: too much output waiting (max_pending_bytes)",
                      nullptr, kQueueFull);
  if (headers.empty()) {
    encode_pub(m.pending, subject, reply, data);
  } else {
    encode_hpub(m.pending, subject, reply, headers, data);
  }
  m.st.msgs_out++;
  m.schedule_soon();
  return ok();
}

void Connection::request(std::string_view subject, std::string_view data, ReplyCallback cb,
                         Duration timeout, std::string_view headers) {
  Impl& m = *impl_;
  auto refuse = [&m, &cb](Error e) { m.later([cb = std::move(cb), e] { cb(e); }); };
  if (m.state == ConnState::kClosed)
    return refuse(make_error(Errc::kUnavailable, "nats: connection closed", nullptr, kClosed));
  if (!valid_subject(subject))
    return refuse(
        make_error(Errc::kInvalidArgument, "nats: not a valid subject", "subject", kBadSubject));
  if (data.size() + headers.size() > m.info.max_payload)
    return refuse(make_error(Errc::kInvalidArgument, "nats: larger than the server's max_payload",
                             "data", kTooLarge));
  if (m.requests.size() >= m.opt.max_requests || m.pending.size() > m.opt.max_pending_bytes)
    return refuse(make_error(Errc::kUnavailable, "nats: too many requests or too much output",
                             nullptr, kQueueFull));
  auto r = std::make_unique<Impl::Request>();
  r->owner = &m;
  r->token = m.next_token++;
  r->cb = std::move(cb);
  std::string reply = m.inbox;
  reply += '.';
  reply += std::to_string(r->token);
  std::string& out = m.state == ConnState::kReady ? m.pending : r->bytes;
  if (headers.empty()) {
    encode_pub(out, subject, reply, data);
  } else {
    encode_hpub(out, subject, reply, headers, data);
  }
  if (m.state == ConnState::kReady) {
    r->sent = true;
    m.st.msgs_out++;
    m.schedule_soon();
  } else {
    m.unsent.push_back(r.get());
  }
  m.st.requests++;
  if (!m.loop.in_turn()) m.loop.refresh_now();
  m.loop.arm(r.get(),
             m.loop.now() + (timeout > Duration::zero() ? timeout : m.opt.default_timeout));
  m.requests[r->token] = std::move(r);
}

void Connection::flush(std::function<void(Result<void>)> done) {
  Impl& m = *impl_;
  if (m.state != ConnState::kReady) {
    const char* reason = m.state == ConnState::kClosed ? kClosed : kNotConnected;
    m.later([done = std::move(done), reason] {
      done(make_error(Errc::kUnavailable, "nats: not connected", nullptr, reason));
    });
    return;
  }
  m.pongs.push_back(std::move(done));
  m.write("PING\r\n");
}

std::string Connection::new_inbox() {
  std::string s = "_INBOX.";
  s += net::random_hex(11);
  return s;
}

void Connection::close() {
  impl_->close();
}
ConnState Connection::state() const {
  return impl_->state;
}
const ServerInfo& Connection::server_info() const {
  return impl_->info;
}
const ConnectionStats& Connection::stats() const {
  return impl_->st;
}
size_t Connection::pending_bytes() const {
  return impl_->pending.size();
}
net::Loop& Connection::loop() {
  return impl_->loop;
}

}  // namespace ringcast::nats
