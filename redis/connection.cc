#include "redis/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "net/loop.h"
#include "net/tls.h"

namespace ringcast::redis {
namespace {

constexpr int kDestroyTurns = 2000;          // x 1 ms: how long ~Connection waits for the kernel
constexpr size_t kKeepBytesCapacity = 4096;  // a pooled command keeps at most this buffer

// ProcessTotals, summed over every connection of the process.
std::atomic<uint64_t> g_commands_sent{0}, g_send_batches{0}, g_bytes_sent{0}, g_bytes_received{0};

Error err(Errc code, const char* message, const char* reason, int sys_errno = 0) {
  Error e = make_error(code, message, nullptr, reason);
  e.sys_errno = sys_errno;
  return e;
}

bool is_tls_reason(const char* reason) {
  return reason != nullptr &&
         (std::strcmp(reason, kTlsCert) == 0 || std::strcmp(reason, kTlsHandshake) == 0);
}

bool is_ip_literal(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

}  // namespace

ProcessTotals process_totals() {
  ProcessTotals t;
  t.commands_sent = g_commands_sent.load(std::memory_order_relaxed);
  t.send_batches = g_send_batches.load(std::memory_order_relaxed);
  t.bytes_sent = g_bytes_sent.load(std::memory_order_relaxed);
  t.bytes_received = g_bytes_received.load(std::memory_order_relaxed);
  return t;
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

// One command held by the connection, from command() until its reply was read (or the
// connection dropped). Pooled: nodes are reused, so a steady stream allocates nothing but the
// caller's callback. The node is its own deadline timer.
struct Pending final : net::Timer {
  enum class Where : uint8_t { kFree, kQueued, kSent };
  Connection::Impl* owner = nullptr;
  Pending* prev = nullptr;
  Pending* next = nullptr;
  Where where = Where::kFree;
  bool timed_out = false;  // completed by its deadline; its reply is still to be read
  bool handshake = false;  // AUTH / SELECT of this connection, not a caller's command
  bool any_reply = false;  // a handshake PING on TLS: an error reply passes too
  Callback cb;
  std::string bytes;  // the encoded command while queued
  void on_timer() override;
};

namespace {

struct List {
  Pending* head = nullptr;
  Pending* tail = nullptr;
  uint32_t size = 0;

  void push_back(Pending* p) {
    p->prev = tail;
    p->next = nullptr;
    if (tail != nullptr) {
      tail->next = p;
    } else {
      head = p;
    }
    tail = p;
    size++;
  }
  void remove(Pending* p) {
    if (p->prev != nullptr) {
      p->prev->next = p->next;
    } else {
      head = p->next;
    }
    if (p->next != nullptr) {
      p->next->prev = p->prev;
    } else {
      tail = p->prev;
    }
    p->prev = p->next = nullptr;
    size--;
  }
  Pending* pop_front() {
    Pending* p = head;
    if (p != nullptr) remove(p);
    return p;
  }
  List take() {
    List l = *this;
    *this = List{};
    return l;
  }
};

}  // namespace

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
  std::unique_ptr<char[]> rbuf;  // ciphertext from recv, then (TLS) the plaintext it decrypts to
  size_t rbuf_len = 0;
  std::string out;  // bytes of the send in flight (and the not yet sent rest of it)
  size_t out_off = 0;
  // TLS only: the stream, and the batch's plaintext before it is encrypted (the ciphertext
  // waits in the stream's memory BIO while a send is in flight, then goes as one send).
  std::unique_ptr<net::TlsStream> tls;
  std::string plain;

  bool ops_pending() const { return connect_pending || send_pending || recv_pending; }
  net::FileRef file() const { return slot >= 0 ? net::FileRef::slot(slot) : net::FileRef(fd); }
  void release() {
    if (slot >= 0) loop->unregister_fd(slot);
    if (fd >= 0) ::close(fd);
    delete this;
  }
};

struct Connection::Impl {
  struct TimerCall final : net::Timer {
    Impl* impl;
    void (Impl::*fn)();
    TimerCall(Impl* i, void (Impl::*f)()) : impl(i), fn(f) {}
    void on_timer() override { (impl->*fn)(); }
  };

