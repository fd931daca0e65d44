#include "redis/cluster.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "net/loop.h"
#include "net/tls.h"
#include "redis/slot.h"

namespace ringcast::redis {
namespace {

// Node indices live in int16_t slot entries (-1: no node).
static_assert(kSlots - 1 <= INT16_MAX, "a node index per slot fits int16_t");

Error err(Errc code, const char* message, const char* reason) {
  return make_error(code, message, nullptr, reason);
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" -> slot, address.
bool parse_redirect(std::string_view msg, int* slot, std::string_view* address) {
  const size_t a = msg.find(' ');
  if (a == std::string_view::npos) return false;
  const size_t b = msg.find(' ', a + 1);
  if (b == std::string_view::npos) return false;
  std::string_view s = msg.substr(a + 1, b - a - 1);
  int v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v >= kSlots) return false;
  *slot = v;
  *address = msg.substr(b + 1);
  return !address->empty();
}

}  // namespace

bool parse_address(std::string_view address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view h = address.substr(0, colon);
  std::string_view p = address.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || end != p.data() + p.size() || v == 0 || v > 65535 || h.empty()) {
    return false;
  }
  host->assign(h);
  *port = static_cast<uint16_t>(v);
  return true;
}

// One command at the cluster layer: it keeps the encoded bytes so that a redirect can re-send
// them. The request is its own timer (retry backoff, or its deadline while it waits for a
// route).
struct Request final : net::Timer {
  enum class State : uint8_t { kInFlight, kWaitRoute, kBackoff };
  ClusterClient::Impl* c = nullptr;
  Request* prev = nullptr;  // every live request (for the destructor)
  Request* next = nullptr;
  Request* wprev = nullptr;  // requests waiting for a route
  Request* wnext = nullptr;
  State state = State::kInFlight;
  std::string bytes;
  int slot = -1;  // -1: keyless
  MonoTime deadline;
  Callback cb;
  uint32_t redirects = 0;
  uint32_t retries = 0;
  std::string ask_node;
  std::optional<Reply> last_reply;  // the last TRYAGAIN / CLUSTERDOWN, returned at the deadline
  void on_timer() override;
};

struct ClusterClient::Impl {
  struct Node {
    std::string address;
    std::string host;
    std::unique_ptr<Connection> conn;
  };
  struct TimerCall final : net::Timer {
    Impl* impl;
    void (Impl::*fn)();
    TimerCall(Impl* i, void (Impl::*f)()) : impl(i), fn(f) {}
    void on_timer() override { (impl->*fn)(); }
  };

  Impl(net::Loop& l, const ClusterOptions& o) : loop(l), opt(o), slots(kSlots, -1) {}
  ~Impl();

  net::Loop& loop;
  ClusterOptions opt;
  // TLS (SPEC R14): one context for every node's connection (this loop's thread only), built
  // from opt.connection.tls unless the caller gave one. Declared before `nodes`: it outlives
  // them.
  std::unique_ptr<net::TlsClientContext> tls;
  std::vector<std::unique_ptr<Node>> nodes;
  std::unordered_map<std::string, int> node_index;
  std::vector<int16_t> slots;
  bool complete = false;
  ClusterStats st;
  Request* live = nullptr;
  uint32_t live_count = 0;
  Request* waiting = nullptr;
  bool closing = false;
  bool refreshing = false;
  bool refresh_again = false;
  bool refreshed_once = false;
  MonoTime last_refresh;
  size_t refresh_cursor = 0;
  size_t refresh_attempts_left = 0;
  std::vector<std::pair<Callback, Error>> refusals;
  TimerCall soon{this, &Impl::on_soon};
  TimerCall refresh_timer{this, &Impl::request_refresh};

