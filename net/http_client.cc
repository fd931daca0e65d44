#include "net/http_client.h"

#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <unordered_map>

#include "core/address_guard.h"
#include "core/check.h"
#include "net/buffer_ring.h"
#include "net/pacing.h"
#include "net/signing.h"

namespace ringcast::net {

namespace {

using K = ErrorCode::Kind;
using Impl = HttpTransport::Impl;

// errno values after which another resolved address of the same answer may be tried.
bool is_connect_phase(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
      return true;
    default:
      return false;
  }
}

void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  (void)ec;
  out.append(buf, static_cast<size_t>(end - buf));
}

// Clears a result for a new attempt, keeping the capacity of its strings.
void reset_result(TransportResult& r) {
  std::string retry_after = std::move(r.retry_after);
  std::string body_prefix = std::move(r.body_prefix);
  retry_after.clear();
  body_prefix.clear();
  r = TransportResult{};
  r.retry_after = std::move(retry_after);
  r.body_prefix = std::move(body_prefix);
}

socklen_t to_sockaddr(const IpAddress& ip, uint16_t port, sockaddr_storage* ss) {
  std::memset(ss, 0, sizeof(*ss));
  if (ip.is_v4()) {
    auto* in = reinterpret_cast<sockaddr_in*>(ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, ip.bytes.data(), 4);
    return sizeof(sockaddr_in);
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(ss);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  std::memcpy(&in6->sin6_addr, ip.bytes.data(), 16);
  return sizeof(sockaddr_in6);
}

enum class Phase : uint8_t {
  kFree,
  kResolving,
  kQueued,
  kConnecting,
  kHandshake,
  kWriting,
  kReading
};
enum class ConnState : uint8_t { kConnecting, kHandshaking, kIdle, kActive, kClosing };

struct Host;
struct Connection;

// One send() in progress. Pooled by the transport and reused; pinned while in use (its
// ResolveOp and timers are handed to others by address).
struct Exchange {
  Impl* t = nullptr;
  SendOp* op = nullptr;
  Url url;
  Host* host = nullptr;
  Connection* conn = nullptr;
  std::vector<IpAddress> addrs;
  size_t addr_idx = 0;
  Phase phase = Phase::kFree;
  MonoTime t_start, t_mark, t_write;
  MonoTime queued_at;      // when it joined its host queue (max_queue_wait)
  bool resolving = false;  // the resolver holds `resolve`
  bool orphan = false;     // completed while resolving: recycled when the resolver calls back
  bool queued = false;
  Exchange* qprev = nullptr;
  Exchange* qnext = nullptr;

  struct Resolve final : ResolveOp {
    Exchange* ex = nullptr;
    void on_complete() override;
  } resolve;
  // The exchange deadline: exchanges sit in a FIFO ordered by deadline (a constant timeout
  // from a non-decreasing start), watched by one loop timer (O(1) per exchange).
  MonoTime deadline_at;
  Exchange* dprev = nullptr;
  Exchange* dnext = nullptr;
  bool dlinked = false;
  // Fast path: the URL text this exchange parsed last and its host.
  std::string url_text;
  Host* url_host = nullptr;
  struct PhaseTimer final : Timer {
    Exchange* ex = nullptr;
    void on_timer() override;
  } phase_timer;
  struct Soon final : Timer {  // completion deferred out of send()
    Exchange* ex = nullptr;
    void on_timer() override;
  } soon;

  explicit Exchange(Impl* impl) : t(impl) { resolve.ex = phase_timer.ex = soon.ex = this; }
};

// One TCP (+TLS) connection. Owned by the transport (new/delete), linked into its host's idle
// list and the global idle LRU while idle. Freed only when no io_uring op references it.
struct Connection {
  Impl* t = nullptr;
  Host* host = nullptr;
  IpAddress addr;
  sockaddr_storage sa{};
  socklen_t sa_len = 0;
  int fd = -1;
  int slot = -1;  // registered file slot (-1: ops use the fd)
  ConnState state = ConnState::kConnecting;
  Exchange* ex = nullptr;
  std::unique_ptr<TlsStream> tls;

  enum OpKind : uint8_t { kConnectOp, kRecvOp, kSendOp };
  struct Op final : IoOp {
    Connection* c = nullptr;
    OpKind kind = kConnectOp;
    void complete(int res, uint32_t flags) override;
  } connect_op, recv_op, send_op;
  bool connect_pending = false;
  bool recv_pending = false;
  bool send_pending = false;
  bool in_callback = false;

  std::unique_ptr<char[]> rbuf;  // from the socket (only without the shared buffer ring)
  size_t buf_bytes = 0;
  std::string out;  // being sent (the kernel reads it: never reallocated while sending)
  size_t out_off = 0;
  std::string out_next;  // queued behind `out`
  ResponseParser parser;
  bool got_first_byte = false;
  bool extra_bytes = false;
  bool eof = false;
  bool response_done_early = false;  // a final response arrived before the write finished

  struct Idle final : Timer {
    Connection* c = nullptr;
    void on_timer() override;
  } idle_timer;
  Connection* hprev = nullptr;  // host idle list (MRU first)
  Connection* hnext = nullptr;
  Connection* gprev = nullptr;  // global idle list (MRU first)
  Connection* gnext = nullptr;
  bool idle_linked = false;

  Connection(Impl* impl, Host* h, const ResponseLimits& limits, size_t bytes, bool own_buffer)
      : t(impl), host(h), parser(limits) {
    connect_op.c = recv_op.c = send_op.c = this;
    connect_op.kind = kConnectOp;
    recv_op.kind = kRecvOp;
    send_op.kind = kSendOp;
    idle_timer.c = this;
    buf_bytes = bytes;
    if (own_buffer) rbuf = std::make_unique<char[]>(bytes);
  }
  FileRef file() const { return slot >= 0 ? FileRef::slot(slot) : FileRef(fd); }
  bool ops_pending() const { return connect_pending || recv_pending || send_pending; }
  bool flushed() const { return !send_pending && out_off == out.size() && out_next.empty(); }
};

struct Host {
  Impl* t = nullptr;
  std::string name;
  std::string session_key;  // "host:port" for TLS session resumption
  uint16_t port = 0;
  bool tls = false;
  uint32_t connections = 0;  // connecting, idle or busy
  uint32_t idle = 0;
  Connection* idle_head = nullptr;
  Connection* idle_tail = nullptr;
  Exchange* qhead = nullptr;
  Exchange* qtail = nullptr;
  uint32_t queued = 0;
  TokenBucket bucket;
  MonoTime paced_until;  // the latest token time promised to a deferred request
  // The bulkhead's back-pressure: how fast this host's queue drains — the mean gap between two
  // starts while a backlog waited (EWMA; zero until measured) — and the latest come-back time
  // promised to a request turned away because the queue was full (queue_full_slot).
  Duration drain_gap{};
  MonoTime last_start;
  bool backlog_at_last_start = false;
  MonoTime full_until;
  // The one TLS connection doing a full handshake while no session is cached for this host:
  // other new connections wait for its session so they resume (≤ 1 full handshake per host).
  Connection* tls_probe = nullptr;
  struct Pump final : Timer {
    Host* h = nullptr;
    void on_timer() override;
  } pump_timer;
  Host() { pump_timer.h = this; }
};

}  // namespace

