#include "cluster/lease.h"

#include <algorithm>
#include <condition_variable>
#include <string_view>

#include "cluster/keys.h"
#include "cluster/lua_scripts.h"
#include "cluster/membership.h"
#include "core/rendezvous.h"
#include "net/loop.h"
#include "net/loop_thread.h"
#include "redis/client.h"
#include "redis/cluster.h"
#include "redis/connection.h"
#include "redis/script.h"

namespace ringcast::cluster {

namespace {

// KEYS[1] own, KEYS[2] epoch; ARGV[1] node, ARGV[2] ttl ms.
// {1, epoch} taken (absent, or held by this node: a restart, or an acquire whose reply was
// lost); {0, holder, epoch} held by another node. The epoch never goes back: should the
// counter ever be behind the lease (restored from an older backup), it jumps past it.
constexpr std::string_view kAcquireLua = lua::lease_acquire;

// KEYS[1] own; ARGV[1] node, ARGV[2] epoch, ARGV[3] ttl ms. 1 renewed, 0 gone (expired or
// deleted), -1 held by another node or epoch. Never re-creates an expired lease.
constexpr std::string_view kRenewLua = lua::lease_renew;

// KEYS[1] own; ARGV[1] node, ARGV[2] epoch. 1 deleted, 0 not ours (any more).
constexpr std::string_view kReleaseLua = lua::lease_release;

constexpr size_t kMaxNodeIdBytes = 256;

// done() and pause_io() come from other threads; they reach the loop only while it exists.
using net::Mailbox;

enum class PState : uint8_t {
  kIdle,
  kAcquiring,    // acquire script in flight
  kOwned,        // held; renewed
  kReleasing,    // held and renewed; on_release called, waiting for done()
  kReleaseSent,  // on_lose(released) called; release script in flight
};

struct Part {
  PState state = PState::kIdle;
  uint64_t epoch = 0;
  MonoTime valid_until;
  bool renew_in_flight = false;
  bool held() const { return state == PState::kOwned || state == PState::kReleasing; }
};

}  // namespace

const char* lose_reason_name(LoseReason r) {
  switch (r) {
    case LoseReason::kReleased:
      return "released";
    case LoseReason::kLost:
      return "lost";
    case LoseReason::kFenced:
      return "fenced";
  }
  return "unknown";
}

struct LeaseManager::Impl {
  explicit Impl(LeaseManager& self)
      : self(self),
        opt(self.options_),
        cb(self.callbacks_),
        c(self.counters_),
        acquire_script(std::string(kAcquireLua)),
        renew_script(std::string(kRenewLua)),
        release_script(std::string(kReleaseLua)) {
    for (uint32_t p = 0; p < kPartitions; ++p) {
      own_keys[p] = own_key(opt.ns, static_cast<Partition>(p));
      epoch_keys[p] = epoch_key(opt.ns, static_cast<Partition>(p));
    }
    ttl_ms = std::to_string(to_ms(opt.lease_ttl));
  }

  LeaseManager& self;
  const LeaseOptions& opt;
  const LeaseCallbacks& cb;
  LeaseCounters& c;
  redis::Script acquire_script, renew_script, release_script;
  std::array<std::string, kPartitions> own_keys, epoch_keys;
  std::string ttl_ms;

  std::unique_ptr<net::Loop> loop;
  std::unique_ptr<redis::Client> client;
  std::unique_ptr<Membership> members;
  std::shared_ptr<Mailbox> mailbox = std::make_shared<Mailbox>();
  std::array<Part, kPartitions> parts{};
  std::unique_ptr<net::Timer> renew_timer, deadline_timer, stop_timer;

  bool paused = false;
  bool stopping = false;
  bool closing = false;  // the loop ended: replies from here on are dropped
  size_t leave_in_flight = 0;

  template <class F>
  std::unique_ptr<net::Timer> timer(F f) {
    return std::make_unique<net::TimerFn<F>>(std::move(f));
  }

  Duration renew_interval() const { return opt.lease_ttl / 3; }

  Result<std::unique_ptr<redis::Client>> make_client() {
    redis::ConnectionOptions co;
    co.username = opt.username;
    co.password = opt.password;
    co.tls = opt.tls;
    co.default_timeout = opt.command_timeout;
    co.connect_timeout = opt.command_timeout;
    // Reconnect quickly: a lease lives only lease_ttl.
    co.reconnect_max = std::max<Duration>(milliseconds(50), opt.lease_ttl / 6);
    return redis::make_client(*loop, opt.servers, opt.cluster, std::move(co));
  }