  // --- nodes
  int node_for(std::string_view address) {
    std::string key(address);
    if (auto it = node_index.find(key); it != node_index.end()) return it->second;
    if (nodes.size() >= opt.max_nodes) return -1;
    std::string host;
    uint16_t port = 0;
    if (!parse_address(address, &host, &port)) return -1;
    ConnectionOptions co = opt.connection;
    co.host = host;
    co.port = port;
    // A node that went down may have been failed over: ask for the map again (on the next
    // turn, rate-limited). Without this, commands for its slots would wait on a dead node for
    // good, since only a reply (MOVED) or a cut mid-command used to trigger a refresh.
    co.on_event = [this, user = opt.connection.on_event](const ConnectionEvent& e) {
      if (user) user(e);
      if (e.state == ConnState::kBackoff && !closing && !refresh_timer.armed()) {
        loop.arm(&refresh_timer, loop.now());
      }
    };
    auto conn = Connection::create(loop, co);
    if (!conn) return -1;
    auto n = std::make_unique<Node>();
    n->address = key;
    n->host = host;
    n->conn = std::move(conn).value();
    nodes.push_back(std::move(n));
    const int idx = static_cast<int>(nodes.size() - 1);
    node_index.emplace(std::move(key), idx);
    return idx;
  }
  int any_node() const {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i]->conn->ready()) return static_cast<int>(i);
    }
    return nodes.empty() ? -1 : 0;
  }

  // --- requests
  void link(Request* r) {
    r->prev = nullptr;
    r->next = live;
    if (live != nullptr) live->prev = r;
    live = r;
    live_count++;
  }
  void unlink(Request* r) {
    if (r->prev != nullptr) {
      r->prev->next = r->next;
    } else {
      live = r->next;
    }
    if (r->next != nullptr) r->next->prev = r->prev;
    live_count--;
  }
  void wait_link(Request* r) {
    r->wprev = nullptr;
    r->wnext = waiting;
    if (waiting != nullptr) waiting->wprev = r;
    waiting = r;
  }
  void wait_unlink(Request* r) {
    if (r->wprev != nullptr) {
      r->wprev->wnext = r->wnext;
    } else {
      waiting = r->wnext;
    }
    if (r->wnext != nullptr) r->wnext->wprev = r->wprev;
    r->wprev = r->wnext = nullptr;
  }
  void finish(Request* r, Result<Reply> result) {
    loop.disarm(r);
    if (r->state == Request::State::kWaitRoute) wait_unlink(r);
    unlink(r);
    Callback cb = std::move(r->cb);
    delete r;
    cb(std::move(result));
  }
  void refuse(Callback cb, Error e) {
    st.refused++;
    refusals.emplace_back(std::move(cb), e);
    if (!soon.armed()) loop.arm(&soon, loop.now());
  }
  void on_soon() {
    auto list = std::move(refusals);
    refusals.clear();
    for (auto& [cb, e] : list) cb(e);
  }

  void dispatch(Request* r) {
    r->state = Request::State::kInFlight;
    int idx;
    if (!r->ask_node.empty()) {
      idx = node_for(r->ask_node);
      r->ask_node.clear();
      if (idx < 0) {
        finish(r, err(Errc::kUnavailable, "redis: ASK names a node that cannot be used", kNoRoute));
        return;
      }
      // ASKING applies to the next command on that connection: both leave in one batch.
      nodes[static_cast<size_t>(idx)]->conn->command(
          {"ASKING"}, [](Result<Reply>) {}, CommandOptions{.deadline = r->deadline});
    } else if (r->slot < 0) {
      idx = any_node();
    } else {
      idx = slots[static_cast<size_t>(r->slot)];
    }
    if (idx < 0) {
      wait_route(r);
      return;
    }
    nodes[static_cast<size_t>(idx)]->conn->command_encoded(
        r->bytes, r->deadline, [this, r](Result<Reply> res) { on_reply(r, std::move(res)); });
  }
  // At the deadline: the server's last TRYAGAIN/CLUSTERDOWN if there was one, else kNoRoute.
  void no_route(Request* r) {
    if (r->last_reply) {
      Reply last = std::move(*r->last_reply);
      finish(r, std::move(last));
      return;
    }
    finish(r, err(Errc::kUnavailable, "redis: no node known for the key's slot by the deadline",
                  kNoRoute));
  }
  void wait_route(Request* r) {
    if (loop.now() >= r->deadline) {
      no_route(r);
      return;
    }
    r->state = Request::State::kWaitRoute;
    wait_link(r);
    st.waited_for_route++;
    loop.arm(r, r->deadline);
    request_refresh();
  }
  void on_request_timer(Request* r) {
    if (r->state == Request::State::kBackoff) {
      dispatch(r);
    } else if (r->state == Request::State::kWaitRoute) {
      no_route(r);
    }
  }
  void on_reply(Request* r, Result<Reply> res) {
    if (closing || !res.ok() || !res->is_error()) {
      // A cut mid-command, or a command that could not even be sent to its node by the
      // deadline (the node is down): the map may be stale (a failover).
      if (!closing && !res.ok() &&
          (res.error().reason == kConnectionLost || res.error().reason == kTimeoutUnsent)) {
        request_refresh();
      }
      finish(r, std::move(res));
      return;
    }
    const Reply& rep = *res;
    const std::string_view code = rep.error_code();
    if (code == "MOVED" || code == "ASK") {
      int slot = -1;
      std::string_view address;
      if (!parse_redirect(rep.str(), &slot, &address)) {
        finish(r, std::move(res));
        return;
      }
      if (++r->redirects > opt.max_redirects) {
        st.refused++;
        finish(r, err(Errc::kUnavailable, "redis: more MOVED/ASK redirects than max_redirects",
                      kTooManyRedirects));
        return;
      }
      if (code == "MOVED") {
        st.moved++;
        const int idx = node_for(address);
        if (idx >= 0) slots[static_cast<size_t>(slot)] = static_cast<int16_t>(idx);
        request_refresh();
        if (idx < 0) {
          finish(r, std::move(res));
          return;
        }
      } else {
        st.ask++;
        r->ask_node.assign(address);
      }
      dispatch(r);
      return;
    }
    if (code == "TRYAGAIN" || code == "CLUSTERDOWN") {
      if (code == "TRYAGAIN") {
        st.tryagain++;
      } else {
        st.clusterdown++;
        request_refresh();
      }
      Duration backoff = opt.retry_min;
      for (uint32_t i = 0; i < r->retries && backoff < opt.retry_max; ++i) backoff *= 2;
      backoff = std::min(backoff, opt.retry_max);
      r->retries++;
      if (loop.now() + backoff >= r->deadline) {
        finish(r, std::move(res));  // the server's last word is the most useful answer
        return;
      }
      r->last_reply = std::move(*res);
      r->state = Request::State::kBackoff;
      loop.arm(r, loop.now() + backoff);
      return;
    }
    finish(r, std::move(res));
  }

  // --- the slot map
  void request_refresh() {
    if (closing) return;
    if (refreshing) {
      refresh_again = true;
      return;
    }
    const MonoTime now = loop.now();
    if (refreshed_once && now < last_refresh + opt.refresh_min_interval) {
      if (!refresh_timer.armed()) loop.arm(&refresh_timer, last_refresh + opt.refresh_min_interval);
      return;
    }
    loop.disarm(&refresh_timer);
    refreshing = true;
    refreshed_once = true;
    last_refresh = now;
    refresh_attempts_left = nodes.size();
    send_refresh();
  }
  void send_refresh() {
    if (nodes.empty()) {
      refreshing = false;
      return;
    }
    // Prefer a node that is connected; otherwise take the next one in turn.
    size_t pick = refresh_cursor % nodes.size();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const size_t j = (refresh_cursor + i) % nodes.size();
      if (nodes[j]->conn->ready()) {
        pick = j;
        break;
      }
    }
    refresh_cursor = pick + 1;
    nodes[pick]->conn->command({"CLUSTER", "SLOTS"},
                               [this, pick](Result<Reply> res) { on_slots(pick, std::move(res)); });
  }
  void on_slots(size_t from, Result<Reply> res) {
    if (closing) return;
    if (res.ok() && apply_map(*res, nodes[from]->host)) {
      st.refreshes++;
      refreshing = false;
      if (refresh_again) {
        refresh_again = false;
        request_refresh();
      }
      return;
    }
    st.refresh_failures++;
    if (refresh_attempts_left > 1) {
      refresh_attempts_left--;
      send_refresh();
      return;
    }
    refreshing = false;
    refresh_again = false;
    // Nobody gave a map: keep trying (rate-limited) while the map is incomplete or commands
    // wait for a route.
    if (!complete || waiting != nullptr) {
      loop.arm(&refresh_timer, loop.now() + opt.refresh_min_interval);
    }
  }
  // CLUSTER SLOTS: [[start, end, [ip, port, id, ...], replica...], ...]. An empty ip means
  // "the address you reached me at".
  bool apply_map(const Reply& r, const std::string& answering_host) {
    if (!r.is_array()) return false;
    std::vector<int16_t> fresh(kSlots, -1);
    size_t assigned = 0;
    for (const Reply& e : r.elements()) {
      if (!e.is_array() || e.size() < 3 || !e[0].is_integer() || !e[1].is_integer() ||
          !e[2].is_array() || e[2].size() < 2 || !e[2][0].is_string() || !e[2][1].is_integer()) {
        continue;
      }
      const int64_t lo = e[0].integer_value();
      const int64_t hi = e[1].integer_value();
      if (lo < 0 || hi < lo || hi >= kSlots) continue;
      std::string host = e[2][0].str();
      if (host.empty()) host = answering_host;
      if (host == "?") continue;  // the node's address is not known yet
      const bool v6 = host.find(':') != std::string::npos;
      const std::string address =
          (v6 ? "[" + host + "]" : host) + ":" + std::to_string(e[2][1].integer_value());
      const int idx = node_for(address);
      if (idx < 0) continue;
      for (int64_t s = lo; s <= hi; ++s) {
        if (fresh[static_cast<size_t>(s)] < 0) assigned++;
        fresh[static_cast<size_t>(s)] = static_cast<int16_t>(idx);
      }
    }
    if (assigned == 0) return false;
    slots.swap(fresh);
    complete = assigned == kSlots;
    // Commands that waited for a route go now (or wait again for the next refresh).
    Request* w = waiting;
    waiting = nullptr;
    while (w != nullptr) {
      Request* next = w->wnext;
      w->wprev = w->wnext = nullptr;
      loop.disarm(w);
      w->state = Request::State::kInFlight;
      dispatch(w);
      w = next;
    }
    return true;
  }
};