struct HttpTransport::Impl {
  Loop& loop;
  HttpTransportOptions opt;
  AddressGuard guard;
  Resolver* resolver = nullptr;
  std::unique_ptr<CaresResolver> own_resolver;
  std::unique_ptr<TlsClientContext> tls;
  std::unordered_map<std::string, std::unique_ptr<Host>> hosts;
  std::unordered_map<std::string, RateLimit> rate_overrides;
  std::vector<std::unique_ptr<Exchange>> exchanges;
  std::vector<Exchange*> free_ex;
  std::vector<Connection*> all_closing;  // for the destructor
  Connection* gidle_head = nullptr;
  Connection* gidle_tail = nullptr;
  uint32_t total_conns = 0;
  uint32_t total_idle = 0;
  uint32_t in_flight = 0;
  uint32_t closing = 0;
  bool in_send = false;
  bool destroying = false;
  HttpTransportStats st;
  std::string key_scratch;
  std::string req_scratch;
  std::unique_ptr<BufferRing> rx_ring;    // multishot receives (nullptr: one-shot recv)
  std::unique_ptr<char[]> plain_scratch;  // TLS plaintext, used synchronously in on_recv
  size_t plain_scratch_bytes = 0;

  Impl(Loop& l, const HttpTransportOptions& o) : loop(l), opt(o), guard(o.allow_list) {
    deadline_timer.t = this;
  }
  ~Impl();

  static constexpr size_t kUrlCacheMax = 1024;
  std::unordered_map<std::string, Url> url_cache;

  // --- exchanges ---
  const Url* checked_url(const std::string& text);
  Exchange* alloc_exchange();
  void send(SendOp* op);
  void on_resolve_done(Exchange* ex);
  void on_resolved(Exchange* ex);
  void fail(Exchange* ex, ErrorCode code);
  void defer(Exchange* ex, DeferReason why, MonoTime not_before);
  void finish(Exchange* ex);
  void finish_now(Exchange* ex);
  void on_deadline(Exchange* ex);
  void on_deadlines();
  void link_deadline(Exchange* ex);
  void unlink_deadline(Exchange* ex);
  Exchange* dl_head = nullptr;
  Exchange* dl_tail = nullptr;
  struct DeadlineTimer final : Timer {
    Impl* t = nullptr;
    void on_timer() override { t->on_deadlines(); }
  } deadline_timer;
  void on_phase_timeout(Exchange* ex);

  // --- hosts, queues, pacing ---
  Host* get_host(const Url& url);
  void sweep_hosts();
  void enqueue(Host* h, Exchange* ex);
  void dequeue(Exchange* ex);
  void pump(Host* h);
  MonoTime pacing_slot(Host* h, MonoTime now, uint32_t ahead);
  MonoTime queue_full_slot(Host* h, MonoTime now);
  void schedule_pump(Host* h);
  Connection* find_idle(Host* h, const IpAddress& addr);
  bool evict_one_idle();

  // --- connections ---
  void open_conn(Host* h, Exchange* ex);
  void use_idle(Connection* c, Exchange* ex);
  void make_idle(Connection* c);
  void unlink_idle(Connection* c);
  void close_conn(Connection* c);
  void end_probe(Host* h);
  void maybe_free(Connection* c);
  void on_conn_op(Connection* c, Connection::OpKind kind, int res, uint32_t flags);
  void on_connect(Connection* c, int res);
  void on_send(Connection* c, int res);
  void on_recv(Connection* c, int res, const char* data);
  void on_plain(Connection* c, const char* data, size_t n);
  void on_eof(Connection* c, int res);
  void start_tls(Connection* c);
  void drive_handshake(Connection* c);
  void write_request(Connection* c);
  void response_done(Connection* c);
  std::string& send_buffer(Connection* c);
  bool kick_send(Connection* c);
  bool post_recv(Connection* c);
  void fail_conn(Connection* c, ErrorCode code);
};

namespace {
void Exchange::Resolve::on_complete() {
  ex->t->on_resolve_done(ex);
}
void Exchange::PhaseTimer::on_timer() {
  ex->t->on_phase_timeout(ex);
}
void Exchange::Soon::on_timer() {
  ex->t->finish_now(ex);
}
void Connection::Op::complete(int res, uint32_t flags) {
  c->t->on_conn_op(c, kind, res, flags);
}
void Connection::Idle::on_timer() {
  c->t->st.idle_expired++;
  c->t->close_conn(c);
}
void Host::Pump::on_timer() {
  h->t->pump(h);
}
}  // namespace

// --- exchanges --------------------------------------------------------------------------------

// URLs that passed check_url() under this transport's policy, so a hot endpoint is parsed
// once. Bounded: cleared when full (STYLE 6).
const Url* Impl::checked_url(const std::string& text) {
  auto it = url_cache.find(text);
  if (it != url_cache.end()) return &it->second;
  auto url = check_url(text, opt.url_policy);
  if (!url) return nullptr;
  if (url_cache.size() >= kUrlCacheMax) url_cache.clear();
  return &url_cache.emplace(text, std::move(url).value()).first->second;
}

