#include "net/dns.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ringcast::net {

namespace {
ares_channel chan(void* p) {
  return static_cast<ares_channel>(p);
}

std::optional<IpAddress> from_sockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    IpAddress ip;
    std::memcpy(ip.bytes.data(), &in->sin_addr, 4);
    return ip;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    std::array<uint8_t, 16> b{};
    std::memcpy(b.data(), &in6->sin6_addr, 16);
    return IpAddress::v6(b);
  }
  return std::nullopt;
}
}  // namespace

// One c-ares lookup shared by every resolve() of the same host while it runs.
struct CaresResolver::Query {
  CaresResolver* owner = nullptr;
  std::string host;
  std::vector<ResolveOp*> waiters;
  bool detached = false;  // the deadline fired: c-ares' callback only frees the query
  class Deadline final : public Timer {
   public:
    explicit Deadline(Query* q) : q_(q) {}
    void on_timer() override {
      Query* q = q_;
      CaresResolver* r = q->owner;
      r->stats_.deadline_expired++;
      q->detached = true;
      r->finish(q, /*failed=*/true);
    }

   private:
    Query* q_;
  } deadline{this};
};

// A c-ares socket watched with one-shot loop polls.
struct CaresResolver::Watch final : IoOp {
  CaresResolver* owner = nullptr;
  int fd = -1;
  bool want_read = false;
  bool want_write = false;
  bool poll_pending = false;
  unsigned polled_mask = 0;
  bool dead = false;
  void complete(int res, uint32_t) override { owner->on_poll(this, res); }
};

class CaresResolver::AresTimer final : public Timer {
 public:
  explicit AresTimer(CaresResolver* r) : r_(r) {}
  void on_timer() override { r_->on_ares_timer(); }

 private:
  CaresResolver* r_;
};

// Runs queued completions on the next turn (a timer, so it can be disarmed at destruction).
class CaresResolver::DeferredDone final : public Timer {
 public:
  explicit DeferredDone(CaresResolver* r) : r_(r) {}
  void on_timer() override { r_->flush_done(); }

 private:
  CaresResolver* r_;
};

CaresResolver::CaresResolver(Loop& loop, const DnsOptions& options)
    : loop_(loop),
      options_(options),
      ares_timer_(std::make_unique<AresTimer>(this)),
      done_task_(std::make_unique<DeferredDone>(this)) {}

Result<std::unique_ptr<CaresResolver>> CaresResolver::create(Loop& loop,
                                                             const DnsOptions& options) {
  std::unique_ptr<CaresResolver> r(new CaresResolver(loop, options));
  if (auto rc = r->init(); !rc) return rc.error();
  return r;
}

Result<void> CaresResolver::init() {
  static const int kLibInit = ares_library_init(ARES_LIB_INIT_ALL);
  if (kLibInit != ARES_SUCCESS) return make_error(Errc::kIo, "ares_library_init failed");
  ares_options opts{};
  int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
  opts.sock_state_cb = &CaresResolver::on_sock_state;
  opts.sock_state_cb_data = this;
  opts.timeout = options_.try_timeout_ms;
  opts.tries = options_.tries;
  std::string lookups = options_.lookups;
  if (!lookups.empty()) {
    mask |= ARES_OPT_LOOKUPS;
    opts.lookups = lookups.data();
  }
  ares_channel c = nullptr;
  if (ares_init_options(&c, &opts, mask) != ARES_SUCCESS) {
    return make_error(Errc::kIo, "ares_init_options failed");
  }
  channel_ = c;
  if (!options_.servers.empty() &&
      ares_set_servers_ports_csv(c, options_.servers.c_str()) != ARES_SUCCESS) {
    return make_error(Errc::kInvalidArgument, "bad DNS servers", "servers");
  }
  return ok();
}

CaresResolver::~CaresResolver() {
  destroying_ = true;
  loop_.disarm(ares_timer_.get());
  loop_.disarm(done_task_.get());
  // ares_destroy() calls every pending callback with ARES_EDESTRUCTION (queries are freed
  // there) and closes its sockets through on_sock_state (watches become dead).
  if (channel_) ares_destroy(chan(channel_));
  for (auto& [fd, w] : watches_) {
    w->dead = true;
    if (w->poll_pending) loop_.cancel(w.get());
    dead_watches_.push_back(std::move(w));
  }
  watches_.clear();
  // Polls hold pointers to the watches: wait (bounded) for their cancellations.
  auto any_pending = [&] {
    return std::any_of(dead_watches_.begin(), dead_watches_.end(),
                       [](const auto& w) { return w->poll_pending; });
  };
  for (int i = 0; i < 1000 && any_pending(); ++i) loop_.run_once(milliseconds(1));
  if (any_pending()) {
    for (auto& w : dead_watches_) {
      if (w->poll_pending) (void)w.release();  // leaked rather than freed under the kernel
    }
  }
}

