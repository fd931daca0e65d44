// Internal to the HTTP client's files (net/http_client.cc, http_pool.cc, http_connection.cc):
// what they share — an exchange (one send() in progress), a connection, a host entry, and the
// transport's state (HttpTransport::Impl) whose members the three files define.
#pragma once

#include <sys/socket.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/address_guard.h"
#include "core/ip_address.h"
#include "core/resolver.h"
#include "core/time.h"
#include "core/transport.h"
#include "core/types.h"
#include "core/url.h"
#include "net/buffer_ring.h"
#include "net/dns.h"
#include "net/http_client.h"
#include "net/http_response.h"
#include "net/loop.h"
#include "net/pacing.h"
#include "net/tls.h"

namespace ringcast::net {

namespace http_detail {

using K = ErrorCode::Kind;
using Impl = HttpTransport::Impl;

inline void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  (void)ec;
  out.append(buf, static_cast<size_t>(end - buf));
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

}  // namespace http_detail

// The client's files (and HttpTransport::Impl below) name these unqualified, as when they were
// one file's own.
using http_detail::append_uint;
using http_detail::Connection;
using http_detail::ConnState;
using http_detail::Exchange;
using http_detail::Host;
using http_detail::Impl;
using http_detail::K;
using http_detail::Phase;

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

}  // namespace ringcast::net