void Request::on_timer() {
  c->on_request_timer(this);
}

ClusterClient::Impl::~Impl() {
  closing = true;
  loop.disarm(&refresh_timer);
  loop.disarm(&soon);
  // Requests not at a node complete here; those at a node complete when its connection closes.
  for (Request* r = live; r != nullptr;) {
    Request* next = r->next;
    if (r->state != Request::State::kInFlight) {
      finish(r, err(Errc::kUnavailable, "redis: cluster client closed", kClosed));
    }
    r = next;
  }
  for (auto& n : nodes) n->conn->close();
  on_soon();
  nodes.clear();
}

// --- ClusterClient -------------------------------------------------------------------------------

Result<std::unique_ptr<ClusterClient>> ClusterClient::create(net::Loop& loop,
                                                             const ClusterOptions& options) {
  if (options.seeds.empty()) {
    return make_error(Errc::kInvalidArgument, "redis: cluster needs at least one seed", "seeds");
  }
  if (options.max_nodes == 0 || options.max_nodes > 16384 || options.max_pending == 0) {
    return make_error(Errc::kInvalidArgument, "redis: max_nodes in 1..16384, max_pending > 0");
  }
  if (!loop.in_turn()) loop.refresh_now();
  auto impl = std::make_unique<Impl>(loop, options);
  if (options.connection.tls.enabled && options.connection.tls_context == nullptr) {
    auto ctx = make_tls_context(options.connection.tls);
    if (!ctx.ok()) return ctx.error();
    impl->tls = std::move(ctx).value();
    impl->opt.connection.tls_context = impl->tls.get();  // every node (node_for) shares it
  }
  for (const auto& s : options.seeds) {
    if (impl->node_for(s) < 0) {
      return make_error(Errc::kInvalidArgument, "redis: a seed is not numeric-host:port", "seeds");
    }
  }
  impl->request_refresh();
  return std::unique_ptr<ClusterClient>(new ClusterClient(std::move(impl)));
}