void CaresResolver::resolve(ResolveOp* op) {
  stats_.lookups++;
  op->addresses.clear();
  op->failed = false;
  op->ttl = Duration::zero();
  if (auto ip = parse_ip(op->host)) {  // a literal needs no lookup
    op->addresses.push_back(*ip);
    deliver(op);
    return;
  }
  auto cached = cache_.find(op->host);
  if (cached != cache_.end()) {
    if (cached->second.expires_at > loop_.now()) {
      stats_.cache_hits++;
      op->addresses = cached->second.addresses;
      op->ttl = cached->second.expires_at - loop_.now();
      deliver(op);
      return;
    }
    cache_.erase(cached);
  }
  auto pending = pending_.find(op->host);
  if (pending != pending_.end()) {
    pending->second->waiters.push_back(op);
    return;
  }
  auto* q = new Query;
  q->owner = this;
  q->host = op->host;
  q->waiters.push_back(op);
  pending_.emplace(q->host, q);
  loop_.arm_after(&q->deadline, options_.deadline);
  stats_.queries++;
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // May call on_addrinfo synchronously (hosts file, bad name): completions are deferred.
  ares_getaddrinfo(chan(channel_), q->host.c_str(), nullptr, &hints, &CaresResolver::on_addrinfo,
                   q);
  update_timer();
}

bool CaresResolver::cancel(ResolveOp* op) {
  for (auto& [host, q] : pending_) {
    auto it = std::find(q->waiters.begin(), q->waiters.end(), op);
    if (it != q->waiters.end()) {
      q->waiters.erase(it);  // the query itself runs on (it may fill the cache)
      return true;
    }
  }
  auto it = std::find(done_.begin(), done_.end(), op);
  if (it != done_.end()) {
    done_.erase(it);
    return true;
  }
  return false;  // unknown: already completed
}

void CaresResolver::on_addrinfo(void* arg, int status, int, ares_addrinfo* res) {
  auto* q = static_cast<Query*>(arg);
  CaresResolver* r = q->owner;
  if (status == ARES_EDESTRUCTION || r->destroying_ || q->detached) {
    if (res) ares_freeaddrinfo(res);
    r->loop_.disarm(&q->deadline);
    if (!q->detached && r->pending_.count(q->host) && r->pending_[q->host] == q) {
      r->pending_.erase(q->host);
    }
    delete q;
    return;
  }
  std::vector<IpAddress> addrs;
  int ttl_s = INT32_MAX;
  if (status == ARES_SUCCESS && res != nullptr) {
    for (ares_addrinfo_node* n = res->nodes; n != nullptr; n = n->ai_next) {
      if (auto ip = from_sockaddr(n->ai_addr)) {
        if (std::find(addrs.begin(), addrs.end(), *ip) == addrs.end()) addrs.push_back(*ip);
        ttl_s = std::min(ttl_s, std::max(n->ai_ttl, 0));
      }
    }
  }
  if (res) ares_freeaddrinfo(res);
  const bool failed = addrs.empty();
  if (!failed) {
    Duration ttl = seconds(ttl_s);
    ttl = std::clamp(ttl, r->options_.ttl_min, r->options_.ttl_max);
    if (ttl > Duration::zero()) {
      if (r->cache_.size() >= r->options_.cache_entries_max) {
        // Evict expired entries first, else an arbitrary one (bounded, STYLE 6).
        for (auto it = r->cache_.begin(); it != r->cache_.end();) {
          it = it->second.expires_at <= r->loop_.now() ? r->cache_.erase(it) : std::next(it);
        }
        if (r->cache_.size() >= r->options_.cache_entries_max) r->cache_.erase(r->cache_.begin());
      }
      r->cache_[q->host] = CacheEntry{addrs, r->loop_.now() + ttl, ttl};
    }
    for (ResolveOp* op : q->waiters) {
      op->addresses = addrs;
      op->ttl = ttl;
    }
  }
  r->finish(q, failed);
  if (!q->detached) delete q;
}

