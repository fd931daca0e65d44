// Seeded simulation of the real shard (engine::Shard, STYLE 11): its intake, commit, durability,
// send path and operator calls run on this thread (Shard::start_inline / run_turn) on a manual
// clock, over a simulated store and a simulated transport.
// - The store keeps what it is given in memory; per seed it confirms writes at once (RocksDB: a
//   write returns durable) or later, in order (Redis: Store::durable_on_write() false), and its
//   asynchronous lookups answer late and in any order.
// - The transport answers every outcome class (2xx, 4xx, 410, 429 with Retry-After, 5xx, 502
//   after acting, refused, a hang to the timeout, a reset after the receiver acted), defers
//   sends (pacing, connection limits: no attempt, SPEC R2.3) and answers status checks (R12.11)
//   with what the receiver got.
// - Operators pause, resume, re-enable, flip subscriptions, reset breakers and send test events;
//   the process crashes at any point (the shard is destroyed mid-turn-sequence: nothing more is
//   written, what is on the wire is lost) or stops gracefully, and a new shard recovers.
// Checked at every send: the lease is durable before the request leaves (R12.2), one request
// of a delivery on the wire at a time, the endpoint's in-flight limit, budgets and ceilings
// (R5, R6), never a send after a delivery ended. At the end: every acknowledged event is in the
// store with all its deliveries, each terminal (liveness once faults stop), every attempt
// recorded, `delivered` only when the receiver has it, and no acknowledgement contradicted by
// a later answer for the same key.
// RINGCAST_SIM_SEED=N reruns one seed; RINGCAST_SIM_SEEDS=N sets how many run (default 500;
// tools/sim-soak.sh runs 10^4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/policy.h"
#include "core/time.h"
#include "core/transport.h"
#include "engine/shard.h"
#include "tests/sim/sim_world.h"
#include "tests/support/locked_store.h"

namespace ringcast {
namespace {

using K = ErrorCode::Kind;

using sim::kScaleDown;
using sim::Mode;

class Sim;

// The store: everything in memory (the MemoryStore behind LockedStore), confirmed at once or
// later; asynchronous reads run when called and answer at a later simulated instant.
class SimStore final : public test::LockedStore {
 public:
  SimStore(ManualClock& clock, Rng& rng, bool confirms_later, bool fencing)
      : clock_(clock), rng_(rng), later_(confirms_later), fencing_(fencing) {}

  Result<uint64_t> write(const Mutations& given) override {
    // Cluster mode: the store fences each partition's part of the batch by the epoch the shard
    // named for it (set_epoch) against the partition's lease now, as RedisStore's scripts do;
    // the refused parts are dropped and remembered as fenced (docs/cluster.md "Fencing").
    Mutations fenced_out;
    const Mutations& m = fencing_ ? (fenced_out = fence(given)) : given;
    for (const DeliveryPut& p : m.deliveries) {
      auto it = inner().deliveries().find(p.delivery.id);
      if (it != inner().deliveries().end() && is_terminal(it->second.status))
        ADD_FAILURE() << "delivery " << p.delivery.id << " rewritten after it ended ("
                      << delivery_status_name(it->second.status) << " → "
                      << delivery_status_name(p.delivery.status) << ")";
    }
    if (observer_) observer_(m);
    Result<uint64_t> r = LockedStore::write(m);
    if (!r.ok()) return r;
    if (later_) {
      log_.push_back({m, 0, WallTime()});
      end_of_write_.push_back(log_.size());
    }
    for (const DeliveryPut& p : m.deliveries) {
      written_in_[p.delivery.id] = *r;
      written_at_[p.delivery.id] = clock_.wall_now();
    }
    if (later_) {
      // Confirmed in order, 1..15 ms after the one before.
      WallTime at = clock_.wall_now() + milliseconds(1 + static_cast<int64_t>(rng_.below(15)));
      if (!confirms_.empty()) at = std::max(at, confirms_.back().first);
      confirms_.emplace_back(at, *r);
    }
    return r;
  }
  // Recovery records what it finds in flight as `lease_expired` attempts (MemoryStore, like the
  // real stores): logged too, so a store that loses unconfirmed writes keeps them.
  Result<RecoveryStats> recover(Partition p, WallTime now, RecoveryVisitor& v) override {
    if (later_) {
      log_.push_back({std::nullopt, p, now});
      last_recover_end_ = log_.size();
    }
    return LockedStore::recover(p, now, v);
  }
  uint64_t durable_seq() const override { return later_ ? confirmed_ : LockedStore::durable_seq(); }
  bool durable_on_write() const override { return !later_; }

