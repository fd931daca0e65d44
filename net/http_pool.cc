// The HTTP transport's per-host pools: host entries, their queues and pacing (back-pressure,
// SPEC R2.3), and the connections opened, reused, kept idle and closed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "core/ip_address.h"
#include "core/time.h"
#include "core/types.h"
#include "core/url.h"
#include "net/http_client_internal.h"
#include "net/loop.h"
#include "net/pacing.h"
#include "net/tls.h"

namespace ringcast::net {

namespace {

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

}  // namespace

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

}  // namespace ringcast::net