Exchange* Impl::alloc_exchange() {
  if (free_ex.empty()) {
    exchanges.push_back(std::make_unique<Exchange>(this));
    return exchanges.back().get();
  }
  Exchange* ex = free_ex.back();
  free_ex.pop_back();
  return ex;
}

void Impl::send(SendOp* op) {
  if (destroying) {  // only from an on_complete() run by the destructor
    op->result = TransportResult{};
    op->result.code = ErrorCode::network(ECANCELED);
    op->on_complete();
    return;
  }
  if (!loop.in_turn()) loop.refresh_now();  // called from outside a turn: time moved on
  st.sends++;
  in_flight++;
  Exchange* ex = alloc_exchange();
  ex->op = op;
  ex->host = nullptr;
  ex->conn = nullptr;
  ex->addr_idx = 0;
  ex->orphan = false;
  reset_result(op->result);
  op->started_at = loop.wall_now();
  ex->t_start = loop.now();
  ex->deadline_at = ex->t_start + opt.exchange_timeout;
  link_deadline(ex);

  in_send = true;  // completions found here are deferred to a later turn (STYLE 5)
  const bool same_url = !ex->url_text.empty() && ex->url_text == op->request.url;
  const Url* url = same_url ? &ex->url : checked_url(op->request.url);
  if (url == nullptr) {
    st.refused_url++;
    ex->url_text.clear();
    fail(ex, url_error_code(check_url(op->request.url, opt.url_policy).error()));
  } else {
    if (!same_url) {
      ex->url = *url;  // copy-assign: reuses the exchange's string buffers
      ex->url_text = op->request.url;
      ex->url_host = nullptr;
    }
    if (ex->url.host_is_ip) {
      ex->addrs.clear();
      if (auto ip = parse_ip(ex->url.host)) ex->addrs.push_back(*ip);
      if (ex->addrs.empty()) {
        fail(ex, ErrorCode::of(K::kInvalidUrl));
      } else {
        on_resolved(ex);
      }
    } else {
      ex->phase = Phase::kResolving;
      ex->resolving = true;
      ex->t_mark = loop.now();
      ex->resolve.host = ex->url.host;
      resolver->resolve(&ex->resolve);  // never completes inline (Resolver contract)
    }
  }
  in_send = false;
}

void Impl::on_resolve_done(Exchange* ex) {
  ex->resolving = false;
  if (ex->orphan || destroying) {  // the exchange already completed (deadline)
    ex->orphan = false;
    if (!destroying) free_ex.push_back(ex);
    return;
  }
  ex->op->result.timings.dns = loop.now() - ex->t_mark;
  if (ex->resolve.failed || ex->resolve.addresses.empty()) {
    st.dns_failures++;
    fail(ex, ErrorCode::of(K::kDnsFailed));
    return;
  }
  ex->addrs.swap(ex->resolve.addresses);
  on_resolved(ex);
}

// SPEC R6 private_address: the answer of THIS resolution is checked and only
// those addresses are ever connected to (no second lookup, so no rebinding in between). A mixed
// answer (one public, one private address) is refused as a whole.
void Impl::on_resolved(Exchange* ex) {
  for (const IpAddress& a : ex->addrs) {
    if (!guard.allowed(a)) {
      st.refused_private_address++;
      fail(ex, ErrorCode::of(K::kPrivateAddress));
      return;
    }
  }
  if (ex->url_host == nullptr) ex->url_host = get_host(ex->url);  // hosts live as long as we do
  Host* h = ex->url_host;
  ex->host = h;
  const MonoTime now = loop.now();
  if (h->queued >= opt.max_queued_per_host) {  // bulkhead (R12.6): try again once it drained
    defer(ex, DeferReason::kQueueFull, queue_full_slot(h, now));
    return;
  }
  // Pacing: the token this request would get, behind everything queued before it. Beyond the
  // queue wait it goes back now, told when its token will be there (staggered by position, so
  // a burst of deferred requests does not come back all at once).
  if (h->bucket.token_at(now, h->queued) - now > opt.max_queue_wait) {
    defer(ex, DeferReason::kPacing, pacing_slot(h, now, h->queued));
    return;
  }
  enqueue(h, ex);
  pump(h);  // inside send() too: every completion it causes goes through finish() (deferred)
}

void Impl::fail(Exchange* ex, ErrorCode code) {
  ex->op->result.code = code;
  if (ex->conn) close_conn(ex->conn);
  finish(ex);
}

// Back-pressure of our own (SPEC R2.3): the op goes back unsent, with nothing in its result
// but the reason and when a new try may go. No connection was started for it.
void Impl::defer(Exchange* ex, DeferReason why, MonoTime not_before) {
  RC_CHECK(ex->conn == nullptr);
  if (ex->queued) dequeue(ex);
  TransportResult& r = ex->op->result;
  reset_result(r);
  r.deferred = why;
  r.not_before = loop.wall_now() + std::max(Duration(0), not_before - loop.now());
  st.deferred[static_cast<int>(why)]++;
  finish(ex);
}

void Impl::finish(Exchange* ex) {
  if (in_send) {
    loop.arm(&ex->soon, loop.now());
    return;
  }
  finish_now(ex);
}

void Impl::finish_now(Exchange* ex) {
  SendOp* op = ex->op;
  if (op == nullptr) return;
  unlink_deadline(ex);
  loop.disarm(&ex->phase_timer);
  loop.disarm(&ex->soon);
  if (ex->queued) dequeue(ex);
  if (ex->conn) close_conn(ex->conn);
  TransportResult& r = op->result;
  r.timings.total = loop.now() - ex->t_start;
  st.completed++;
  if (r.deferred != DeferReason::kNone) {
    // counted in defer()
  } else if (r.response_received) {
    st.responses++;
  } else if (r.code.kind == K::kTimeout) {
    st.timeouts++;
  } else if (r.code.kind == K::kNetwork || r.code.kind == K::kTlsCert ||
             r.code.kind == K::kTlsHandshake) {
    st.network_errors++;
  }
  ex->op = nullptr;
  ex->phase = Phase::kFree;
  in_flight--;
  if (ex->resolving) {
    ex->orphan = true;
  } else {
    free_ex.push_back(ex);
  }
  op->on_complete();
}