  Result<void> init() {
    auto l = net::Loop::create({});
    if (!l.ok()) return l.error();
    loop = std::move(*l);
    auto r = make_client();
    if (!r.ok()) return r.error();
    client = std::move(*r);
    MembershipOptions mo;
    mo.ns = opt.ns;
    mo.node_id = opt.node_id;
    mo.heartbeat_interval = opt.heartbeat_interval;
    mo.member_ttl = opt.member_ttl;
    mo.forget_after = opt.forget_after;
    mo.command_timeout = opt.command_timeout;
    mo.advertise_url = opt.advertise_url;
    members = std::make_unique<Membership>(
        *loop, *client, mo, [this](const std::vector<std::string>&, bool) { reassess(); });
    renew_timer = timer([this] { renew_all(); });
    deadline_timer = timer([this] { on_deadline(); });
    stop_timer = timer([this] { loop->stop(); });
    {
      std::lock_guard lock(mailbox->mu);
      mailbox->loop = loop.get();
    }
    return ok();
  }

  redis::CommandOptions copts(MonoTime deadline = MonoTime()) const {
    redis::CommandOptions o;
    o.timeout = opt.command_timeout;
    o.deadline = deadline;
    return o;
  }

  void eval(const redis::Script& s, std::initializer_list<std::string_view> keys,
            std::initializer_list<std::string_view> args, redis::Callback done,
            const redis::CommandOptions& o) {
    redis::evalsha(*client, s, std::span<const std::string_view>(keys.begin(), keys.size()),
                   std::span<const std::string_view>(args.begin(), args.size()), std::move(done),
                   o);
  }

  // ---- ownership -------------------------------------------------------------------------------

  // Called after every answered heartbeat: take what should be ours, hand over what should not.
  void reassess() {
    if (closing || stopping || paused) return;
    const auto& live = members->live();
    for (uint32_t i = 0; i < kPartitions; ++i) {
      const auto p = static_cast<Partition>(i);
      Part& part = parts[i];
      const bool mine = owner_of(p, live) == opt.node_id;
      if (mine && part.state == PState::kIdle) {
        acquire(p);
      } else if (!mine && part.state == PState::kOwned) {
        begin_release(p);
      }
    }
    update_status();
  }

  void acquire(Partition p) {
    Part& part = parts[p];
    part.state = PState::kAcquiring;
    const MonoTime sent = loop->now();  // the turn's start: no later than the real send
    eval(
        acquire_script, {own_keys[p], epoch_keys[p]}, {opt.node_id, ttl_ms},
        [this, p, sent](Result<redis::Reply> r) { on_acquired(p, sent, std::move(r)); }, copts());
  }

  void on_acquired(Partition p, MonoTime sent, Result<redis::Reply> r) {
    Part& part = parts[p];
    if (closing) return;
    part.state = PState::kIdle;
    if (!r.ok() || !r->is_array() || r->size() < 2 || !(*r)[0].is_integer()) {
      c.redis_errors.fetch_add(1);  // it may have run: the next acquire takes it over (ours)
      return check_stop();
    }
    if ((*r)[0].integer_value() != 1 || !(*r)[1].is_integer()) {
      c.acquire_refused.fetch_add(1);  // held by another node: retried at the next heartbeat
      return check_stop();
    }
    const auto epoch = static_cast<uint64_t>((*r)[1].integer_value());
    if (stopping) {  // taken while shutting down: hand it back silently (never announced)
      part.epoch = epoch;
      return send_release(p, epoch);
    }
    const MonoTime until = sent + opt.lease_ttl - opt.safety_margin;
    if (until <= loop->now()) {
      // The answer came too late to act on: leave it (it expires, or the next acquire takes
      // it again at a new epoch).
      c.redis_errors.fetch_add(1);
      return;
    }
    part.state = PState::kOwned;
    part.epoch = epoch;
    part.valid_until = until;
    self.publish(p, epoch, until);
    c.acquired.fetch_add(1);
    arm_deadline();
    update_status();
    if (cb.on_acquire) cb.on_acquire(p, epoch);
  }

  void renew_all() {
    if (closing) return;
    loop->arm_after(renew_timer.get(), renew_interval());
    if (paused) return;
    for (uint32_t i = 0; i < kPartitions; ++i) {
      if (parts[i].held() && !parts[i].renew_in_flight) renew(static_cast<Partition>(i));
    }
  }