  void find_event_keys_async(const std::vector<EventKeyRef>& keys, Poster& on,
                             EventKeysDone done) override {
    auto r = find_event_keys(keys);
    answer_later(on, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
  }
  void load_event_async(EventSeq seq, Poster& on, EventDone done) override {
    auto r = load_event(seq);
    answer_later(on, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
  }

  // The simulation's side.
  MemoryStore& mem() { return inner(); }
  // Sees every batch before it is applied (what the store held before is still readable).
  void observe(std::function<void(const Mutations&)> fn) { observer_ = std::move(fn); }
  // The last write that carried delivery d (its lease, when it is in flight).
  uint64_t written_in(DeliveryId d) const {
    auto it = written_in_.find(d);
    return it == written_in_.end() ? 0 : it->second;
  }
  // When delivery d was last written (its lease was taken then, when it is in flight).
  WallTime written_at(DeliveryId d) const {
    auto it = written_at_.find(d);
    return it == written_at_.end() ? WallTime() : it->second;
  }
  std::optional<WallTime> next_due() const {
    std::optional<WallTime> t;
    if (!confirms_.empty()) t = confirms_.front().first;
    for (const Answer& a : answers_)
      if (!t || a.at < *t) t = a.at;
    return t;
  }
  // Confirms and answers due by now; the answers in a random order (reordered completions).
  void deliver_due() {
    const WallTime now = clock_.wall_now();
    while (!confirms_.empty() && confirms_.front().first <= now) {
      confirmed_ = confirms_.front().second;
      confirms_.pop_front();
    }
    std::vector<Answer> due;
    for (auto it = answers_.begin(); it != answers_.end();) {
      if (it->at <= now) {
        due.push_back(std::move(*it));
        it = answers_.erase(it);
      } else {
        ++it;
      }
    }
    for (size_t i = due.size(); i > 1; --i) std::swap(due[i - 1], due[rng_.below(i)]);
    for (Answer& a : due) a.on->post(std::move(a.fn));
  }
  // The process died: its outstanding reads die with it. A store that confirms later may lose
  // what it had not confirmed (a server that failed over): every confirmed write stays, of the
  // rest a random prefix.
  void crash() {
    answers_.clear();
    confirms_.clear();
    if (!later_) return;
    const uint64_t written = end_of_write_.size();
    const uint64_t keep = confirmed_ + rng_.below(written - confirmed_ + 1);
    if (keep < written) {
      ++lost_writes_;
      const size_t cut = std::max<size_t>(keep ? end_of_write_[keep - 1] : 0, last_recover_end_);
      log_.resize(cut);
      end_of_write_.resize(keep);
      inner().clear_all();
      CollectingVisitor ignore;
      for (const Logged& l : log_) {
        if (l.m) {
          static_cast<void>(LockedStore::write(*l.m));
        } else {
          static_cast<void>(LockedStore::recover(l.p, l.at, ignore));
        }
      }
      for (auto it = written_in_.begin(); it != written_in_.end();)
        it = it->second > keep ? written_in_.erase(it) : std::next(it);
    }
    confirmed_ = keep;
  }
  uint64_t lost_writes() const { return lost_writes_; }

  // ---- the leases (cluster mode) -----------------------------------------------------------
  // The partition's lease is at `epoch` now (0: nobody holds it).
  void set_lease(Partition p, uint64_t epoch) { lease_[p] = epoch; }
  uint64_t lease(Partition p) const {
    auto it = lease_.find(p);
    return it == lease_.end() ? 0 : it->second;
  }
  // PartitionOwnership's hooks for the shard.
  void set_writer_epoch(Partition p, uint64_t epoch) { writer_[p] = epoch; }
  bool fenced(Partition p, uint64_t epoch) const { return fenced_.count({p, epoch}) > 0; }
  uint64_t fenced_parts() const { return fenced_parts_; }
  bool idle() const { return answers_.empty() && confirms_.empty(); }

 private:
  struct Answer {
    WallTime at;
    Poster* on;
    std::function<void()> fn;
  };
  void answer_later(Poster& on, std::function<void()> fn) {
    answers_.push_back({clock_.wall_now() + milliseconds(static_cast<int64_t>(rng_.below(20))), &on,
                        std::move(fn)});
  }

  Mutations fence(const Mutations& m) {
    std::set<Partition> refused;
    auto ok = [&](Partition p) {
      auto w = writer_.find(p);
      const uint64_t e = w == writer_.end() ? 0 : w->second;
      if (e != 0 && e == lease(p)) return true;
      if (refused.insert(p).second) {
        fenced_.insert({p, e});
        ++fenced_parts_;
      }
      return false;
    };
    Mutations out;
    out.event_keys_checked = m.event_keys_checked;
    for (const Event& e : m.events)
      if (ok(partition_of(e.tenant))) out.events.push_back(e);
    for (const DeliveryPut& d : m.deliveries)
      if (ok(id_partition(d.delivery.id))) out.deliveries.push_back(d);
    for (const Attempt& a : m.attempts)
      if (ok(id_partition(a.delivery))) out.attempts.push_back(a);
    for (const Endpoint& e : m.endpoints)
      if (ok(id_partition(e.id))) out.endpoints.push_back(e);
    for (EndpointId id : m.endpoint_deletes)
      if (ok(id_partition(id))) out.endpoint_deletes.push_back(id);
    for (const Tenant& t : m.tenants)
      if (ok(partition_of(t.name))) out.tenants.push_back(t);
    for (const Notification& n : m.notifications)
      if (ok(id_partition(n.seq))) out.notifications.push_back(n);
    return out;
  }

  ManualClock& clock_;
  Rng& rng_;
  const bool later_;
  const bool fencing_;
  std::function<void(const Mutations&)> observer_;
  std::map<Partition, uint64_t> lease_, writer_;
  std::set<std::pair<Partition, uint64_t>> fenced_;
  uint64_t fenced_parts_ = 0;
  uint64_t confirmed_ = 0;
  std::deque<std::pair<WallTime, uint64_t>> confirms_;
  std::vector<Answer> answers_;
  std::map<DeliveryId, uint64_t> written_in_;
  std::map<DeliveryId, WallTime> written_at_;
  struct Logged {
    std::optional<Mutations> m;  // a write, or else a recovery of p at `at`
    Partition p;
    WallTime at;
  };
  std::vector<Logged> log_;           // every write and recovery, in order (confirms later)
  std::vector<size_t> end_of_write_;  // write k (1-based) ends at log_[end_of_write_[k - 1]]
  size_t last_recover_end_ = 0;
  uint64_t lost_writes_ = 0;  // crashes that lost unconfirmed writes
};

class SimTransport final : public Transport {
 public:
  explicit SimTransport(Sim& sim) : sim_(sim) {}
  void send(SendOp* op) override;

 private:
  Sim& sim_;
};

class Sim {
 public:
  static constexpr int kReacquire = 1000;  // script kind: partition (kind - 1000)'s lease is back
  explicit Sim(uint64_t seed)
      : seed_(seed),
        rng_(seed * 0x9E3779B97F4A7C15ull + 7),
        cluster_(rng_.below(3) == 0),
        store_(clock_, rng_, cluster_ || rng_.below(2) == 1, cluster_) {
    start_ = clock_.wall_now();
    faults_end_ = start_ + seconds(12);
    opts_.scheduler = sim::scheduler_options();
    opts_.scheduler.fairness_cap = 2;  // below the in-flight limits (up to 4): the cap binds
    opts_.policies = sim::policies();
    opts_.rng_seed = seed;
    opts_.clock = &clock_;
    opts_.stop_grace = seconds(1);
    opts_.durable_poll = milliseconds(2);
    opts_.entropy = [this](uint8_t* out, size_t n) {
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(entropy_.next());
    };
    opts_.transport_factory = [this](net::Loop&) -> std::unique_ptr<Transport> {
      return std::make_unique<SimTransport>(*this);
    };
    store_.observe([this](const Mutations& m) { check_leases(m); });
    if (cluster_) {
      // Cluster mode (docs/cluster.md): this shard holds its partitions under leases the
      // simulation moves; there is no other node, and no inbox (intake for a partition not
      // held here is answered 503 not_owner: not acknowledged).
      engine::PartitionOwnership o;
      o.valid = [this](Partition p, uint64_t epoch, MonoTime) {
        return epoch != 0 && store_.lease(p) == epoch;
      };
      o.set_epoch = [this](Partition p, uint64_t epoch) { store_.set_writer_epoch(p, epoch); };
      o.fenced = [this](Partition p, uint64_t epoch) { return store_.fenced(p, epoch); };
      opts_.ownership = std::move(o);
    }
  }

  void run() {
    setup();
    if (::testing::Test::HasFatalFailure()) return;
    const WallTime hard_end = faults_end_ + seconds(120);
    int same_instant = 0;
    while (now() < hard_end) {
      step();
      if (::testing::Test::HasFatalFailure()) return;
      if (now() >= faults_end_ && all_done()) break;
      WallTime next = now() + shard_->next_wait();
      for (const Op& op : ops_) next = std::min(next, op.done);
      if (!script_.empty()) next = std::min(next, script_.begin()->first);
      if (auto d = store_.next_due()) next = std::min(next, *d);
      if (next <= now()) {
        ASSERT_LT(++same_instant, 100000) << "no progress at one instant (livelock)";
      } else {
        same_instant = 0;
        clock_.advance(next - now());
      }
    }
    ASSERT_TRUE(all_done()) << "deliveries still live " << to_ms(now() - faults_end_)
                            << " ms after faults stopped" << live_story();
    EXPECT_LE(now(), faults_end_ + seconds(40))
        << "took " << to_ms(now() - faults_end_) << " ms after faults stopped";
    final_checks();
    shard_->stop_inline();
    while (shard_->run_turn(Duration(0))) {
      store_.deliver_due();
      complete_due(true);
      clock_.advance(milliseconds(1));
    }
    while (shard_->close_inline()) {
      store_.deliver_due();
      clock_.advance(milliseconds(1));
    }
  }

  // ---- the transport's side (SimTransport::send) ----------------------------------------------
  void on_send(SendOp* so) {
    const SendRequest& rq = so->request;
    so->started_at = now();
    ++sends_;
    Op op;
    op.so = so;
    op.delivery = rq.delivery_id;
    op.check = rq.status_check;
    auto found = store_.mem().deliveries().find(rq.delivery_id);
    ASSERT_NE(found, store_.mem().deliveries().end()) << "send of an unknown delivery";
    const Delivery& d = found->second;
    op.endpoint = d.endpoint;
    if (trace_)
      std::fprintf(stderr, "%lld send d=%llu #%u check=%d store: %s attempts=%u\n",
                   (long long)to_ms(now() - start_), (unsigned long long)d.id, rq.attempt, op.check,
                   delivery_status_name(d.status), d.attempts);
    // Cluster mode: only a partition this shard holds (not being handed over) sends.
    if (cluster_) {
      const Partition part = id_partition(rq.delivery_id);
      EXPECT_TRUE(held_.count(part) > 0 && !releasing_.count(part))
          << "delivery " << rq.delivery_id << " sent for partition " << part
          << (held_.count(part) ? ", being handed over" : ", not held here");
    }
    // R12.2: the lease is durable before the request leaves (a status check, R12.11, is no
    // attempt and takes none; the delivery waits for its answer, not ended).
    if (!op.check) {
      EXPECT_EQ(d.status, DeliveryStatus::kInFlight)
          << "send without a lease: delivery " << d.id << " is " << delivery_status_name(d.status);
      EXPECT_GE(store_.durable_seq(), store_.written_in(d.id))
          << "delivery " << d.id << " sent before its lease was durable";
      EXPECT_EQ(d.attempts, rq.attempt) << "delivery " << d.id;
    } else {
      EXPECT_FALSE(is_terminal(d.status)) << "status check of ended delivery " << d.id;
    }
    // Per owner: after a lease was lost, the next owner (here: this shard at a new epoch) cannot
    // know of a request the last one still had on the wire, and sends the delivery again under
    // the same webhook id (receivers deduplicate by it, SPEC R11.3).
    op.owner = cluster_ ? held_[id_partition(d.id)] : 0;
    EXPECT_TRUE(on_wire_.insert({d.id, op.owner}).second)
        << "delivery " << d.id << " sent while a request of it is on the wire";
    auto ep = store_.mem().endpoints().find(d.endpoint);
    ASSERT_NE(ep, store_.mem().endpoints().end()) << "send to a deleted endpoint";
    const RetryPolicy& p = *opts_.policies.find(ep->second.policy);
    op.counted = !d.test() && !op.check;
    if (op.counted) {
      const uint32_t limit = ep->second.max_in_flight != 0 ? ep->second.max_in_flight
                                                           : opts_.scheduler.default_max_in_flight;
      EXPECT_LE(++per_endpoint_[std::make_pair(d.endpoint, op.owner)], limit)
          << "endpoint " << d.endpoint << " over its in-flight limit";
    }
    if (!d.test()) {
      EXPECT_LE(d.fast_attempts, p.fast_budget()) << "fast budget exceeded";
      EXPECT_LE(d.slow_attempts, p.slow_budget()) << "slow budget exceeded";
      // The attempt was decided when its lease was taken; a store that confirms later holds
      // the request until the lease is durable (R12.2), which may be past the ceiling.
      EXPECT_LE(store_.written_at(d.id), delivery_deadline(d, p))
          << "leased past a ceiling: " << d.id;
    }
    answer(op, d, ep->second);
    ops_.push_back(std::move(op));
  }

 private:
  struct Op {
    SendOp* so = nullptr;
    DeliveryId delivery = 0;
    EndpointId endpoint = 0;
    bool check = false;
    bool acted = false;
    bool counted = true;  // in per_endpoint_
    uint64_t owner = 0;   // the epoch it was sent at (cluster mode)
    WallTime done;
    TransportResult result;
  };
  struct Receiver {
    uint32_t seen = 0;
    bool acted = false;
  };
  struct Acked {
    EventSeq seq = 0;
    uint32_t deliveries = 0;
  };

  WallTime now() { return clock_.wall_now(); }
  uint64_t rnd(uint64_t n) { return rng_.below(n); }
  bool chance(int percent) { return rnd(100) < static_cast<uint64_t>(percent); }

  void open_shard() {
    shard_ = std::make_unique<engine::Shard>(0, opts_, store_);
    std::vector<Partition> parts;
    if (!cluster_) parts.assign(partitions_.begin(), partitions_.end());
    Result<void> r = shard_->start_inline(parts);
    ASSERT_TRUE(r.ok()) << r.error().message;
    if (!cluster_) return;
    held_.clear();
    releasing_.clear();
    for (Partition p : partitions_) acquire(p);
  }

  // ---- the leases (cluster mode): taken, handed over, lost ----------------------------------
  void acquire(Partition p) {
    const uint64_t e = ++epochs_[p];
    store_.set_lease(p, e);
    held_[p] = e;
    releasing_.erase(p);
    ++loads_[p];
    ++bucket_generation_[p];
    if (trace_)
      std::fprintf(stderr, "%lld acquire %u at %llu\n", (long long)to_ms(now() - start_), p,
                   (unsigned long long)e);
    shard_->acquire_partition(p, e);
  }
  // The lease expired or was fenced (a pause, Redis unreachable): forgotten at once.
  void lose(Partition p) {
    auto it = held_.find(p);
    if (it == held_.end()) return;
    const uint64_t e = it->second;
    store_.set_lease(p, 0);
    held_.erase(it);
    releasing_.erase(p);
    ++losses_;
    if (trace_)
      std::fprintf(stderr, "%lld lose %u at %llu\n", (long long)to_ms(now() - start_), p,
                   (unsigned long long)e);
    shard_->lose_partition(p, e);
    script_.insert({now() + milliseconds(100 + static_cast<int64_t>(rnd(1400))), kReacquire + p});
  }
  // A graceful hand-over: once done, the lease goes (to nobody here) and comes back later.
  void release(Partition p) {
    auto it = held_.find(p);
    if (it == held_.end() || releasing_.count(p)) return;
    const uint64_t e = it->second;
    releasing_.insert(p);
    ++releases_;
    if (trace_)
      std::fprintf(stderr, "%lld release %u at %llu\n", (long long)to_ms(now() - start_), p,
                   (unsigned long long)e);
    shard_->release_partition(p, e, [this, p, e, gen = generation_] {
      if (trace_)
        std::fprintf(stderr, "%lld released %u at %llu\n", (long long)to_ms(now() - start_), p,
                     (unsigned long long)e);
      if (gen != generation_ || held_.count(p) == 0 || held_[p] != e) return;
      held_.erase(p);
      releasing_.erase(p);
      store_.set_lease(p, 0);
      script_.insert({now() + milliseconds(100 + static_cast<int64_t>(rnd(1400))), kReacquire + p});
    });
  }

  // The world: tenants and endpoints (created through the shard), fault windows, the script.
  void setup() {
    const int tenants = 2 + static_cast<int>(rnd(3));
    for (int t = 0; t < tenants; ++t) {
      const std::string tenant = "tenant" + std::to_string(t);
      tenants_.push_back(tenant);
      partitions_.insert(partition_of(tenant));
    }
    open_shard();
    if (::testing::Test::HasFatalFailure()) return;
    for (const std::string& tenant : tenants_) {
      const int eps = 1 + static_cast<int>(rnd(3));
      for (int i = 0; i < eps; ++i) {
        EndpointSpec spec;
        spec.url = "https://ep" + std::to_string(next_url_++) + ".sim.test/hook";
        spec.policy = chance(50) ? "xhub-sim" : "smengo-sim";
        if (chance(30)) spec.event_types = {"payment.*"};
        spec.max_in_flight = static_cast<uint32_t>(rnd(4));
        if (chance(25)) {
          spec.rate_limit.per_second = static_cast<double>(5 + rnd(16));
          spec.rate_limit.burst = static_cast<uint32_t>(rnd(4));  // 0: per_second
        }
        if (chance(25)) {
          spec.on_unknown = OnUnknown::kReconcile;
          spec.status_url = "https://status.sim.test/{webhook_id}";
        }
        if (chance(50)) {  // SPEC R13
          spec.ordering = chance(75) ? Ordering::kPerKey : Ordering::kEndpoint;
          spec.on_head_failure = chance(50) ? OnHeadFailure::kBlock : OnHeadFailure::kSkip;
          spec.supersede = chance(30);
        }
        std::optional<Result<Endpoint>> got;
        shard_->create_endpoint(tenant, spec, [&](Result<Endpoint> r) { got = std::move(r); });
        settle([&] { return got.has_value(); });
        ASSERT_TRUE(got && got->ok()) << (got ? got->error().message : "no answer");
        const EndpointId id = (*got)->id;
        std::vector<std::pair<int64_t, Mode>>& ws = faults_[id];
        const int64_t end_ms = to_ms(faults_end_ - start_);
        for (int64_t t_ms = 0; t_ms < end_ms;) {
          Mode mode = chance(55) ? static_cast<Mode>(1 + rnd(7)) : Mode::kHealthy;
          ws.emplace_back(t_ms, mode);
          t_ms += 200 + static_cast<int64_t>(rnd(2500));
        }
        gone_at_ms_[id] =
            chance(10) ? static_cast<int64_t>(rnd(static_cast<uint64_t>(end_ms))) : -1;
      }
    }
    start_ = now();
    faults_end_ = start_ + seconds(12);
    const int64_t window_ms = to_ms(faults_end_ - start_);
    const int events = (150 + static_cast<int>(rnd(100))) / kScaleDown;
    for (int i = 0; i < events; ++i)
      script_.insert({start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))), 0});
    for (int i = 0; i < 12; ++i)
      script_.insert({start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))),
                      1 + static_cast<int>(rnd(6))});
    if (cluster_) {
      const int moves = 2 + static_cast<int>(rnd(5));
      for (int i = 0; i < moves; ++i)
        script_.insert({start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))), 10});
    }
    const int restarts = static_cast<int>(rnd(4));
    for (int i = 0; i < restarts; ++i)
      script_.insert(
          {start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))), chance(70) ? 7 : 9});
    script_.insert({faults_end_, 8});
  }

  // Runs turns at this instant until `done` holds (or a bound); for setup calls.
  template <class F>
  void settle(F done) {
    for (int i = 0; i < 200 && !done(); ++i) {
      step();
      clock_.advance(milliseconds(1));
    }
  }

  // One instant: store confirmations and answers, transport completions, the script, a turn.
  void step() {
    store_.deliver_due();
    complete_due(false);
    while (!script_.empty() && script_.begin()->first <= now()) {
      const int kind = script_.begin()->second;
      script_.erase(script_.begin());
      act(kind);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // SPEC R4.3, R4.6: while a tenant's breaker is not closed, a turn leases at most one of its
    // deliveries on a breaker policy (the probe; none while it is open and its pause runs).
    not_closed_.clear();
    for (const std::string& t : tenants_) {
      shard_->get_breaker(t, [&](Result<BreakerView> v) {
        if (v.ok() && v->snapshot.state != BreakerSnapshot::State::kClosed) not_closed_.insert(t);
      });
    }
    breaker_leases_.clear();
    endpoint_leases_.clear();
    shard_->run_turn(Duration(0));
    // SPEC R5.3: one pass (one poll a turn) leases at most fairness_cap per endpoint, so one
    // endpoint's backlog cannot starve the others.
    for (const auto& [ep, n] : endpoint_leases_) {
      ++fairness_checked_;
      EXPECT_LE(n, opts_.scheduler.fairness_cap)
          << "endpoint " << ep << ": " << n << " leases in one turn";
    }
    for (const auto& [t, n] : breaker_leases_) {
      if (!not_closed_.count(t)) continue;
      ++breaker_checked_;
      EXPECT_LE(n, 1u) << "tenant " << t << ": " << n
                       << " leases in one turn while its breaker was not closed";
    }
  }

  void complete_due(bool all) {
    std::sort(ops_.begin(), ops_.end(), [](const Op& a, const Op& b) {
      return a.done != b.done ? a.done < b.done : a.delivery < b.delivery;
    });
    size_t i = 0;
    for (; i < ops_.size() && (all || ops_[i].done <= now()); ++i) {
      Op& op = ops_[i];
      if (op.acted) receiver_[op.delivery].acted = true;
      on_wire_.erase({op.delivery, op.owner});
      if (op.counted) --per_endpoint_[std::make_pair(op.endpoint, op.owner)];
      if (trace_)
        std::fprintf(stderr, "%lld done d=%llu status=%u deferred=%d code=%s\n",
                     (long long)to_ms(now() - start_), (unsigned long long)op.delivery,
                     op.result.http_status, (int)op.result.deferred, op.result.code.str().c_str());
      op.so->result = op.result;
      op.so->on_complete();
    }
    ops_.erase(ops_.begin(), ops_.begin() + static_cast<ptrdiff_t>(i));
  }

  Mode mode_at(EndpointId ep, WallTime t) const {
    if (t >= faults_end_) return Mode::kHealthy;
    const int64_t ms = to_ms(t - start_);
    auto it = faults_.find(ep);
    if (it == faults_.end()) return Mode::kHealthy;
    Mode m = Mode::kHealthy;
    for (const auto& [from, mode] : it->second) {
      if (from > ms) break;
      m = mode;
    }
    return m;
  }

  // What the receiver does with the request, and what comes back.
  void answer(Op& op, const Delivery& d, const Endpoint& ep) {
    TransportResult& r = op.result;
    op.done = now() + milliseconds(1 + static_cast<int64_t>(rnd(30)));
    if (op.check) {  // R12.11: the status URL says whether the receiver has it
      r.connect_attempted = r.request_written = r.response_received = true;
      const bool has = receiver_[d.id].acted;
      r.http_status = now() < faults_end_ && chance(20) ? 503 : has ? 200 : 404;
      return;
    }
    r.connect_attempted = true;
    auto respond = [&](int status) {
      r.response_received = r.request_written = true;
      r.http_status = static_cast<uint16_t>(status);
      op.acted = status >= 200 && status < 300;
      if (op.acted) first_receipt(d);
    };
    const int64_t gone = gone_at_ms_[ep.id];
    const Mode mode = d.test() ? Mode::kHealthy : mode_at(ep.id, now());
    if (now() < faults_end_ && chance(8)) {
      // Pacing or connection limits: given back unsent (SPEC R2.3), no attempt.
      r = TransportResult{};
      r.deferred = chance(50) ? DeferReason::kPacing : DeferReason::kConnections;
      r.not_before = now() + milliseconds(static_cast<int64_t>(rnd(500)));
      op.done = now() + milliseconds(1 + static_cast<int64_t>(rnd(20)));
      ++deferred_;
      return;
    }
    ++receiver_[d.id].seen;
    if (!d.test() && gone >= 0 && to_ms(now() - start_) >= gone && now() < faults_end_) {
      respond(410);
      return;
    }
    sim::Answer a = sim::answer_in(mode, rng_);
    r = std::move(a.result);
    op.acted = a.acted;
    if (op.acted) first_receipt(d);
    if (a.hangs) op.done = now() + seconds(1);       // to the whole-request deadline
    if (!r.request_written) --receiver_[d.id].seen;  // refused: it never got the request
  }

  // SPEC R13.4: of one endpoint's deliveries with the same order key, the receiver gets each
  // one's first request in acceptance order (a head's retries may repeat it).
  void first_receipt(const Delivery& d) {
    if (d.order_key() == 0 || d.test() || !got_once_.insert(d.id).second) return;
    ++order_checked_;
    EventSeq& last = order_seen_[{d.endpoint, d.order_key()}];
    EXPECT_GT(d.event, last) << "delivery " << d.id << " (event " << d.event
                             << ") reached its receiver after event " << last
                             << " of the same ordering key";
    last = std::max(last, d.event);
  }

  void act(int kind) {
    if (kind != 0 && kind != 7 && kind != 9) ++op_epoch_;  // what may make a delivery due now
    if (kind >= kReacquire) {  // the lease of partition kind - kReacquire comes back here
      const Partition p = static_cast<Partition>(kind - kReacquire);
      if (!held_.count(p)) acquire(p);
      return;
    }
    const std::string tenant = tenants_[rnd(tenants_.size())];
    std::vector<EndpointId> eps;
    for (const auto& [id, e] : store_.mem().endpoints())
      if (e.tenant == tenant) eps.push_back(id);
    const EndpointId ep = eps.empty() ? 0 : eps[rnd(eps.size())];
    switch (kind) {
      case 0: {  // an event, or a producer's retry of an earlier one (the same key)
        static const char* kTypes[] = {"payment.status_changed", "payment.status_changed",
                                       "refund.completed", "order.created"};
        EventInput in;
        in.tenant = tenant;
        if (!sent_keys_.empty() && chance(10)) {
          const auto& [t, id, type, payload, okey] = sent_keys_[rnd(sent_keys_.size())];
          in.tenant = t;
          in.id = id;
          in.type = type;
          in.payload = payload;
          in.ordering_key = okey;
        } else {
          in.id = "e" + std::to_string(next_event_++);
          in.type = kTypes[rnd(4)];
          in.payload = R"({"n":)" + std::to_string(next_event_) + "}";
          // SPEC R13: a few keys per tenant, so keys have backlogs; some events have none.
          if (chance(75)) in.ordering_key = "order-" + std::to_string(rnd(4));
          sent_keys_.push_back({in.tenant, in.id, in.type, in.payload, in.ordering_key});
        }
        const std::pair<std::string, std::string> key{in.tenant, in.id};
        shard_->submit(std::move(in), [this, key, gen = generation_](Result<SubmitResult> r) {
          if (gen != generation_) return;  // answered by a shard that is gone (never happens)
          if (!r.ok()) return;             // not acknowledged: nothing promised
          auto it = acked_.find(key);
          if (it != acked_.end()) {
            EXPECT_EQ(r->kind, SubmitResult::Kind::kDuplicate)
                << "event " << key.second << " acknowledged twice as new";
            EXPECT_EQ(r->event, it->second.seq) << "a duplicate names another event";
            return;
          }
          if (r->kind == SubmitResult::Kind::kAccepted) {
            acked_[key] = {r->event, r->deliveries};
          } else {
            acked_[key] = {r->event, UINT32_MAX};  // accepted before an answer was lost
          }
        });
        break;
      }
      case 1:
      case 2:
        if (ep != 0)
          shard_->endpoint_action(tenant, ep,
                                  kind == 1 ? EndpointAction::kPause : EndpointAction::kResume,
                                  [](Result<Endpoint>) {});
        break;
      case 3: {
        auto t = store_.mem().tenants().find(tenant);
        const bool active = t == store_.mem().tenants().end() || t->second.subscription_active;
        shard_->set_subscription(tenant, !active, [](Result<bool>) {});
        break;
      }
      case 4:
        shard_->reset_breaker(tenant, [](Result<BreakerView>) {});
        break;
      case 5:
        if (ep != 0)
          shard_->endpoint_action(tenant, ep, EndpointAction::kEnable, [](Result<Endpoint>) {});
        break;
      case 6:
        if (ep != 0) shard_->test_endpoint(tenant, ep, [](Result<DeliveryId>) {});
        break;
      case 7:  // the process dies: what is on the wire is lost, some of it reached receivers
        ++crashes_;
        restart(/*crashed=*/true);
        break;
      case 9:  // SIGTERM: a graceful stop (bounded by stop_grace), then a new start
        ++stops_;
        shard_->stop_inline();
        for (int turns = 0; shard_->run_turn(Duration(0)) && turns < 100000; ++turns) {
          store_.deliver_due();
          complete_due(false);
          clock_.advance(milliseconds(1));
        }
        while (shard_->close_inline()) {
          store_.deliver_due();
          clock_.advance(milliseconds(1));
        }
        restart(/*crashed=*/false);
        break;
      case 10: {  // a partition's lease moves: lost, or handed over
        std::vector<Partition> held;
        for (const auto& [p, e] : held_)
          if (!releasing_.count(p)) held.push_back(p);
        if (held.empty()) break;
        const Partition p = held[rnd(held.size())];
        if (chance(50)) {
          lose(p);
        } else {
          release(p);
        }
        break;
      }
      case 8:  // faults stop: every lease back here, then (a few times: an answer may wait for
               // a partition's load) everything resumed, subscriptions on
        for (Partition p : partitions_)
          if (!held_.count(p) && cluster_) acquire(p);
        for (int64_t ms : {0, 300, 1500}) script_.insert({now() + milliseconds(ms), 12});
        break;
      case 12:
        for (const std::string& t : tenants_) {
          shard_->set_subscription(t, true, [](Result<bool>) {});
          for (const auto& [id, e] : store_.mem().endpoints()) {
            if (e.tenant != t) continue;
            if (e.state == EndpointState::kPaused)
              shard_->endpoint_action(t, id, EndpointAction::kResume, [](Result<Endpoint>) {});
            // SPEC R13.2: the operator lets blocked keys go on (else their waiting deliveries
            // stay pending, as they should).
            if (e.on_head_failure == OnHeadFailure::kBlock && e.ordering != Ordering::kNone) {
              EndpointPatch patch;
              patch.on_head_failure = OnHeadFailure::kSkip;
              shard_->update_endpoint(t, id, patch, [](Result<Endpoint>) {});
            }
          }
        }
        break;
    }
  }

  // Every lease the shard writes, against the ladder and the endpoint's rate limit:
  // - SPEC R5/R7: a delivery is leased no earlier than the due time its last stored record
  //   named (its ladder's pause, a Retry-After, a deferral's not_before) — unless that record
  //   is from before a crash, a graceful stop or a hand-over (recovery starts it again) or an
  //   operator resumed or re-enabled its endpoint since (due at once);
  // - the endpoint's rate limit: leases fit its token bucket (per_second, burst), the bucket
  //   full after a restart or a partition's load, as the scheduler's is.
  void check_leases(const Mutations& m) {
    const WallTime t = now();
    for (const DeliveryPut& p : m.deliveries) {
      const Delivery& d = p.delivery;
      if (d.status == DeliveryStatus::kPending) {
        due_[d.id] = {d.next_attempt_at, generation_, op_epoch_, loads_[id_partition(d.id)]};
        continue;
      }
      if (d.status != DeliveryStatus::kInFlight) continue;
      if (!d.test()) {
        ++endpoint_leases_[d.endpoint];
        auto e = store_.mem().endpoints().find(d.endpoint);
        if (e != store_.mem().endpoints().end() && opts_.policies.find(e->second.policy) &&
            opts_.policies.find(e->second.policy)->use_breaker)
          ++breaker_leases_[e->second.tenant];
      }
      if (auto it = due_.find(d.id); it != due_.end()) {
        const Due& due = it->second;
        if (due.generation == generation_ && due.op_epoch == op_epoch_ &&
            due.load == loads_[id_partition(d.id)]) {
          ++due_checked_;
          // The scheduler's timer wheel ticks in whole milliseconds.
          EXPECT_GE(t + milliseconds(1), due.at)
              << "delivery " << d.id << " leased " << to_ms(due.at - t) << " ms before it was due";
        }
      }
      auto ep = store_.mem().endpoints().find(d.endpoint);
      // A test send has its own budget (EngineOptions::test_sends_per_minute).
      if (d.test() || ep == store_.mem().endpoints().end()) continue;
      const RateLimit& rl = ep->second.rate_limit;
      if (rl.per_second <= 0) continue;
      Bucket& b = buckets_[d.endpoint];
      const double cap = rl.burst ? static_cast<double>(rl.burst) : std::max(1.0, rl.per_second);
      if (b.generation != bucket_generation_[id_partition(d.endpoint)] || !b.init) {
        b = Bucket{cap, t, true, bucket_generation_[id_partition(d.endpoint)]};
      }
      b.tokens =
          std::min(cap, b.tokens + static_cast<double>((t - b.at).count()) / 1e9 * rl.per_second);
      b.at = t;
      ++rate_checked_;
      EXPECT_GE(b.tokens, 1.0 - 1e-6)
          << "endpoint " << d.endpoint << " leased past its rate limit (" << rl.per_second
          << "/s, burst " << rl.burst << ")";
      b.tokens -= 1.0;
    }
  }
  struct Due {
    WallTime at;
    uint64_t generation = 0;  // the process it was written by
    uint64_t op_epoch = 0;    // operator actions before it
    uint64_t load = 0;        // its partition's loads before it
  };
  struct Bucket {
    double tokens = 0;
    WallTime at;
    bool init = false;
    uint64_t generation = 0;
  };

  // The first live deliveries, for a failure's message.
  std::string live_story() {
    std::string out;
    int n = 0;
    for (const auto& [id, d] : store_.mem().deliveries()) {
      if (is_terminal(d.status) || ++n > 5) continue;
      const Partition p = id_partition(id);
      out += "\n  delivery " + std::to_string(id) + " " + delivery_status_name(d.status) +
             " attempts " + std::to_string(d.attempts) + " partition " + std::to_string(p) +
             (cluster_ ? (held_.count(p) ? " held at " + std::to_string(held_[p])
                                         : std::string(" not held"))
                       : std::string()) +
             " next at +" + std::to_string(to_ms(d.next_attempt_at - start_)) + " ms";
    }
    out += "\n  the shard holds:";
    for (const auto& [p, e] : shard_->owned_partitions())
      out += " " + std::to_string(p) + "@" + std::to_string(e);
    out += "\n  ops on the wire " + std::to_string(ops_.size()) + ", script " +
           std::to_string(script_.size()) + ", store idle " + (store_.idle() ? "yes" : "no");
    return out;
  }

  // The process is gone (crashed between two turns, or stopped): what was still on the wire is
  // lost — after a crash half of what had not reached its receiver had —, the store keeps what
  // it keeps (SimStore::crash), and a new shard recovers.
  void restart(bool crashed) {
    for (const Op& op : ops_) {
      if (op.acted || (crashed && !op.check && chance(50))) {
        receiver_[op.delivery].acted = true;
        if (auto d = store_.mem().deliveries().find(op.delivery);
            d != store_.mem().deliveries().end())
          first_receipt(d->second);
      }
    }
    ops_.clear();
    on_wire_.clear();
    per_endpoint_.clear();
    shard_.reset();
    store_.crash();
    ++generation_;
    for (Partition p : partitions_) ++bucket_generation_[p];
    open_shard();
  }

  bool all_done() {
    if (!ops_.empty() || !script_.empty() || !store_.idle()) return false;
    for (const auto& [id, d] : store_.mem().deliveries())
      if (!is_terminal(d.status)) return false;
    return true;
  }

  // SPEC R13.3: a superseded delivery never had an attempt, and names a newer delivery of its
  // endpoint and key.
  void check_superseded(const Delivery& d) {
    ++superseded_checked_;
    EXPECT_EQ(d.attempts, 0u) << "superseded " << d.id << " had an attempt";
    EXPECT_EQ(receiver_[d.id].seen, 0u) << "superseded " << d.id << " reached its receiver";
    bool named = false;
    for (const Attempt& a : store_.mem().attempts_of(d.id)) {
      if (a.code.kind != K::kSuperseded) continue;
      auto by = store_.mem().deliveries().find(std::stoull(a.response_prefix));
      ASSERT_NE(by, store_.mem().deliveries().end()) << "superseded " << d.id;
      EXPECT_EQ(by->second.endpoint, d.endpoint);
      EXPECT_EQ(by->second.order_key(), d.order_key());
      EXPECT_GT(by->second.event, d.event) << "superseded " << d.id << " by an older one";
      named = true;
    }
    EXPECT_TRUE(named) << "superseded " << d.id << " names no replacement";
  }

  void final_checks() {
    std::map<EventSeq, uint32_t> per_event;
    for (const auto& [id, d] : store_.mem().deliveries()) {
      std::vector<Attempt> attempts;  // the attempts, without the status checks' records
      for (const Attempt& a : store_.mem().attempts_of(id))
        if (!is_check_record(a.number) && a.number != kSupersededRecord) attempts.push_back(a);
      EXPECT_TRUE(is_terminal(d.status)) << "delivery " << id;
      EXPECT_EQ(attempts.size(), d.attempts) << "delivery " << id;
      for (size_t k = 0; k < attempts.size(); ++k)
        EXPECT_EQ(attempts[k].number, k + 1) << "delivery " << id;
      const Receiver& rc = receiver_[id];
      EXPECT_LE(rc.seen, d.attempts) << "delivery " << id << ": more requests than attempts";
      if (d.status == DeliveryStatus::kDelivered) {
        EXPECT_TRUE(rc.acted) << "delivered " << id << " never reached its receiver";
      } else {
        EXPECT_FALSE(d.last_code.is_none()) << "ended without a reason: " << id;
      }
      ++ended_[d.status];
      if (d.status == DeliveryStatus::kSuperseded) check_superseded(d);
      if (rc.acted && rc.seen > 1) ++redelivered_after_acting_;
      if (!d.test()) ++per_event[d.event];
    }
    // No acknowledged event lost: its key and all its deliveries are in the store.
    for (const auto& [key, a] : acked_) {
      auto rec = store_.mem().find_event_key(key.first, key.second);
      ASSERT_TRUE(rec.ok());
      ASSERT_TRUE(rec->has_value()) << "acknowledged event " << key.second << " lost";
      EXPECT_EQ((*rec)->seq, a.seq) << "event " << key.second;
      if (a.deliveries != UINT32_MAX) {
        EXPECT_EQ(per_event[a.seq], a.deliveries) << "event " << key.second << " lost deliveries";
      }
    }
    for (const Notification& n : store_.mem().notifications()) ++notifications_[n.kind];
    disabled_ = shard_->metrics().endpoints_disabled.load();
  }

 public:
  struct Summary {
    uint64_t due_checked = 0, rate_checked = 0, breaker_checked = 0, fairness_checked = 0;
    uint64_t seeds_later = 0, seeds_cluster = 0, losses = 0, releases = 0, fenced = 0,
             lost_writes = 0, acked = 0, deliveries = 0, delivered = 0, ended_other = 0, sends = 0,
             crashes = 0, stops = 0, deferred = 0, redelivered_after_acting = 0, notifications = 0;
    uint64_t order_checked = 0, superseded = 0;
  };
  void add_to(Summary& s) const {
    s.seeds_later += store_.durable_on_write() ? 0 : 1;
    s.lost_writes += store_.lost_writes();
    s.seeds_cluster += cluster_ ? 1 : 0;
    s.due_checked += due_checked_;
    s.rate_checked += rate_checked_;
    s.breaker_checked += breaker_checked_;
    s.fairness_checked += fairness_checked_;
    s.losses += losses_;
    s.releases += releases_;
    s.fenced += store_.fenced_parts();
    s.acked += acked_.size();
    for (const auto& [st, n] : ended_) {
      s.deliveries += n;
      (st == DeliveryStatus::kDelivered ? s.delivered : s.ended_other) += n;
    }
    s.sends += sends_;
    s.crashes += static_cast<uint64_t>(crashes_);
    s.stops += static_cast<uint64_t>(stops_);
    s.deferred += deferred_;
    s.redelivered_after_acting += redelivered_after_acting_;
    s.order_checked += order_checked_;
    s.superseded += superseded_checked_;
    for (const auto& [k, n] : notifications_) s.notifications += n;
  }

 private:
  friend class SimTransport;
  uint64_t seed_;
  ManualClock clock_;
  Rng rng_;
  const bool cluster_;  // the shard holds its partitions under leases (docs/cluster.md)
  Rng entropy_{seed_ ^ 0x5EED};
  SimStore store_;
  engine::EngineOptions opts_;
  std::unique_ptr<engine::Shard> shard_;
  WallTime start_, faults_end_;
  std::vector<std::string> tenants_;
  std::set<Partition> partitions_;
  std::map<EndpointId, std::vector<std::pair<int64_t, Mode>>> faults_;
  std::map<EndpointId, int64_t> gone_at_ms_;
  std::multimap<WallTime, int> script_;
  std::vector<Op> ops_;
  std::set<std::pair<DeliveryId, uint64_t>> on_wire_;                 // (delivery, owner)
  std::map<std::pair<EndpointId, uint64_t>, uint32_t> per_endpoint_;  // (endpoint, owner)
  std::map<DeliveryId, Receiver> receiver_;
  std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>>
      sent_keys_;
  // SPEC R13.4: per (endpoint, order key), the newest event the receiver got a first request
  // of; the deliveries it got at least once.
  std::map<std::pair<EndpointId, uint64_t>, EventSeq> order_seen_;
  std::set<DeliveryId> got_once_;
  uint64_t order_checked_ = 0, superseded_checked_ = 0;
  std::map<std::pair<std::string, std::string>, Acked> acked_;
  std::map<DeliveryStatus, uint64_t> ended_;
  std::map<std::string, uint64_t> notifications_;
  uint64_t sends_ = 0, deferred_ = 0, redelivered_after_acting_ = 0, disabled_ = 0;
  uint64_t next_event_ = 0, next_url_ = 0, generation_ = 0;
  int crashes_ = 0, stops_ = 0;
  std::map<Partition, uint64_t> held_, epochs_;  // cluster mode: held here at; the last epoch
  std::set<Partition> releasing_;                // being handed over
  std::map<DeliveryId, Due> due_;                // check_leases: when each was last due
  std::map<Partition, uint64_t> loads_;          // cluster mode: a partition's loads so far
  uint64_t op_epoch_ = 0;                        // operator actions and lease moves so far
  uint64_t due_checked_ = 0, rate_checked_ = 0, breaker_checked_ = 0, fairness_checked_ = 0;
  std::map<EndpointId, uint32_t> endpoint_leases_;  // this turn's leases per endpoint
  std::set<std::string> not_closed_;                // tenants whose breaker is not closed
  std::map<std::string, uint32_t> breaker_leases_;  // this turn's leases on a breaker policy  //
                                                    // leases checked against their due time, rate
  std::map<EndpointId, Bucket> buckets_;
  std::map<Partition, uint64_t> bucket_generation_;
  uint64_t losses_ = 0, releases_ = 0;
  bool trace_ = std::getenv("RINGCAST_SIM_TRACE") != nullptr;
};