void Impl::link_deadline(Exchange* ex) {
  ex->dnext = nullptr;
  ex->dprev = dl_tail;
  if (dl_tail) {
    dl_tail->dnext = ex;
  } else {
    dl_head = ex;
  }
  dl_tail = ex;
  ex->dlinked = true;
  // Lazily armed: the timer may fire before the head's deadline (the head left); it re-arms.
  if (!deadline_timer.armed()) loop.arm(&deadline_timer, dl_head->deadline_at);
}

void Impl::unlink_deadline(Exchange* ex) {
  if (!ex->dlinked) return;
  if (ex->dprev) {
    ex->dprev->dnext = ex->dnext;
  } else {
    dl_head = ex->dnext;
  }
  if (ex->dnext) {
    ex->dnext->dprev = ex->dprev;
  } else {
    dl_tail = ex->dprev;
  }
  ex->dprev = ex->dnext = nullptr;
  ex->dlinked = false;
}

void Impl::on_deadlines() {
  const MonoTime now = loop.now();
  while (dl_head != nullptr && dl_head->deadline_at <= now) on_deadline(dl_head);
  if (dl_head != nullptr) loop.arm(&deadline_timer, dl_head->deadline_at);
}

void Impl::on_deadline(Exchange* ex) {
  if (ex->queued) {  // still waiting for its start (a slow DNS answer ate the time): never sent
    unlink_deadline(ex);
    defer(ex, DeferReason::kConnections, loop.now() + opt.defer_retry);
    return;
  }
  // SPEC R6: no answer within the exchange deadline → timeout (request_written tells the core
  // whether it is UNKNOWN, R12.1).
  ex->op->result.code = ErrorCode::of(K::kTimeout);
  if (ex->conn) close_conn(ex->conn);
  finish_now(ex);
}

void Impl::on_phase_timeout(Exchange* ex) {
  if (ex->phase == Phase::kConnecting) {
    fail(ex, ErrorCode::network(ETIMEDOUT));  // SPEC R6 network_<ERRNO>, R12.4
  } else if (ex->phase == Phase::kHandshake) {
    fail(ex, ErrorCode::of(K::kTlsHandshake));  // SPEC R12.4: the TLS handshake's own deadline
  }
}

// --- hosts, queues, pacing ----------------------------------------------------------------------

Host* Impl::get_host(const Url& url) {
  key_scratch.clear();
  key_scratch.push_back(url.tls ? 's' : 'p');
  key_scratch.append(url.host);
  key_scratch.push_back('|');
  append_uint(key_scratch, url.port);
  auto it = hosts.find(key_scratch);
  if (it != hosts.end()) return it->second.get();
  if (hosts.size() >= opt.max_hosts) sweep_hosts();
  auto h = std::make_unique<Host>();
  h->t = this;
  h->name = url.host;
  h->port = url.port;
  h->tls = url.tls;
  h->session_key = url.host + ":" + std::to_string(url.port);
  auto ov = rate_overrides.find(url.host);
  h->bucket.configure(ov != rate_overrides.end() ? ov->second : opt.default_rate, loop.now());
  Host* raw = h.get();
  hosts.emplace(key_scratch, std::move(h));
  return raw;
}

// Drops host entries that hold nothing: no connection, no queue, no pause, a full bucket
// (forgetting them changes no behaviour). Bounded state (STYLE 6); O(hosts), rare.
void Impl::sweep_hosts() {
  const MonoTime now = loop.now();
  for (auto& ex : exchanges) ex->url_host = nullptr;  // cached pointers may dangle after this
  for (auto it = hosts.begin(); it != hosts.end();) {
    Host* h = it->second.get();
    const bool unused = h->connections == 0 && h->queued == 0 && !h->pump_timer.armed() &&
                        h->tls_probe == nullptr && h->bucket.full(now) && h->paced_until <= now;
    if (unused) {
      it = hosts.erase(it);
    } else {
      ++it;
    }
  }
}

void Impl::enqueue(Host* h, Exchange* ex) {
  ex->phase = Phase::kQueued;
  ex->queued = true;
  ex->queued_at = loop.now();
  ex->qnext = nullptr;
  ex->qprev = h->qtail;
  if (h->qtail) {
    h->qtail->qnext = ex;
  } else {
    h->qhead = ex;
  }
  h->qtail = ex;
  h->queued++;
  if (h->queued > st.queued_max) st.queued_max = h->queued;
}

void Impl::dequeue(Exchange* ex) {
  Host* h = ex->host;
  if (ex->qprev) {
    ex->qprev->qnext = ex->qnext;
  } else {
    h->qhead = ex->qnext;
  }
  if (ex->qnext) {
    ex->qnext->qprev = ex->qprev;
  } else {
    h->qtail = ex->qprev;
  }
  ex->qprev = ex->qnext = nullptr;
  ex->queued = false;
  h->queued--;
}

void Impl::schedule_pump(Host* h) {
  if (h->queued == 0) return;
  if (!h->pump_timer.armed() || h->pump_timer.deadline() > loop.now()) {
    loop.arm(&h->pump_timer, loop.now());
  }
}

Connection* Impl::find_idle(Host* h, const IpAddress& addr) {
  for (Connection* c = h->idle_head; c != nullptr; c = c->hnext) {
    if (c->addr == addr) return c;  // pool key includes the pinned address
  }
  return nullptr;
}

bool Impl::evict_one_idle() {
  if (gidle_tail == nullptr) return false;
  close_conn(gidle_tail);  // least recently used, any host
  return true;
}