  void renew(Partition p) {
    Part& part = parts[p];
    part.renew_in_flight = true;
    const MonoTime sent = loop->now();
    const uint64_t epoch = part.epoch;
    const std::string e = std::to_string(epoch);
    // An answer after the local deadline cannot help: do not wait longer for it.
    const MonoTime deadline = std::min(sent + opt.command_timeout, part.valid_until);
    eval(
        renew_script, {own_keys[p]}, {opt.node_id, e, ttl_ms},
        [this, p, sent, epoch](Result<redis::Reply> r) {
          on_renewed(p, sent, epoch, std::move(r));
        },
        copts(deadline));
  }

  void on_renewed(Partition p, MonoTime sent, uint64_t epoch, Result<redis::Reply> r) {
    Part& part = parts[p];
    part.renew_in_flight = false;
    if (closing || !part.held() || part.epoch != epoch) return;  // lost meanwhile
    if (!r.ok() || !r->is_integer()) {
      c.redis_errors.fetch_add(1);  // the local deadline decides if none succeeds in time
      return;
    }
    const int64_t v = r->integer_value();
    if (v == 0) return lose(p, LoseReason::kLost);  // expired in Redis
    if (v != 1) return lose(p, LoseReason::kFenced);
    c.renewals.fetch_add(1);
    const MonoTime until = sent + opt.lease_ttl - opt.safety_margin;
    if (until > part.valid_until) {
      part.valid_until = until;
      self.publish(p, epoch, until);
      arm_deadline();
    }
  }

  void arm_deadline() {
    MonoTime first = MonoTime::max();
    for (const Part& part : parts)
      if (part.held()) first = std::min(first, part.valid_until);
    if (first == MonoTime::max()) return loop->disarm(deadline_timer.get());
    loop->arm(deadline_timer.get(), first);
  }

  // The local deadline: stop acting before Redis can let anyone else in.
  void on_deadline() {
    if (closing) return;
    const MonoTime now = loop->now();
    for (uint32_t i = 0; i < kPartitions; ++i) {
      if (parts[i].held() && parts[i].valid_until <= now)
        lose(static_cast<Partition>(i), LoseReason::kLost);
    }
    arm_deadline();
  }

  void lose(Partition p, LoseReason reason) {
    Part& part = parts[p];
    const uint64_t epoch = part.epoch;
    part.state = PState::kIdle;
    self.publish(p, 0, MonoTime());
    (reason == LoseReason::kFenced ? c.fenced : c.lost).fetch_add(1);
    update_status();
    if (cb.on_lose) cb.on_lose(p, epoch, reason);
    check_stop();
  }

  void begin_release(Partition p) {
    Part& part = parts[p];
    part.state = PState::kReleasing;
    const uint64_t epoch = part.epoch;
    update_status();
    if (!cb.on_release) return finish_release(p, epoch);
    auto once = std::make_shared<std::atomic<bool>>(false);
    cb.on_release(p, epoch, [mb = mailbox, this, p, epoch, once] {
      if (once->exchange(true)) return;
      mb->post([this, p, epoch] { finish_release(p, epoch); });
    });
  }

  void finish_release(Partition p, uint64_t epoch) {
    Part& part = parts[p];
    if (closing || part.state != PState::kReleasing || part.epoch != epoch) return;
    self.publish(p, 0, MonoTime());
    c.released.fetch_add(1);
    if (cb.on_lose) cb.on_lose(p, epoch, LoseReason::kReleased);
    send_release(p, epoch);
    update_status();
  }

  void send_release(Partition p, uint64_t epoch) {
    Part& part = parts[p];
    if (paused) {  // not sent: it expires after lease_ttl
      part.state = PState::kIdle;
      return check_stop();
    }
    part.state = PState::kReleaseSent;
    const std::string e = std::to_string(epoch);
    eval(
        release_script, {own_keys[p]}, {opt.node_id, e},
        [this, p](Result<redis::Reply> r) {
          if (closing) return;
          if (!r.ok() || !r->is_integer()) c.redis_errors.fetch_add(1);  // it expires instead
          parts[p].state = PState::kIdle;
          check_stop();
        },
        copts());
  }

  // ---- owner lookup (API forwarding) ----------------------------------------------------------

  // Answers exactly once: by answer(), or with an error when dropped unanswered (the manager
  // stopped: its mailbox or its client let go of the callback).
  struct OwnerQuery {
    std::function<void(Result<OwnerInfo>)> done;
    void answer(Result<OwnerInfo> r) {
      auto d = std::move(done);
      done = nullptr;
      if (d) d(std::move(r));
    }
    ~OwnerQuery() {
      answer(
          make_error(Errc::kUnavailable, "the lease manager is stopped", nullptr, "shutting_down"));
    }
  };

  void set_advertise_url(const std::string& url) {
    if (closing) return;
    members->set_advertise_url(url);
    if (!paused) members->beat_now();
  }