  Impl(net::Loop& l, const ConnectionOptions& o)
      : loop(l), opt(o), reader(o.reader), rng(static_cast<uint32_t>(o.jitter_seed)) {}
  ~Impl();

  net::Loop& loop;
  ConnectionOptions opt;
  std::unique_ptr<net::TlsClientContext> own_tls;  // when opt.tls_context was not given
  net::TlsClientContext* tls = nullptr;            // set iff opt.tls.enabled
  std::string tls_session_key;                     // "host:port"
  const char* down_reason = nullptr;  // kTlsCert / kTlsHandshake while down for that, else null
  sockaddr_storage sa{};
  socklen_t sa_len = 0;
  ConnState state = ConnState::kConnecting;
  ConnectionStats st;
  ReplyReader reader;
  Socket* sock = nullptr;
  std::vector<Socket*> closing;
  List queued;
  List sent;
  std::vector<std::unique_ptr<Pending>> pool;
  std::vector<Pending*> free_nodes;
  uint32_t held = 0;  // callers' commands in queued + sent
  uint32_t handshake_left = 0;
  uint32_t failures = 0;  // consecutive failed connects (backoff exponent)
  std::minstd_rand rng;
  std::vector<std::pair<Callback, Error>> refusals;  // completed next turn (STYLE 5)
  TimerCall soon{this, &Impl::on_soon};
  TimerCall connect_timer{this, &Impl::on_connect_timeout};
  TimerCall reconnect_timer{this, &Impl::on_reconnect};

  // --- nodes
  Pending* acquire() {
    Pending* p;
    if (!free_nodes.empty()) {
      p = free_nodes.back();
      free_nodes.pop_back();
    } else {
      pool.push_back(std::make_unique<Pending>());
      p = pool.back().get();
      p->owner = this;
    }
    p->timed_out = false;
    p->handshake = false;
    p->any_reply = false;
    return p;
  }
  void release(Pending* p) {
    loop.disarm(p);
    p->where = Pending::Where::kFree;
    p->cb = nullptr;
    if (p->bytes.capacity() > kKeepBytesCapacity) {
      std::string().swap(p->bytes);
    } else {
      p->bytes.clear();
    }
    free_nodes.push_back(p);
  }

  // --- commands
  void refuse(Callback cb, Error e) {
    st.refused++;
    refusals.emplace_back(std::move(cb), e);
    schedule_soon();
  }
  Pending* admit(Callback& cb) {
    if (state == ConnState::kClosed) {
      refuse(std::move(cb), err(Errc::kUnavailable, "redis: connection closed", kClosed));
      return nullptr;
    }
    if (held >= opt.max_pending) {
      refuse(std::move(cb),
             err(Errc::kUnavailable, "redis: too many commands pending (max_pending)", kQueueFull));
      return nullptr;
    }
    return acquire();
  }
  void enqueue(Pending* p, MonoTime deadline, Callback cb) {
    p->cb = std::move(cb);
    p->where = Pending::Where::kQueued;
    queued.push_back(p);
    held++;
    st.commands++;
    loop.arm(p, deadline);
    if (state == ConnState::kReady) schedule_soon();
  }
  void schedule_soon() {
    if (!soon.armed()) loop.arm(&soon, loop.now());
  }
  void on_soon() {
    if (!refusals.empty()) {
      auto list = std::move(refusals);
      refusals.clear();
      for (auto& [cb, e] : list) cb(e);
    }
    flush();
  }
  void on_deadline(Pending* p) {
    if (p->where == Pending::Where::kQueued) {
      queued.remove(p);
      Callback cb = std::move(p->cb);
      release(p);
      held--;
      st.timeouts++;
      cb(err(Errc::kUnavailable, unsent_message(), kTimeoutUnsent));
    } else if (p->where == Pending::Where::kSent && !p->timed_out && !p->handshake) {
      p->timed_out = true;  // stays in `sent`: its reply is read and discarded later
      Callback cb = std::move(p->cb);
      p->cb = nullptr;
      st.timeouts++;
      cb(err(Errc::kUnavailable,
             "redis: no reply before the deadline (the command may have executed)", kTimeout,
             ETIMEDOUT));
    }
  }