// Hands queued exchanges of `h` to connections, in order, as pacing and the connection limits
// allow. What cannot start within max_queue_wait of joining the queue goes back deferred (never
// failed: SPEC R2.3). Bounded: each iteration dequeues one exchange or returns.
void Impl::pump(Host* h) {
  while (h->qhead != nullptr) {
    Exchange* ex = h->qhead;
    const MonoTime now = loop.now();
    const MonoTime give_up_at = ex->queued_at + opt.max_queue_wait;
    const MonoTime token_at = h->bucket.next_token_at(now);
    if (token_at > now) {
      if (token_at > give_up_at) {  // e.g. the host's rate was lowered while it waited
        defer(ex, DeferReason::kPacing, pacing_slot(h, now, 0));
        continue;
      }
      loop.arm(&h->pump_timer, token_at);
      return;
    }
    Connection* c = find_idle(h, ex->addrs[ex->addr_idx]);
    bool room = true;
    if (c == nullptr && h->tls_probe != nullptr) {
      room = false;  // resumes once the probe has a session
    } else if (c == nullptr && h->connections >= opt.max_connections_per_host) {
      // Idle connections to another address of this host make room; else wait.
      if (h->idle_tail == nullptr) {
        room = false;
      } else {
        close_conn(h->idle_tail);
      }
    }
    if (room && c == nullptr && total_conns >= opt.max_connections_total && !evict_one_idle()) {
      room = false;
    }
    if (!room) {
      if (now >= give_up_at) {
        defer(ex, DeferReason::kConnections, now + opt.defer_retry);
        continue;
      }
      // A freed connection pumps at once (schedule_pump); this timer gives up on the head.
      if (!h->pump_timer.armed() || h->pump_timer.deadline() > give_up_at) {
        loop.arm(&h->pump_timer, give_up_at);
      }
      return;
    }
    (void)h->bucket.try_take(now);
    dequeue(ex);
    if (h->backlog_at_last_start) {  // the gap since the last start was spent draining
      const Duration gap = now - h->last_start;
      h->drain_gap = h->drain_gap == Duration{} ? gap : (h->drain_gap * 15 + gap) / 16;
    }
    h->last_start = now;
    h->backlog_at_last_start = h->qhead != nullptr;
    // The receiver's deadline starts now: the wait above was ours, not its (R6, R12.4); so does
    // the attempt (its started_at and duration in the log).
    unlink_deadline(ex);
    ex->deadline_at = now + opt.exchange_timeout;
    link_deadline(ex);
    ex->op->started_at = loop.wall_now();
    if (c) {
      use_idle(c, ex);
    } else {
      open_conn(h, ex);
    }
  }
}

// When a request deferred for pacing may come back: the token after `ahead` queued ones, and
// after every token already promised to requests deferred before it, so deferred requests come
// back one token apart instead of all at once.
MonoTime Impl::pacing_slot(Host* h, MonoTime now, uint32_t ahead) {
  MonoTime at = h->bucket.token_at(now, ahead);
  if (h->paced_until >= at) at = h->paced_until + h->bucket.interval();
  h->paced_until = at;
  return at;
}

// When a request turned away by a full queue may come back: when the queue should have room
// for it, behind every request turned away before it, one drain gap apart (so they neither all
// come back at once nor wait while the queue stands empty: a fixed max_queue_wait left a fast
// host shared by many endpoints idle for seconds). Before the drain is measured, defer_retry;
// never later than max_queue_wait.
MonoTime Impl::queue_full_slot(Host* h, MonoTime now) {
  if (h->drain_gap == Duration{}) return now + std::min(opt.defer_retry, opt.max_queue_wait);
  const Duration gap = std::max<Duration>(h->drain_gap, microseconds(10));
  MonoTime at = std::max(h->full_until, now) + gap;
  at = std::min(at, now + opt.max_queue_wait);
  h->full_until = at;
  return at;
}

// --- connections -------------------------------------------------------------------------------

void Impl::open_conn(Host* h, Exchange* ex) {
  const IpAddress& addr = ex->addrs[ex->addr_idx];
  const int fd =
      ::socket(addr.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      // Out of our own descriptors or memory: nothing went towards the receiver (SPEC R2.3).
      defer(ex, DeferReason::kConnections, loop.now() + opt.defer_retry);
      return;
    }
    fail(ex, ErrorCode::network(err));
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto* c = new Connection(this, h, opt.response, opt.recv_buffer_bytes, rx_ring == nullptr);
  c->fd = fd;
  c->slot = loop.register_fd(fd);
  c->addr = addr;
  c->sa_len = to_sockaddr(addr, h->port, &c->sa);
  c->state = ConnState::kConnecting;
  c->ex = ex;
  ex->conn = c;
  h->connections++;
  total_conns++;
  st.connections_opened++;
  if (h->tls && tls && tls->resumption() && tls->session(h->session_key) == nullptr) {
    h->tls_probe = c;
  }
  ex->phase = Phase::kConnecting;
  ex->op->result.connect_attempted = true;
  ex->t_mark = loop.now();
  if (!loop.connect(&c->connect_op, c->file(), reinterpret_cast<sockaddr*>(&c->sa), c->sa_len)) {
    // The loop has no room for the connect (its in-flight bound): our limit, not the receiver's.
    close_conn(c);
    defer(ex, DeferReason::kConnections, loop.now() + opt.defer_retry);
    return;
  }
  c->connect_pending = true;
  loop.arm(&ex->phase_timer, ex->t_mark + opt.connect_timeout);
}

void Impl::use_idle(Connection* c, Exchange* ex) {
  unlink_idle(c);
  loop.disarm(&c->idle_timer);
  c->state = ConnState::kActive;
  c->ex = ex;
  ex->conn = c;
  ex->op->result.reused_connection = true;
  ex->op->result.connect_attempted = true;
  st.requests_on_reused_connections++;
  write_request(c);
}

void Impl::make_idle(Connection* c) {
  Host* h = c->host;
  c->state = ConnState::kIdle;
  c->hprev = nullptr;
  c->hnext = h->idle_head;
  if (h->idle_head) {
    h->idle_head->hprev = c;
  } else {
    h->idle_tail = c;
  }
  h->idle_head = c;
  h->idle++;
  c->gprev = nullptr;
  c->gnext = gidle_head;
  if (gidle_head) {
    gidle_head->gprev = c;
  } else {
    gidle_tail = c;
  }
  gidle_head = c;
  total_idle++;
  c->idle_linked = true;
  loop.arm(&c->idle_timer, loop.now() + opt.idle_timeout);
}