// Completes every waiter of `q`. A detached query (deadline) stays allocated until c-ares
// calls back; otherwise the caller frees it.
void CaresResolver::finish(Query* q, bool failed) {
  loop_.disarm(&q->deadline);
  auto it = pending_.find(q->host);
  if (it != pending_.end() && it->second == q) pending_.erase(it);
  for (ResolveOp* op : q->waiters) {
    if (failed) {
      op->failed = true;
      op->addresses.clear();
      stats_.failures++;
    }
    deliver(op);
  }
  q->waiters.clear();
}

void CaresResolver::deliver(ResolveOp* op) {
  done_.push_back(op);
  if (!done_task_->armed()) loop_.arm(done_task_.get(), loop_.now());
}

void CaresResolver::flush_done() {
  std::vector<ResolveOp*> batch;
  batch.swap(done_);
  for (ResolveOp* op : batch) op->on_complete();
  dead_watches_.erase(std::remove_if(dead_watches_.begin(), dead_watches_.end(),
                                     [](const auto& w) { return !w->poll_pending; }),
                      dead_watches_.end());
}

// --- c-ares sockets and timers on the loop -------------------------------------------------

void CaresResolver::on_sock_state(void* data, int fd, int readable, int writable) {
  static_cast<CaresResolver*>(data)->watch(fd, readable != 0, writable != 0);
}

void CaresResolver::watch(int fd, bool readable, bool writable) {
  auto it = watches_.find(fd);
  if (!readable && !writable) {  // c-ares closes the socket
    if (it == watches_.end()) return;
    std::unique_ptr<Watch> w = std::move(it->second);
    watches_.erase(it);
    w->dead = true;
    if (w->poll_pending) loop_.cancel(w.get());
    dead_watches_.push_back(std::move(w));  // freed on a later turn, never under a callback
    return;
  }
  Watch* w;
  if (it == watches_.end()) {
    auto nw = std::make_unique<Watch>();
    nw->owner = this;
    nw->fd = fd;
    w = nw.get();
    watches_.emplace(fd, std::move(nw));
  } else {
    w = it->second.get();
  }
  w->want_read = readable;
  w->want_write = writable;
  if (w->poll_pending) {
    const unsigned want = (readable ? POLLIN : 0u) | (writable ? POLLOUT : 0u);
    if ((want & ~w->polled_mask) != 0) loop_.cancel(w);  // re-armed with the wider mask
    return;
  }
  rearm_poll(w);
}

void CaresResolver::rearm_poll(Watch* w) {
  const unsigned mask = (w->want_read ? POLLIN : 0u) | (w->want_write ? POLLOUT : 0u);
  if (mask == 0 || destroying_) return;
  if (!loop_.poll(w, w->fd, mask)) {
    // No capacity: c-ares' own timer retries the socket work; the deadline bounds the lookup.
    return;
  }
  w->poll_pending = true;
  w->polled_mask = mask;
}

void CaresResolver::on_poll(Watch* w, int res) {
  w->poll_pending = false;
  if (w->dead || destroying_) return;  // freed by flush_done() or the destructor
  if (res > 0) {
    const ares_socket_t rfd = (res & (POLLIN | POLLERR | POLLHUP)) ? w->fd : ARES_SOCKET_BAD;
    const ares_socket_t wfd = (res & (POLLOUT | POLLERR)) ? w->fd : ARES_SOCKET_BAD;
    ares_process_fd(chan(channel_), rfd, wfd);  // may close it (w becomes dead, stays valid)
  }
  if (!w->dead) rearm_poll(w);
  update_timer();
}

void CaresResolver::update_timer() {
  if (destroying_) return;
  timeval tv{};
  timeval* t = ares_timeout(chan(channel_), nullptr, &tv);
  if (t == nullptr) {
    loop_.disarm(ares_timer_.get());
    return;
  }
  const Duration d = seconds(t->tv_sec) + microseconds(t->tv_usec);
  loop_.arm(ares_timer_.get(), loop_.now() + d);
}

void CaresResolver::on_ares_timer() {
  ares_process_fd(chan(channel_), ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  update_timer();
}

}  // namespace ringcast::net