  // Why a command never left: the connection's last failure when that was TLS (SPEC R14: an
  // operator reading "deadline passed" must learn that the certificate is the problem).
  const char* unsent_message() const {
    if (down_reason != nullptr && std::strcmp(down_reason, kTlsCert) == 0) {
      return "redis: deadline passed before the command was sent: no connection, the server's "
             "TLS certificate did not verify (redis_tls_cert: check tls_ca_file and "
             "tls_server_name)";
    }
    if (down_reason != nullptr) {
      return "redis: deadline passed before the command was sent: no connection, the TLS "
             "handshake failed (redis_tls_handshake: not a TLS port, or the server refused this "
             "client's certificate, tls_cert_file)";
    }
    return "redis: deadline passed before the command was sent";
  }

  // --- sending (pipelining: everything queued by this turn goes in one send)
  // Sends what is waiting, unless a send is in flight (its completion calls this again): the
  // queued commands when ready (at most max_send_batch_bytes of them), and on TLS whatever
  // ciphertext the stream holds (handshake records, encrypted commands).
  void flush() {
    Socket* s = sock;
    if (s == nullptr || s->send_pending) return;
    if (state == ConnState::kReady && queued.head != nullptr) {
      batch(s);
      if (sock != s) return;
    }
    if (s->tls) {
      s->out.clear();
      s->out_off = 0;
      s->tls->take_output(s->out);
    }
    if (s->out.empty()) return;
    submit_send();
  }
  void batch(Socket* s) {
    std::string& out = s->tls ? s->plain : s->out;
    out.clear();
    s->out_off = 0;
    uint64_t n = 0;
    while (queued.head != nullptr &&
           (out.empty() || out.size() + queued.head->bytes.size() <= opt.max_send_batch_bytes)) {
      Pending* p = queued.pop_front();
      out += p->bytes;
      if (p->bytes.capacity() > kKeepBytesCapacity) {
        std::string().swap(p->bytes);
      } else {
        p->bytes.clear();
      }
      p->where = Pending::Where::kSent;
      sent.push_back(p);
      ++n;
    }
    st.send_batches++;
    g_commands_sent.fetch_add(n, std::memory_order_relaxed);
    g_send_batches.fetch_add(1, std::memory_order_relaxed);
    if (s->tls) {
      // The memory BIO takes the batch whole; it leaves as one send (flush()).
      if (s->tls->write(out.data(), out.size()) != net::TlsStream::Status::kOk) {
        drop(err(Errc::kUnavailable, "redis: TLS could not encrypt the commands", kConnectionLost,
                 EPROTO),
             tls_detail(s));
        return;
      }
      if (out.capacity() > opt.max_send_batch_bytes) {
        std::string().swap(out);  // a single larger command went: do not keep its buffer
      } else {
        out.clear();
      }
    }
  }
  void submit_send() {
    Socket* s = sock;
    if (!loop.send(&s->send_op, s->file(), s->out.data() + s->out_off,
                   s->out.size() - s->out_off)) {
      drop(
          err(Errc::kUnavailable, "redis: no io_uring capacity to send", kConnectionLost, ENOBUFS));
      return;
    }
    s->send_pending = true;
    st.send_calls++;
  }
  void on_send(int res) {
    Socket* s = sock;
    if (res <= 0) {
      drop(err(Errc::kUnavailable, "redis: send failed", kConnectionLost, res < 0 ? -res : EPIPE));
      return;
    }
    st.bytes_sent += static_cast<uint64_t>(res);
    g_bytes_sent.fetch_add(static_cast<uint64_t>(res), std::memory_order_relaxed);
    s->out_off += static_cast<size_t>(res);
    if (s->out_off < s->out.size()) {
      submit_send();
      return;
    }
    s->out.clear();
    s->out_off = 0;
    flush();
  }

