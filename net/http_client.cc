// The HTTP transport's send path (SPEC R6, R12.4): the URL check, DNS and the address guard,
// deferral (R2.3), completion and the exchange deadline; its lifetime and public API. The pools
// are in net/http_pool.cc, a connection's I/O in net/http_connection.cc.
#include "net/http_client.h"

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/ip_address.h"
#include "core/result.h"
#include "core/time.h"
#include "core/transport.h"
#include "core/types.h"
#include "core/url.h"
#include "net/buffer_ring.h"
#include "net/dns.h"
#include "net/http_client_internal.h"
#include "net/loop.h"
#include "net/tls.h"

namespace ringcast::net {

namespace {

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

}  // namespace

namespace http_detail {
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
}  // namespace http_detail

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