ClusterClient::ClusterClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterClient::~ClusterClient() = default;

void ClusterClient::command(std::span<const std::string_view> args, Callback cb,
                            const CommandOptions& options) {
  Impl& m = *impl_;
  if (m.closing) {
    m.refuse(std::move(cb), err(Errc::kUnavailable, "redis: cluster client closed", kClosed));
    return;
  }
  if (m.live_count >= m.opt.max_pending) {
    m.refuse(std::move(cb),
             err(Errc::kUnavailable, "redis: too many commands pending (max_pending)", kQueueFull));
    return;
  }
  int key = options.key_index;
  if (key == kKeyAuto) key = args.size() > 1 ? 1 : kNoKey;
  if (key >= static_cast<int>(args.size()) || key < kNoKey) {
    m.refuse(std::move(cb),
             err(Errc::kInvalidArgument, "redis: key_index outside the command", kBadCommand));
    return;
  }
  auto* r = new Request();
  if (auto e = encode_command(args, &r->bytes); !e) {
    delete r;
    m.refuse(std::move(cb), err(Errc::kInvalidArgument, e.error().message, kBadCommand));
    return;
  }
  r->c = &m;
  r->slot = key >= 0 ? key_slot(args[static_cast<size_t>(key)]) : -1;
  r->deadline = deadline_for(options);
  r->cb = std::move(cb);
  m.link(r);
  m.st.commands++;
  m.dispatch(r);
}