  // --- receiving
  void post_recv() {
    Socket* s = sock;
    if (!loop.recv(&s->recv_op, s->file(), s->rbuf.get(), s->rbuf_len)) {
      drop(err(Errc::kUnavailable, "redis: no io_uring capacity to receive", kConnectionLost,
               ENOBUFS));
      return;
    }
    s->recv_pending = true;
  }
  void on_recv(int res) {
    Socket* s = sock;
    if (res == 0) {
      drop(err(Errc::kUnavailable, "redis: connection closed by the server", kConnectionLost,
               ECONNRESET));
      return;
    }
    if (res < 0) {
      drop(err(Errc::kUnavailable, "redis: receive failed", kConnectionLost, -res));
      return;
    }
    st.bytes_received += static_cast<uint64_t>(res);
    g_bytes_received.fetch_add(static_cast<uint64_t>(res), std::memory_order_relaxed);
    if (s->tls) {
      on_recv_tls(s, static_cast<size_t>(res));
      return;
    }
    if (!consume(s, s->rbuf.get(), static_cast<size_t>(res))) return;
    post_recv();
  }
  // Plaintext from the server: replies to their commands, in order. False when the socket is
  // no longer this connection's (dropped, closed by a callback, the handshake failed).
  bool consume(Socket* s, const char* data, size_t n) {
    if (auto f = reader.feed(data, n); !f) {
      drop(f.error());
      return false;
    }
    for (;;) {
      auto r = reader.next();
      if (!r) {
        drop(r.error());
        return false;
      }
      if (!r->has_value()) break;
      deliver(std::move(**r));
      if (sock != s) return false;  // a callback closed it, or the handshake failed
    }
    return true;
  }
  void on_recv_tls(Socket* s, size_t n) {
    net::TlsStream& t = *s->tls;
    t.feed(s->rbuf.get(), n);  // copied into the stream: rbuf is free for plaintext below
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
      const size_t got = t.read(s->rbuf.get(), s->rbuf_len, &ts);
      if (got > 0) {
        if (!consume(s, s->rbuf.get(), got)) return;
        continue;
      }
      if (ts == net::TlsStream::Status::kWantRead) break;
      if (ts == net::TlsStream::Status::kClosed) {
        drop(err(Errc::kUnavailable, "redis: connection closed by the server", kConnectionLost,
                 ECONNRESET));
        return;
      }
      if (state == ConnState::kHandshaking) {
        // TLS 1.3: the server checks this client's certificate after the client finished its
        // side of the handshake, so a refusal arrives here, as an alert, before kReady.
        tls_failed(kTlsHandshake, s);
      } else {
        drop(err(Errc::kUnavailable, "redis: bad TLS record from the server", kConnectionLost,
                 EPROTO),
             tls_detail(s));
      }
      return;
    }
    flush();  // anything the stream wants to send (a BoringSSL client writes nothing here)
    if (sock != s) return;
    post_recv();
  }
  void deliver(Reply reply) {
    Pending* p = sent.pop_front();
    if (p == nullptr) {
      drop(err(Errc::kCorruption, "redis: a reply arrived for no command", kProtocol));
      return;
    }
    if (p->handshake) {
      const bool any_reply = p->any_reply;
      release(p);
      if (reply.is_error() && !any_reply) {
        handshake_failed(reply.str());
        return;
      }
      if (--handshake_left == 0) become_ready();
      return;
    }
    held--;
    if (p->timed_out) {
      st.late_replies++;
      release(p);
      return;
    }
    Callback cb = std::move(p->cb);
    release(p);
    st.replies++;
    cb(std::move(reply));
  }