void Impl::unlink_idle(Connection* c) {
  if (!c->idle_linked) return;
  Host* h = c->host;
  if (c->hprev) {
    c->hprev->hnext = c->hnext;
  } else {
    h->idle_head = c->hnext;
  }
  if (c->hnext) {
    c->hnext->hprev = c->hprev;
  } else {
    h->idle_tail = c->hprev;
  }
  if (c->gprev) {
    c->gprev->gnext = c->gnext;
  } else {
    gidle_head = c->gnext;
  }
  if (c->gnext) {
    c->gnext->gprev = c->gprev;
  } else {
    gidle_tail = c->gprev;
  }
  c->hprev = c->hnext = c->gprev = c->gnext = nullptr;
  h->idle--;
  total_idle--;
  c->idle_linked = false;
}

void Impl::end_probe(Host* h) {
  h->tls_probe = nullptr;
  schedule_pump(h);
}

void Impl::close_conn(Connection* c) {
  if (c->state == ConnState::kClosing) return;
  if (c->host->tls_probe == c) end_probe(c->host);
  unlink_idle(c);
  loop.disarm(&c->idle_timer);
  if (c->ex) {
    c->ex->conn = nullptr;
    c->ex = nullptr;
  }
  c->state = ConnState::kClosing;
  c->host->connections--;
  total_conns--;
  closing++;
  st.connections_closed++;
  if (c->ops_pending()) {
    ::shutdown(c->fd, SHUT_RDWR);  // pending recv/send complete at once
    loop.cancel_fd(c->file());     // and a pending connect is cancelled
  }
  schedule_pump(c->host);  // a slot is free
  maybe_free(c);
}

void Impl::maybe_free(Connection* c) {
  if (c->state != ConnState::kClosing || c->ops_pending() || c->in_callback) return;
  if (c->slot >= 0) loop.unregister_fd(c->slot);
  ::close(c->fd);
  closing--;
  delete c;
}

void Impl::fail_conn(Connection* c, ErrorCode code) {
  Exchange* ex = c->ex;
  close_conn(c);
  if (ex) fail(ex, code);
}

void Impl::on_conn_op(Connection* c, Connection::OpKind kind, int res, uint32_t flags) {
  c->in_callback = true;
  switch (kind) {
    case Connection::kConnectOp:
      c->connect_pending = false;
      if (c->state != ConnState::kClosing) on_connect(c, res);
      break;
    case Connection::kSendOp:
      c->send_pending = false;
      if (c->state != ConnState::kClosing) on_send(c, res);
      break;
    case Connection::kRecvOp: {
      if ((flags & IORING_CQE_F_MORE) == 0) c->recv_pending = false;  // (multishot) ended
      const char* data = c->rbuf.get();
      int bid = -1;
      if ((flags & IORING_CQE_F_BUFFER) != 0) {
        bid = static_cast<int>(flags >> IORING_CQE_BUFFER_SHIFT);
        data = rx_ring->data(static_cast<uint16_t>(bid));
      }
      if (c->state != ConnState::kClosing) on_recv(c, res, data);
      if (bid >= 0) rx_ring->recycle(static_cast<uint16_t>(bid));  // consumed synchronously
      break;
    }
  }
  c->in_callback = false;
  maybe_free(c);
}