  void find_owner(Partition p, const std::shared_ptr<OwnerQuery>& q) {
    if (closing || p >= kPartitions) return;  // answered with an error when q goes
    client->command(
        {"HGET", own_keys[p], "node"},
        [this, q](Result<redis::Reply> r) {
          if (closing) return;
          if (!r.ok() || r->is_error()) {
            c.redis_errors.fetch_add(1);
            return q->answer(make_error(Errc::kUnavailable, "Redis did not answer the lookup",
                                        nullptr, "redis_unavailable"));
          }
          if (!r->is_string()) return q->answer(OwnerInfo{});  // nil: nobody holds it
          OwnerInfo info{r->str(), ""};
          // SPEC R14.4 (docs/security.md "Between nodes"): a call is forwarded only to the
          // address of a live member: the one it published with its last beat, or, for a
          // holder this node has not seen in a beat yet, the address in the hash only while
          // its last beat (in the members set) is younger than member_ttl.
          const auto& known = members->addresses();
          if (auto it = known.find(info.node_id); it != known.end()) {
            info.url = it->second;
            return q->answer(std::move(info));
          }
          static constexpr std::string_view kLiveAddress =
              "local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) "
              "if not s or tonumber(s) < tonumber(ARGV[2]) then return false end "
              "return redis.call('HGET', KEYS[2], ARGV[1])";
          const std::string since = std::to_string(loop->wall_now().ms() - to_ms(opt.member_ttl));
          client->command(
              {"EVAL", kLiveAddress, "2", members_key(opt.ns), addr_key(opt.ns), info.node_id,
               since},
              [this, q, info](Result<redis::Reply> a) mutable {
                if (closing) return;
                if (a.ok() && a->is_string()) info.url = a->str();
                q->answer(std::move(info));
              },
              copts());
        },
        copts());
  }

  // ---- test hook, stop -------------------------------------------------------------------------

  void set_paused(bool v) {
    if (closing) return;
    paused = v;
    members->set_paused(v);
    if (!v) members->beat_now();  // its answer reassesses
  }

  void begin_stop(Duration grace) {
    if (stopping || closing) return;
    stopping = true;
    loop->arm_after(stop_timer.get(), grace);
    ++leave_in_flight;
    members->leave([this](bool ok) {
      if (!ok) c.redis_errors.fetch_add(1);
      --leave_in_flight;
      check_stop();
    });
    for (uint32_t i = 0; i < kPartitions; ++i)
      if (parts[i].state == PState::kOwned) begin_release(static_cast<Partition>(i));
    update_status();
    check_stop();
  }

  void check_stop() {
    if (!stopping || closing || leave_in_flight > 0) return;
    for (const Part& part : parts)
      if (part.state != PState::kIdle) return;
    loop->stop();
  }

  void run() {
    members->start();
    loop->arm_after(renew_timer.get(), renew_interval());
    loop->run();
    {
      std::lock_guard lock(mailbox->mu);
      mailbox->loop = nullptr;  // a late done() is dropped
    }
    // A crash as far as Redis sees it (or the grace ran out): nothing more is sent; the user
    // hears of every lease still held so it stops acting on it.
    closing = true;
    for (uint32_t i = 0; i < kPartitions; ++i)
      if (parts[i].held()) lose(static_cast<Partition>(i), LoseReason::kLost);
    for (auto* t : {renew_timer.get(), deadline_timer.get(), stop_timer.get()}) loop->disarm(t);
    members->stop();
    client.reset();  // fails what is still held; the callbacks see `closing`
    members.reset();
    for (auto* t : {renew_timer.get(), deadline_timer.get(), stop_timer.get()}) loop->disarm(t);
  }

  // ---- status -----------------------------------------------------------------------------------