  // --- connecting
  void start_connect() {
    state = ConnState::kConnecting;
    const int fd = ::socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      connect_failed(err(Errc::kUnavailable, "redis: socket() failed", kConnectionLost, errno));
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto* s = new Socket(&loop, this);
    s->fd = fd;
    s->slot = loop.register_fd(fd);
    s->rbuf_len = std::max<size_t>(opt.recv_buffer_bytes, 512);
    s->rbuf = std::make_unique<char[]>(s->rbuf_len);
    sock = s;
    reader.reset();
    if (!loop.connect(&s->connect_op, s->file(), reinterpret_cast<const sockaddr*>(&sa), sa_len)) {
      drop(err(Errc::kUnavailable, "redis: no io_uring capacity to connect", kConnectionLost,
               ENOBUFS));
      return;
    }
    s->connect_pending = true;
    loop.arm(&connect_timer, loop.now() + opt.connect_timeout);
  }
  void on_connect(int res) {
    if (res < 0) {
      drop(err(Errc::kUnavailable, "redis: connect failed", kConnectionLost, -res));
      return;
    }
    post_recv();
    if (sock == nullptr) return;
    if (tls != nullptr) {
      start_tls();
      return;
    }
    start_session();
  }
  // TLS (SPEC R14): the handshake runs before AUTH / SELECT, inside connect_timeout.
  void start_tls() {
    Socket* s = sock;
    s->tls = std::make_unique<net::TlsStream>();
    const bool by_name = !opt.tls.server_name.empty();
    const std::string& name = by_name ? opt.tls.server_name : opt.host;
    if (!s->tls->init(*tls, name, !by_name || is_ip_literal(name), tls_session_key)) {
      tls_failed(kTlsHandshake, s);
      return;
    }
    state = ConnState::kHandshaking;
    emit(ConnState::kHandshaking, Error{}, {});
    drive_tls(s);
  }
  void drive_tls(Socket* s) {
    const net::TlsStream::Status ts = s->tls->handshake();
    flush();  // the records the handshake produced
    if (sock != s) return;
    switch (ts) {
      case net::TlsStream::Status::kOk:
        st.tls_handshakes++;
        start_session();
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
    st.tls_failures++;
    const char* message =
        std::strcmp(reason, kTlsCert) == 0
            ? "redis: the server's TLS certificate did not verify (redis_tls_cert)"
            : "redis: the TLS handshake with the server failed (redis_tls_handshake)";
    drop(err(Errc::kUnavailable, message, reason, EPROTO), tls_detail(s));
  }
  // AUTH / SELECT (on TLS, a PING when neither is needed), pipelined, then kReady.
  void start_session() {
    std::string hs;
    handshake_left = 0;
    auto add = [&](std::initializer_list<std::string_view> args) {
      Pending* p = acquire();
      p->handshake = true;
      p->where = Pending::Where::kSent;
      sent.push_back(p);
      (void)encode_command(std::span<const std::string_view>(args.begin(), args.size()), &hs);
      handshake_left++;
    };
    if (!opt.password.empty()) {
      if (opt.username.empty()) {
        add({"AUTH", opt.password});
      } else {
        add({"AUTH", opt.username, opt.password});
      }
    }
    const std::string db = std::to_string(opt.db);
    if (opt.db != 0) add({"SELECT", db});
    if (handshake_left == 0 && sock->tls) {
      add({"PING"});
      sent.tail->any_reply = true;  // NOAUTH and the like are a later command's business
    }
    if (handshake_left == 0) {
      become_ready();
      return;
    }
    if (state != ConnState::kHandshaking) {
      state = ConnState::kHandshaking;
      emit(ConnState::kHandshaking, Error{}, {});
    }
    st.send_batches++;
    if (sock->tls) {
      if (sock->tls->write(hs.data(), hs.size()) != net::TlsStream::Status::kOk) {
        tls_failed(kTlsHandshake, sock);
        return;
      }
      flush();
      return;
    }
    sock->out = std::move(hs);
    sock->out_off = 0;
    submit_send();
  }
  void become_ready() {
    loop.disarm(&connect_timer);
    state = ConnState::kReady;
    failures = 0;
    down_reason = nullptr;
    st.connects++;
    emit(ConnState::kReady, Error{}, {});
    schedule_soon();
  }
  void handshake_failed(const std::string& server_message) {
    drop(err(Errc::kUnavailable, "redis: AUTH or SELECT refused by the server", kConnectionLost),
         server_message);
  }
  void on_connect_timeout() {
    if (sock != nullptr && sock->tls && !sock->tls->handshake_done()) {
      // No answer to the ClientHello: most often a plain port (Redis waits for a command).
      st.tls_failures++;
      drop(err(Errc::kUnavailable,
               "redis: the TLS handshake timed out (redis_tls_handshake: is it a TLS port?)",
               kTlsHandshake, ETIMEDOUT),
           "no TLS answer before connect_timeout");
      return;
    }
    drop(err(Errc::kUnavailable, "redis: connect (or AUTH/SELECT) timed out", kConnectionLost,
             ETIMEDOUT));
  }
  void connect_failed(Error e) { drop(e); }
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

  // --- going down
  void detach_socket() {
    Socket* s = sock;
    if (s == nullptr) return;
    sock = nullptr;
    s->owner = nullptr;
    s->tls.reset();  // nothing more is read or written; the context may go before the socket
    if (s->ops_pending()) {
      ::shutdown(s->fd, SHUT_RDWR);  // a pending recv/send completes at once
      loop.cancel_fd(s->file());     // and a pending connect is cancelled
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
  // Fails every sent command (they may have executed), keeps the queued ones.
  void fail_sent(const Error& e) {
    List l = sent.take();
    handshake_left = 0;
    while (Pending* p = l.pop_front()) {
      const bool caller = !p->handshake;
      const bool complete = caller && !p->timed_out;
      Callback cb = complete ? std::move(p->cb) : Callback();
      if (caller) held--;
      release(p);
      if (complete) {
        st.connection_lost++;
        cb(e);
      }
    }
  }
  void drop(Error why, std::string detail = {}) {
    if (state == ConnState::kClosed) return;
    detach_socket();
    loop.disarm(&connect_timer);
    reader.reset();
    const bool was_up = state == ConnState::kReady || state == ConnState::kHandshaking;
    if (was_up) st.disconnects++;
    state = ConnState::kBackoff;
    down_reason = is_tls_reason(why.reason) ? why.reason : nullptr;
    loop.arm(&reconnect_timer, loop.now() + backoff());
    Error lost = why;  // kConnectionLost, or kProtocol / kReplyTooLarge from the reader
    if (lost.reason == nullptr || is_tls_reason(lost.reason)) lost.reason = kConnectionLost;
    fail_sent(lost);
    if (state == ConnState::kBackoff) emit(ConnState::kBackoff, why, std::move(detail));
  }
  void close() {
    if (state == ConnState::kClosed) return;
    state = ConnState::kClosed;
    loop.disarm(&connect_timer);
    loop.disarm(&reconnect_timer);
    loop.disarm(&soon);
    detach_socket();
    fail_sent(err(Errc::kUnavailable,
                  "redis: connection closed by the client with the command in flight",
                  kConnectionLost));
    List q = queued.take();
    while (Pending* p = q.pop_front()) {
      Callback cb = std::move(p->cb);
      held--;
      release(p);
      cb(err(Errc::kUnavailable, "redis: connection closed before the command was sent", kClosed));
    }
    auto list = std::move(refusals);
    refusals.clear();
    for (auto& [cb, e] : list) cb(e);
    emit(ConnState::kClosed, Error{}, {});
  }
  void emit(ConnState s, const Error& e, std::string detail) {
    if (!opt.on_event) return;
    ConnectionEvent ev{s, e, st.reconnects, std::move(detail)};
    opt.on_event(ev);
  }

  // A completion of the attached socket (Socket::Op::complete handles detached ones).
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
  // Detached: the owner may be gone; do the bookkeeping without it.
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

void Pending::on_timer() {
  owner->on_deadline(this);
}

Connection::Impl::~Impl() {
  close();
  for (int i = 0; i < kDestroyTurns && !closing.empty(); ++i) loop.run_once(milliseconds(1));
  for (Socket* s : closing) s->closer = nullptr;  // they free themselves when the kernel is done
  for (auto& p : pool) loop.disarm(p.get());
}

// --- Connection ------------------------------------------------------------------------------

Result<std::unique_ptr<Connection>> Connection::create(net::Loop& loop,
                                                       const ConnectionOptions& options) {
  auto impl = std::make_unique<Impl>(loop, options);
  auto* a4 = reinterpret_cast<sockaddr_in*>(&impl->sa);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&impl->sa);
  if (::inet_pton(AF_INET, options.host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(options.port);
    impl->sa_len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, options.host.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(options.port);
    impl->sa_len = sizeof(sockaddr_in6);
  } else {
    return make_error(Errc::kInvalidArgument, "redis: host must be a numeric IPv4/IPv6 address",
                      "host");
  }
  if (options.max_pending == 0 || options.reconnect_min <= Duration::zero() ||
      options.reconnect_max < options.reconnect_min) {
    return make_error(Errc::kInvalidArgument,
                      "redis: max_pending must be > 0 and 0 < reconnect_min <= reconnect_max");
  }
  if (options.tls.enabled) {
    if (options.tls_context != nullptr) {
      impl->tls = options.tls_context;
    } else {
      auto ctx = make_tls_context(options.tls);
      if (!ctx.ok()) return ctx.error();
      impl->own_tls = std::move(ctx).value();
      impl->tls = impl->own_tls.get();
    }
    impl->tls_session_key = options.host + ":" + std::to_string(options.port);
  }
  if (!loop.in_turn()) loop.refresh_now();
  impl->start_connect();
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

void Connection::command(std::span<const std::string_view> args, Callback cb,
                         const CommandOptions& options) {
  Impl& m = *impl_;
  Pending* p = m.admit(cb);
  if (p == nullptr) return;
  if (auto r = encode_command(args, &p->bytes); !r) {
    m.release(p);
    m.refuse(std::move(cb), err(Errc::kInvalidArgument, r.error().message, kBadCommand));
    return;
  }
  m.enqueue(p, deadline_for(options), std::move(cb));
}

void Connection::command_encoded(std::string_view bytes, MonoTime deadline, Callback cb) {
  Impl& m = *impl_;
  Pending* p = m.admit(cb);
  if (p == nullptr) return;
  if (bytes.empty()) {
    m.release(p);
    m.refuse(std::move(cb), err(Errc::kInvalidArgument, "redis: empty command", kBadCommand));
    return;
  }
  p->bytes.assign(bytes);
  m.enqueue(p, deadline, std::move(cb));
}

void Connection::close() {
  impl_->close();
}
ConnState Connection::state() const {
  return impl_->state;
}

const ConnectionStats& Connection::stats() const {
  impl_->st.queued = impl_->queued.size;
  impl_->st.awaiting = impl_->sent.size;
  return impl_->st;
}

const ConnectionOptions& Connection::options() const {
  return impl_->opt;
}
net::Loop& Connection::loop() {
  return impl_->loop;
}
Duration Connection::default_timeout() const {
  return impl_->opt.default_timeout;
}

}  // namespace ringcast::redis