void Impl::on_connect(Connection* c, int res) {
  Exchange* ex = c->ex;
  if (res < 0) {
    const int err = -res;
    close_conn(c);
    if (ex == nullptr) return;
    if (is_connect_phase(err) && ex->addr_idx + 1 < ex->addrs.size()) {
      ex->addr_idx++;  // another address of the same (checked) answer
      open_conn(ex->host, ex);
      return;
    }
    fail(ex, ErrorCode::network(err));
    return;
  }
  if (ex == nullptr) {  // cannot happen: a connecting connection always has its exchange
    close_conn(c);
    return;
  }
  loop.disarm(&ex->phase_timer);
  ex->op->result.timings.connect = loop.now() - ex->t_mark;
  if (!post_recv(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  if (c->host->tls) {
    start_tls(c);
  } else {
    c->state = ConnState::kActive;
    write_request(c);
  }
}

void Impl::start_tls(Connection* c) {
  Exchange* ex = c->ex;
  c->tls = std::make_unique<TlsStream>();
  if (!tls || !c->tls->init(*tls, ex->url.host, ex->url.host_is_ip, c->host->session_key)) {
    fail_conn(c, ErrorCode::of(K::kTlsHandshake));
    return;
  }
  c->state = ConnState::kHandshaking;
  ex->phase = Phase::kHandshake;
  ex->t_mark = loop.now();
  loop.arm(&ex->phase_timer, ex->t_mark + opt.tls_handshake_timeout);
  drive_handshake(c);
}

void Impl::drive_handshake(Connection* c) {
  const TlsStream::Status s = c->tls->handshake();
  c->tls->take_output(send_buffer(c));
  if (!kick_send(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  switch (s) {
    case TlsStream::Status::kOk: {
      Exchange* ex = c->ex;
      loop.disarm(&ex->phase_timer);
      ex->op->result.timings.tls = loop.now() - ex->t_mark;
      c->state = ConnState::kActive;
      write_request(c);
      return;
    }
    case TlsStream::Status::kWantRead:
      return;
    case TlsStream::Status::kCertError:
      fail_conn(c, ErrorCode::of(K::kTlsCert));
      return;
    default:
      fail_conn(c, ErrorCode::of(K::kTlsHandshake));
      return;
  }
}

std::string& Impl::send_buffer(Connection* c) {
  if (c->send_pending) return c->out_next;
  if (c->out_off == c->out.size()) {
    c->out.clear();
    c->out_off = 0;
  }
  return c->out;
}

bool Impl::kick_send(Connection* c) {
  if (c->send_pending) return true;
  if (c->out_off == c->out.size()) {
    c->out.clear();
    c->out_off = 0;
    if (c->out_next.empty()) return true;
    c->out.swap(c->out_next);
  }
  if (!loop.send(&c->send_op, c->file(), c->out.data() + c->out_off, c->out.size() - c->out_off)) {
    return false;
  }
  c->send_pending = true;
  return true;
}

bool Impl::post_recv(Connection* c) {
  if (c->recv_pending) return true;
  const bool ok = rx_ring ? loop.recv_multishot(&c->recv_op, c->file(), rx_ring->group())
                          : loop.recv(&c->recv_op, c->file(), c->rbuf.get(), c->buf_bytes);
  if (!ok) return false;
  c->recv_pending = true;
  return true;
}

// SPEC R11: POST, Host, Content-Type, Content-Length, User-Agent, the signature profile,
// the payload byte for byte. No Expect, no Accept-Encoding.
void Impl::write_request(Connection* c) {
  Exchange* ex = c->ex;
  const SendRequest& rq = ex->op->request;
  const Url& u = ex->url;
  ex->phase = Phase::kWriting;
  ex->t_write = loop.now();
  c->parser.reset();
  c->got_first_byte = false;
  c->extra_bytes = false;
  c->response_done_early = false;

  std::string& buf = c->tls ? req_scratch : send_buffer(c);
  if (c->tls) buf.clear();
  buf.append(rq.status_check ? "GET " : "POST ")
      .append(u.path_and_query)
      .append(" HTTP/1.1\r\nHost: ");
  const bool v6 = u.host.find(':') != std::string::npos;
  if (v6) buf.push_back('[');
  buf.append(u.host);
  if (v6) buf.push_back(']');
  if (u.port != (u.tls ? 443 : 80)) {
    buf.push_back(':');
    append_uint(buf, u.port);
  }
  buf.append("\r\nUser-Agent: ").append(opt.user_agent);
  if (rq.status_check) {
    buf.append("\r\n");  // a GET: no body, no Content-Type, no Content-Length
  } else {
    buf.append("\r\nContent-Type: application/json\r\nContent-Length: ");
    append_uint(buf, rq.body.size());
    buf.append("\r\n");
  }
  SignInput sign;
  sign.profile = rq.profile;
  sign.message_id = rq.message_id;
  sign.attempt = rq.attempt;
  sign.timestamp_s = loop.wall_now().ns() / 1'000'000'000;  // fresh per attempt (R11.3)
  sign.body = rq.body;
  sign.secrets = &rq.secrets;
  append_signature_headers(sign, buf);
  buf.append(rq.extra_headers);  // the endpoint's own, after ringcast's (operations.md "Endpoints")
  buf.append("\r\n").append(rq.body);
  if (c->tls) {
    if (c->tls->write(buf.data(), buf.size()) != TlsStream::Status::kOk) {
      fail_conn(c, ErrorCode::network(EPROTO));
      return;
    }
    c->tls->take_output(send_buffer(c));
  }
  if (!kick_send(c)) fail_conn(c, ErrorCode::network(ENOBUFS));
}

void Impl::on_send(Connection* c, int res) {
  if (res < 0) {
    fail_conn(c, ErrorCode::network(-res));
    return;
  }
  c->out_off += static_cast<size_t>(res);
  if (!kick_send(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  Exchange* ex = c->ex;
  if (ex != nullptr && ex->phase == Phase::kWriting && c->flushed()) {
    ex->op->result.request_written = true;  // every request byte reached the socket
    ex->phase = Phase::kReading;
    if (c->response_done_early) response_done(c);
  }
}

void Impl::on_recv(Connection* c, int res, const char* data) {
  if (res == -EINTR || res == -EAGAIN || res == -ENOBUFS) {
    if (!post_recv(c)) fail_conn(c, ErrorCode::network(ENOBUFS));
    return;
  }
  if (res <= 0) {
    on_eof(c, res);
    return;
  }
  const size_t n = static_cast<size_t>(res);
  switch (c->state) {
    case ConnState::kIdle:
      if (!c->tls) {  // unsolicited bytes on an idle connection: not reusable
        st.idle_closed_by_peer++;
        close_conn(c);
        return;
      }
      [[fallthrough]];
    case ConnState::kHandshaking:
    case ConnState::kActive:
      break;
    default:
      close_conn(c);
      return;
  }
  if (c->tls) {
    c->tls->feed(data, n);
    if (c->state == ConnState::kHandshaking) {
      drive_handshake(c);
      if (c->state != ConnState::kActive) {
        if (c->state != ConnState::kClosing && !post_recv(c)) {
          fail_conn(c, ErrorCode::network(ENOBUFS));
        }
        return;
      }
    }
    for (;;) {
      TlsStream::Status s;
      const size_t got = c->tls->read(plain_scratch.get(), plain_scratch_bytes, &s);
      // Post-handshake messages (session tickets) may need a reply... BoringSSL writes none
      // for a client, but flush defensively.
      if (c->tls->pending_output() > 0) {
        c->tls->take_output(send_buffer(c));
        if (!kick_send(c)) {
          fail_conn(c, ErrorCode::network(ENOBUFS));
          return;
        }
      }
      if (got > 0) {
        if (c->state == ConnState::kIdle) {
          st.idle_closed_by_peer++;
          close_conn(c);
          return;
        }
        on_plain(c, plain_scratch.get(), got);
        if (c->state == ConnState::kClosing) break;
        continue;  // keep reading: a ticket may follow the response in the same read
      }
      if (s == TlsStream::Status::kWantRead) break;
      if (s == TlsStream::Status::kClosed) {
        on_eof(c, 0);
        return;
      }
      fail_conn(c, ErrorCode::network(EPROTO));
      return;
    }
    if (c->host->tls_probe == c && c->tls->got_session()) end_probe(c->host);
  } else {
    on_plain(c, data, n);
  }
  if (c->state != ConnState::kClosing && !post_recv(c)) {
    fail_conn(c, ErrorCode::network(ENOBUFS));
  }
}

void Impl::on_plain(Connection* c, const char* data, size_t n) {
  Exchange* ex = c->ex;
  if (ex == nullptr || c->response_done_early) {  // bytes nobody asked for
    close_conn(c);
    return;
  }
  if (!c->got_first_byte) {
    c->got_first_byte = true;
    ex->op->result.timings.first_byte = loop.now() - ex->t_write;
  }
  size_t consumed = 0;
  switch (c->parser.feed(data, n, &consumed)) {
    case ResponseParser::State::kNeedMore:
      return;
    case ResponseParser::State::kDone:
      c->extra_bytes = consumed < n;
      if (ex->phase == Phase::kWriting) {
        // The receiver answered before our write completed (e.g. 413 mid-body): wait for the
        // send completion so request_written is known, then finish.
        c->response_done_early = true;
        return;
      }
      response_done(c);
      return;
    case ResponseParser::State::kError:
      fail_conn(c, ErrorCode::network(c->parser.error_errno()));
      return;
  }
}

void Impl::on_eof(Connection* c, int res) {
  c->eof = true;
  Exchange* ex = c->ex;
  switch (c->state) {
    case ConnState::kIdle:
      st.idle_closed_by_peer++;  // detected before any request used it
      close_conn(c);
      return;
    case ConnState::kHandshaking:
      fail_conn(c, ErrorCode::of(K::kTlsHandshake));
      return;
    case ConnState::kActive:
      break;
    default:
      close_conn(c);
      return;
  }
  if (ex == nullptr) {
    close_conn(c);
    return;
  }
  if (c->parser.finish_eof() == ResponseParser::State::kDone) {
    if (ex->phase == Phase::kWriting) {
      c->response_done_early = true;
      return;  // on_send finishes it (the send fails or completes soon)
    }
    response_done(c);
    return;
  }
  fail_conn(c, ErrorCode::network(res < 0 ? -res : ECONNRESET));
}

void Impl::response_done(Connection* c) {
  Exchange* ex = c->ex;
  TransportResult& r = ex->op->result;
  const ResponseParser& p = c->parser;
  r.response_received = true;
  r.http_status = static_cast<uint16_t>(p.status());
  r.code = ErrorCode::none();
  r.retry_after = p.retry_after();
  r.body_prefix = p.body_prefix();
  Host* h = c->host;
  if (c->tls) {
    // Records already received behind the response: application data there is unsolicited
    // (the connection must not carry it into the next exchange); tickets are fine.
    char drain[2048];
    for (;;) {
      TlsStream::Status s;
      if (c->tls->read(drain, sizeof(drain), &s) > 0) {
        c->extra_bytes = true;
        continue;
      }
      if (s != TlsStream::Status::kWantRead) c->eof = true;  // close_notify or a bad record
      break;
    }
  }
  // Reuse only after a complete response on a clean connection.
  const bool reusable =
      p.keep_alive() && !p.body_capped() && !c->extra_bytes && !c->eof && c->flushed();
  c->ex = nullptr;
  ex->conn = nullptr;
  if (h->tls_probe == c && !c->tls->got_session()) end_probe(h);  // no ticket: stop waiting
  if (reusable) {
    make_idle(c);
  } else {
    close_conn(c);
  }
  schedule_pump(h);
  finish(ex);
}

// --- lifetime and public API ------------------------------------------------------------------

Impl::~Impl() {
  destroying = true;
  // Complete whatever is still in flight, then close every connection.
  for (auto& ex : exchanges) {
    if (ex->op != nullptr) {
      ex->op->result.code = ErrorCode::network(ECANCELED);
      if (ex->conn) close_conn(ex->conn);
      finish_now(ex.get());
    }
    loop.disarm(&ex->soon);
  }
  loop.disarm(&deadline_timer);
  for (auto& [key, h] : hosts) {
    loop.disarm(&h->pump_timer);
    while (h->idle_head) close_conn(h->idle_head);
  }
  // Withdraw lookups still running so no callback reaches a freed exchange.
  for (auto& ex : exchanges) {
    if (ex->resolving && resolver->cancel(&ex->resolve)) ex->resolving = false;
  }
  own_resolver.reset();  // drops whatever it still had without calling back
  for (int i = 0; i < 2000 && closing > 0; ++i) loop.run_once(milliseconds(1));
  for (auto& ex : exchanges) {
    // An injected resolver that cannot cancel still holds this ResolveOp: leak the exchange
    // rather than free it under the resolver.
    if (ex->resolving && own_resolver == nullptr) (void)ex.release();
  }
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpTransport::~HttpTransport() = default;

Result<std::unique_ptr<HttpTransport>> HttpTransport::create(Loop& loop,
                                                             const HttpTransportOptions& options,
                                                             Resolver* resolver) {
  auto impl = std::make_unique<Impl>(loop, options);
  if (resolver != nullptr) {
    impl->resolver = resolver;
  } else {
    auto r = CaresResolver::create(loop, options.dns);
    if (!r) return r.error();
    impl->own_resolver = std::move(r).value();
    impl->resolver = impl->own_resolver.get();
  }
  if (options.multishot_recv) {
    // A shared ring of receive buffers: no per-connection buffer, no re-arming per response.
    auto ring = BufferRing::create(loop, options.recv_buffers,
                                   static_cast<uint32_t>(options.recv_buffer_bytes));
    if (ring) impl->rx_ring = std::move(ring).value();  // else: one-shot recv per connection
  }
  impl->plain_scratch_bytes = std::max<size_t>(options.recv_buffer_bytes, 16 * 1024);
  impl->plain_scratch = std::make_unique<char[]>(impl->plain_scratch_bytes);
  auto tls = TlsClientContext::create(options.tls);
  if (!tls) return tls.error();
  impl->tls = std::move(tls).value();
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

void HttpTransport::send(SendOp* op) {
  impl_->send(op);
}

void HttpTransport::set_rate_limit(std::string_view host, RateLimit limit) {
  impl_->rate_overrides[std::string(host)] = limit;
  for (auto& [key, h] : impl_->hosts) {
    if (h->name == host) h->bucket.configure(limit, impl_->loop.now());
  }
}

void HttpTransport::close_idle() {
  while (impl_->gidle_head) impl_->close_conn(impl_->gidle_head);
}

HttpTransportStats HttpTransport::stats() const {
  return impl_->st;
}
const TlsStats& HttpTransport::tls_stats() const {
  return impl_->tls->stats();
}
uint32_t HttpTransport::connections() const {
  return impl_->total_conns;
}
uint32_t HttpTransport::idle_connections() const {
  return impl_->total_idle;
}
uint32_t HttpTransport::in_flight() const {
  return impl_->in_flight;
}

}  // namespace ringcast::net