  void update_status() {
    ClusterStatus s;
    s.node_id = opt.node_id;
    s.members = members->live();
    s.synced = members->synced();
    s.assigned.assign(s.members.size(), 0);
    for (uint32_t i = 0; i < kPartitions; ++i) {
      const std::string_view o = owner_of(static_cast<Partition>(i), s.members);
      for (size_t m = 0; m < s.members.size(); ++m)
        if (s.members[m] == o) s.assigned[m]++;
      const Part& part = parts[i];
      if (part.held()) s.owned.push_back({static_cast<Partition>(i), part.epoch});
      if (part.state == PState::kReleasing) s.releasing++;
    }
    std::lock_guard lock(self.status_mu_);
    self.status_ = std::move(s);
  }
};

LeaseManager::LeaseManager(LeaseOptions options, LeaseCallbacks callbacks)
    : options_(std::move(options)), callbacks_(std::move(callbacks)) {}

Result<std::unique_ptr<LeaseManager>> LeaseManager::start(LeaseOptions options,
                                                          LeaseCallbacks callbacks) {
  if (options.node_id.empty() || options.node_id.size() > kMaxNodeIdBytes)
    return make_error(Errc::kInvalidArgument, "node_id must be 1-256 bytes", "node_id");
  if (options.servers.empty())
    return make_error(Errc::kInvalidArgument, "a lease manager needs a server", "servers");
  if (!options.cluster && options.servers.size() != 1)
    return make_error(Errc::kInvalidArgument,
                      "more than one server is only for a cluster (cluster = true)", "servers");
  if (options.ns.empty() || options.ns.find_first_of("{}") != std::string::npos)
    return make_error(Errc::kInvalidArgument, "ns must be non-empty, without braces", "ns");
  if (options.lease_ttl < milliseconds(100))
    return make_error(Errc::kInvalidArgument, "lease_ttl must be at least 100 ms", "lease_ttl");
  if (options.safety_margin <= Duration::zero() || options.safety_margin >= options.lease_ttl / 3)
    return make_error(Errc::kInvalidArgument, "safety_margin must be in (0, lease_ttl / 3)",
                      "safety_margin");
  if (options.heartbeat_interval <= Duration::zero() ||
      options.member_ttl <= options.heartbeat_interval)
    return make_error(Errc::kInvalidArgument, "member_ttl must exceed heartbeat_interval (> 0)",
                      "member_ttl");
  if (options.forget_after < options.member_ttl)
    return make_error(Errc::kInvalidArgument, "forget_after must be at least member_ttl",
                      "forget_after");
  if (options.command_timeout <= Duration::zero())
    return make_error(Errc::kInvalidArgument, "command_timeout must be positive",
                      "command_timeout");
  std::unique_ptr<LeaseManager> m(new LeaseManager(std::move(options), std::move(callbacks)));
  m->impl_ = std::make_unique<Impl>(*m);
  Impl* impl = m->impl_.get();
  auto started = net::start_loop_thread(
      m->thread_, "rc-lease",
      [impl] {
        Result<void> r = impl->init();
        if (r.ok()) impl->update_status();
        return r;
      },
      [impl] { impl->run(); });
  if (!started.ok()) return started.error();
  return m;
}

void LeaseManager::stop(Duration grace) {
  if (!thread_.joinable()) return;
  Impl* impl = impl_.get();
  impl->mailbox->post([impl, grace] { impl->begin_stop(grace); });
  thread_.join();
}

LeaseManager::~LeaseManager() {
  if (!thread_.joinable()) return;
  Impl* impl = impl_.get();
  impl->mailbox->post([impl] { impl->loop->stop(); });
  thread_.join();
}

void LeaseManager::set_advertise_url(std::string url) {
  Impl* impl = impl_.get();
  impl->mailbox->post([impl, url = std::move(url)] { impl->set_advertise_url(url); });
}

void LeaseManager::find_owner(Partition p, std::function<void(Result<OwnerInfo>)> done) {
  auto q = std::make_shared<Impl::OwnerQuery>();
  q->done = std::move(done);
  Impl* impl = impl_.get();
  impl->mailbox->post([impl, p, q] { impl->find_owner(p, q); });
}

void LeaseManager::pause_io(bool paused) {
  Impl* impl = impl_.get();
  impl->mailbox->post([impl, paused] { impl->set_paused(paused); });
}

void LeaseManager::publish(Partition p, uint64_t epoch, MonoTime valid_until) {
  // Order matters for valid(): a reader that sees the new deadline also sees the new epoch.
  if (epoch == 0) {
    valid_until_ns_[p].store(0);
    epochs_[p].store(0);
  } else {
    epochs_[p].store(epoch);
    valid_until_ns_[p].store(valid_until.ns());
  }
}

bool LeaseManager::valid(Partition p, uint64_t epoch, MonoTime now) const {
  if (p >= kPartitions || epoch == 0) return false;
  const uint64_t before = epochs_[p].load();
  const int64_t until = valid_until_ns_[p].load();
  const uint64_t after = epochs_[p].load();
  return before == epoch && after == epoch && now.ns() < until;
}

ClusterStatus LeaseManager::status() const {
  std::lock_guard lock(status_mu_);
  return status_;
}

std::vector<OwnedPartition> LeaseManager::owned() const {
  std::lock_guard lock(status_mu_);
  return status_.owned;
}

}  // namespace ringcast::cluster