bool ClusterClient::map_complete() const {
  return impl_->complete;
}

std::string ClusterClient::node_for_slot(uint16_t slot) const {
  if (slot >= kSlots) return {};
  const int idx = impl_->slots[slot];
  return idx < 0 ? std::string() : impl_->nodes[static_cast<size_t>(idx)]->address;
}

uint64_t ClusterClient::reroutes() const {
  const ClusterStats& s = impl_->st;
  return s.moved + s.ask + s.tryagain + s.clusterdown + s.waited_for_route;
}

const ClusterStats& ClusterClient::stats() const {
  impl_->st.nodes = static_cast<uint32_t>(impl_->nodes.size());
  impl_->st.pending = impl_->live_count;
  return impl_->st;
}

Connection* ClusterClient::connection(const std::string& address) {
  auto it = impl_->node_index.find(address);
  return it == impl_->node_index.end() ? nullptr
                                       : impl_->nodes[static_cast<size_t>(it->second)]->conn.get();
}

net::Loop& ClusterClient::loop() {
  return impl_->loop;
}
Duration ClusterClient::default_timeout() const {
  return impl_->opt.connection.default_timeout;
}

Result<std::unique_ptr<Client>> make_client(net::Loop& loop,
                                            const std::vector<std::string>& servers, bool cluster,
                                            ConnectionOptions connection) {
  if (servers.empty()) return make_error(Errc::kInvalidArgument, "no server given", "servers");
  if (cluster) {
    ClusterOptions cl;
    cl.seeds = servers;
    cl.connection = std::move(connection);
    auto r = ClusterClient::create(loop, cl);
    if (!r.ok()) return r.error();
    return std::unique_ptr<Client>(std::move(*r));
  }
  if (!parse_address(servers.front(), &connection.host, &connection.port))
    return make_error(Errc::kInvalidArgument, "a server is not numeric-host:port", "servers");
  auto r = Connection::create(loop, connection);
  if (!r.ok()) return r.error();
  return std::unique_ptr<Client>(std::move(*r));
}

}  // namespace ringcast::redis