void SimTransport::send(SendOp* op) {
  sim_.on_send(op);
}

TEST(ShardPartsSim, ManySeeds) {
  Sim::Summary sum;
  const size_t seeds = sim::run_seeds<Sim>(500, sum);
  // Not a vacuous pass: both store kinds ran, most deliveries got through, and every kind of
  // fault happened.
  if (seeds >= 50 && !::testing::Test::HasFailure()) {
    EXPECT_GT(sum.seeds_later, 0u);
    EXPECT_LT(sum.seeds_later, seeds);
    EXPECT_GT(sum.delivered * 2, sum.deliveries);
    EXPECT_GT(sum.ended_other, 0u);
    EXPECT_GT(sum.crashes, 0u);
    EXPECT_GT(sum.lost_writes, 0u);
    EXPECT_GT(sum.seeds_cluster, 0u);
    EXPECT_GT(sum.due_checked, 0u);
    EXPECT_GT(sum.rate_checked, 0u);
    EXPECT_GT(sum.breaker_checked, 0u);
    EXPECT_GT(sum.fairness_checked, 0u);
    EXPECT_GT(sum.losses, 0u);
    EXPECT_GT(sum.releases, 0u);
    EXPECT_GT(sum.fenced, 0u);
    EXPECT_GT(sum.stops, 0u);
    EXPECT_GT(sum.deferred, 0u);
    EXPECT_GT(sum.redelivered_after_acting, 0u);
    EXPECT_GT(sum.notifications, 0u);
    EXPECT_GT(sum.order_checked, 0u);  // SPEC R13: ordered keys reached receivers
    EXPECT_GT(sum.superseded, 0u);
  }
  std::printf(
      "shard sim: %zu seeds (%lu confirming later; %lu crashes lost unconfirmed writes; %lu in "
      "cluster mode: %lu leases lost, %lu handed over, %lu partition writes fenced), %lu events "
      "acknowledged, %lu deliveries (%lu delivered, %lu ended otherwise), %lu sends, %lu "
      "crashes, %lu graceful stops, %lu deferred, %lu redelivered after the receiver acted, %lu "
      "operator notifications; leases checked: %lu against their due time, %lu against a rate "
      "limit, %lu turns of a tenant whose breaker was not closed, %lu turns of an endpoint "
      "against the fairness cap; ordering: %lu first receipts checked in order, %lu superseded "
      "checked\n",
      seeds, (unsigned long)sum.seeds_later, (unsigned long)sum.lost_writes,
      (unsigned long)sum.seeds_cluster, (unsigned long)sum.losses, (unsigned long)sum.releases,
      (unsigned long)sum.fenced, (unsigned long)sum.acked, (unsigned long)sum.deliveries,
      (unsigned long)sum.delivered, (unsigned long)sum.ended_other, (unsigned long)sum.sends,
      (unsigned long)sum.crashes, (unsigned long)sum.stops, (unsigned long)sum.deferred,
      (unsigned long)sum.redelivered_after_acting, (unsigned long)sum.notifications,
      (unsigned long)sum.due_checked, (unsigned long)sum.rate_checked,
      (unsigned long)sum.breaker_checked, (unsigned long)sum.fairness_checked,
      (unsigned long)sum.order_checked, (unsigned long)sum.superseded);
}

}  // namespace
}  // namespace ringcast
