// Seeded simulation of whole shards (STYLE 11): a Scheduler, the in-memory store and a simulated
// transport with latency, errors, 5xx bursts, refused connects, timeouts, resets after the receiver
// acted, 410s, Retry-After, operator actions (pause/resume, subscription, breaker reset, re-enable)
// and crash/recovery, on a manual clock. Checks safety at every step and liveness once faults stop.
// One seed reruns with RINGCAST_SIM_SEED=N; RINGCAST_SIM_SEEDS=N changes how many seeds run
// (default 200).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/policy.h"
#include "core/scheduler.h"
#include "core/time.h"
#include "tests/sim/sim_world.h"
#include "tests/support/memory_store.h"

namespace ringcast {
namespace {

using K = ErrorCode::Kind;

using sim::kScaleDown;
using sim::Mode;

struct Window {
  int64_t from_ms, to_ms;
  Mode mode;
};

struct Op {
  SendCommand cmd;
  WallTime started;
  WallTime done;
  TransportResult result;
  bool acted = false;  // the receiver processed the request (whatever the sender learns)
};

class SeqIds : public IdAllocator {
 public:
  uint64_t next_id(Partition p) override { return make_id(p, ++n_); }

 private:
  uint64_t n_ = 0;
};

class Forward : public RecoveryVisitor {
 public:
  Forward(Scheduler& s, WallTime now) : s_(s), now_(now) {}
  void on_endpoint(const Endpoint& e) override { ASSERT_TRUE(s_.restore_endpoint(e).ok()); }
  void on_tenant(const Tenant& t) override { s_.restore_tenant(t); }
  void on_delivery(const Delivery& d) override { s_.restore_delivery(d, now_); }

 private:
  Scheduler& s_;
  WallTime now_;
};

class Sim {
 public:
  explicit Sim(uint64_t seed)
      : seed_(seed),
        rng_(seed * 0x9E3779B97F4A7C15ull + 1),
        reg_(sim::policies()),
        opts_(sim::scheduler_options()) {
    start_ = clock_.wall_now();
    faults_end_ = start_ + seconds(12);
    sched_ = std::make_unique<Scheduler>(opts_, reg_, seed, clock_.wall_now());
    sched_->set_id_allocator(&ids_);
  }

  void run() {
    setup();
    if (::testing::Test::HasFatalFailure()) return;
    const WallTime liveness_bound = faults_end_ + seconds(25);
    const WallTime hard_end = faults_end_ + seconds(120);
    int same_time_turns = 0;
    WallTime last = now();
    while (now() < hard_end) {
      turn();
      if (::testing::Test::HasFatalFailure()) return;
      if (now() >= faults_end_ && all_done()) break;
      WallTime next = hard_end;
      if (auto w = sched_->next_wakeup()) next = std::min(next, *w);
      if (!ops_.empty()) next = std::min(next, next_op_done());
      if (!script_.empty()) next = std::min(next, script_.begin()->first);
      if (next <= now()) {
        ASSERT_LT(++same_time_turns, 100000) << "no progress at one instant (livelock)";
      } else {
        same_time_turns = 0;
        clock_.advance(next - now());
      }
      (void)last;
    }
    // Liveness: once faults stop, everything reaches a terminal state within the bound.
    ASSERT_TRUE(all_done()) << "deliveries still live at " << to_ms(now() - faults_end_)
                            << " ms after faults stopped: " << sched_->stats().live;
    EXPECT_LE(now(), liveness_bound)
        << "took " << to_ms(now() - faults_end_) << " ms after faults stopped";
    final_checks();
  }

 private:
  WallTime now() { return clock_.wall_now(); }
  // RINGCAST_SIM_TRACE=1: the story of a run on stderr.
  template <class... A>
  void trace(const char* fmt, A... a) {
    if (!trace_) return;
    std::fprintf(stderr, "%8lld ms  ", (long long)to_ms(now() - start_));
    std::fprintf(stderr, fmt, a...);
    std::fputc('\n', stderr);
  }
  uint64_t rnd(uint64_t n) { return rng_.below(n); }
  bool chance(int percent) { return rnd(100) < static_cast<uint64_t>(percent); }

  // ---- the world
  // ---------------------------------------------------------------------------------

  void setup() {
    const int tenants = 2 + static_cast<int>(rnd(3));
    for (int t = 0; t < tenants; ++t) {
      const std::string tenant = "tenant" + std::to_string(t);
      tenants_.push_back(tenant);
      const int eps = 1 + static_cast<int>(rnd(3));
      for (int i = 0; i < eps; ++i) {
        Endpoint e;
        e.id = ids_.next_id(partition_of(tenant));
        e.tenant = tenant;
        e.url = "https://sim.example/" + std::to_string(e.id);
        e.policy = chance(50) ? "xhub-sim" : "smengo-sim";
        if (chance(30)) e.event_types = {"payment.*"};
        e.max_in_flight = static_cast<uint32_t>(rnd(4));  // 0: the default
        Mutations m;
        Result<Endpoint> r = sched_->create_endpoint(e, now(), m);
        ASSERT_TRUE(r.ok());
        write(m);
        // Fault windows over [0, faults_end).
        std::vector<Window>& ws = faults_[e.id];
        int64_t t_ms = 0;
        const int64_t end_ms = to_ms(faults_end_ - start_);
        while (t_ms < end_ms) {
          const int64_t len = 200 + static_cast<int64_t>(rnd(2500));
          Mode mode = Mode::kHealthy;
          if (chance(55)) mode = static_cast<Mode>(1 + rnd(7));
          ws.push_back({t_ms, std::min(end_ms, t_ms + len), mode});
          t_ms += len;
        }
        gone_at_ms_[e.id] =
            chance(10) ? static_cast<int64_t>(rnd(static_cast<uint64_t>(end_ms))) : -1;
      }
    }
    // Events and operator actions over the fault window.
    const int events = (120 + static_cast<int>(rnd(80))) / kScaleDown;
    const int64_t window_ms = to_ms(faults_end_ - start_);
    for (int i = 0; i < events; ++i) {
      script_.insert({start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))), 0});
    }
    for (int i = 0; i < 12; ++i) {
      script_.insert({start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))),
                      1 + static_cast<int>(rnd(6))});
    }
    const int crashes = static_cast<int>(rnd(3));
    for (int i = 0; i < crashes; ++i) {
      script_.insert({start_ + milliseconds(static_cast<int64_t>(rnd(window_ms))), 7});
    }
    script_.insert({faults_end_, 8});  // faults stop: resume everything, subscriptions on
  }

  Mode mode_at(EndpointId ep, WallTime t) const {
    if (t >= faults_end_) return Mode::kHealthy;
    const int64_t ms = to_ms(t - start_);
    auto it = faults_.find(ep);
    if (it == faults_.end()) return Mode::kHealthy;
    for (const Window& w : it->second) {
      if (ms >= w.from_ms && ms < w.to_ms) return w.mode;
    }
    return Mode::kHealthy;
  }

  void write(const Mutations& m) {
    if (m.empty()) return;
    // The scheduler must never write a non-terminal state over a terminal one.
    for (const DeliveryPut& p : m.deliveries) {
      auto it = store_.deliveries().find(p.delivery.id);
      if (it != store_.deliveries().end() && is_terminal(it->second.status)) {
        ADD_FAILURE() << "delivery " << p.delivery.id << " rewritten after it was terminal ("
                      << delivery_status_name(it->second.status) << " → "
                      << delivery_status_name(p.delivery.status) << ")";
      }
    }
    Result<uint64_t> r = store_.write(m);
    ASSERT_TRUE(r.ok()) << r.error().message;
  }

  // ---- one loop turn, like the engine: completions, intake/actions, poll, send ----------------

  void turn() {
    // 1. Completions.
    std::sort(ops_.begin(), ops_.end(), [](const Op& a, const Op& b) {
      return a.done != b.done ? a.done < b.done : a.cmd.delivery < b.cmd.delivery;
    });
    Mutations m;
    size_t i = 0;
    for (; i < ops_.size() && ops_[i].done <= now(); ++i) {
      Op& op = ops_[i];
      if (op.acted) receiver_[op.cmd.delivery].acted = true;
      if (op.cmd.probe) outstanding_probe_.erase(tenant_of_ep(op.cmd.endpoint));
      sched_->on_result(op.cmd, op.result, op.started, now(), m);
      trace("result d=%llu ep=%llu #%u status=%u code=%s", (unsigned long long)op.cmd.delivery,
            (unsigned long long)op.cmd.endpoint, op.cmd.attempt, op.result.http_status,
            op.result.code.str().c_str());
      for (const Endpoint& e : m.endpoints) {
        trace("  endpoint %llu → %s", (unsigned long long)e.id, endpoint_state_name(e.state));
      }
    }
    ops_.erase(ops_.begin(), ops_.begin() + static_cast<ptrdiff_t>(i));
    write(m);
    // 2. Scripted intake and operator actions.
    while (!script_.empty() && script_.begin()->first <= now()) {
      const int kind = script_.begin()->second;
      script_.erase(script_.begin());
      act(kind);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // 3. One pass; the lease is written before anything is sent (R12.2).
    std::vector<SendCommand> out;
    Mutations pm;
    sched_->poll(now(), out, pm);
    write(pm);
    check_breaker(out);
    for (const SendCommand& c : out) send(c);
  }

  void act(int kind) {
    Mutations m;
    const std::string tenant = tenants_[rnd(tenants_.size())];
    std::vector<const Endpoint*> eps = sched_->endpoints_of(tenant);
    const Endpoint* ep = eps.empty() ? nullptr : eps[rnd(eps.size())];
    trace("act %d %s ep=%llu", kind, tenant.c_str(), (unsigned long long)(ep ? ep->id : 0));
    switch (kind) {
      case 0: {  // an event
        static const char* kTypes[] = {"payment.status_changed", "payment.status_changed",
                                       "refund.completed", "order.created", "kyc.status_changed"};
        static const char* kStatus[] = {"paid", "failed", "settled", "expired"};
        Event ev;
        ev.seq = ids_.next_id(partition_of(tenant));
        ev.tenant = tenant;
        ev.id = "e" + std::to_string(ev.seq);
        ev.type = kTypes[rnd(5)];
        ev.payload = std::string(R"({"status":")") + kStatus[rnd(4)] + "\"}";
        ev.created_at = now();
        ev.payload_hash = payload_hash(ev.payload);
        const uint32_t n = sched_->fan_out(ev, now(), ids_, m);
        accepted_[ev.seq] = n;
        break;
      }
      case 1:
      case 2:  // pause / resume
        if (ep) {
          (void)sched_->endpoint_action(
              ep->id, kind == 1 ? EndpointAction::kPause : EndpointAction::kResume, now(), m);
        }
        break;
      case 3:  // subscription flips
        sched_->set_subscription(tenant, !sched_->subscription_active(tenant), now(), m);
        break;
      case 4:  // manual breaker reset: a probe in flight no longer belongs to a cycle
        sched_->reset_breaker(tenant, now(), m);
        outstanding_probe_.erase(tenant);
        break;
      case 5:  // re-enable a disabled endpoint
        if (ep && ep->state == EndpointState::kDisabled) {
          (void)sched_->endpoint_action(ep->id, EndpointAction::kEnable, now(), m);
        }
        break;
      case 6:  // a test event
        if (ep) {
          Event ev;
          ev.seq = ids_.next_id(partition_of(tenant));
          ev.tenant = tenant;
          ev.id = "t" + std::to_string(ev.seq);
          ev.type = "ringcast.test";
          ev.payload = "{}";
          ev.created_at = now();
          Result<DeliveryId> id = sched_->add_test_delivery(ep->id, ev, now(), ids_, m);
          ASSERT_TRUE(id.ok());
        }
        break;
      case 7:
        write(m);
        crash_and_recover();
        return;
      case 8:  // faults stop
        for (const std::string& t : tenants_) {
          if (!sched_->subscription_active(t)) sched_->set_subscription(t, true, now(), m);
          for (const Endpoint* e : sched_->endpoints_of(t)) {
            if (e->state == EndpointState::kPaused) {
              (void)sched_->endpoint_action(e->id, EndpointAction::kResume, now(), m);
            }
          }
        }
        break;
    }
    write(m);
  }

  void crash_and_recover() {
    ++crashes_;
    // In-flight requests die with the process; some reached the receiver first (R12.9).
    for (const Op& op : ops_) {
      if (op.acted || chance(50)) receiver_[op.cmd.delivery].acted = true;
    }
    ops_.clear();
    outstanding_probe_.clear();
    sched_ = std::make_unique<Scheduler>(opts_, reg_, seed_ + 1000 * crashes_, now());
    sched_->set_id_allocator(&ids_);
    Forward fwd(*sched_, now());
    std::set<Partition> parts;
    for (const std::string& t : tenants_) parts.insert(partition_of(t));
    for (Partition p : parts) {
      Result<RecoveryStats> st = store_.recover(p, now(), fwd);
      ASSERT_TRUE(st.ok());
    }
  }

  std::string tenant_of_ep(EndpointId id) const {
    auto it = store_.endpoints().find(id);
    return it == store_.endpoints().end() ? std::string() : it->second.tenant;
  }

  // ---- the simulated transport ------------------------------------------------------------------

  void send(const SendCommand& c) {
    // Safety: the lease is in the store before the request leaves (R12.2).
    auto it = store_.deliveries().find(c.delivery);
    ASSERT_NE(it, store_.deliveries().end()) << "send of an unknown delivery";
    const Delivery& d = it->second;
    EXPECT_EQ(d.status, DeliveryStatus::kInFlight) << "send without a lease";
    EXPECT_EQ(d.attempts, c.attempt);
    EXPECT_EQ(d.endpoint, c.endpoint);
    EXPECT_EQ(d.event, c.event);
    // Safety: one delivery id per (event, endpoint): a redelivery carries the same id.
    auto [pair, fresh] = id_of_.insert({{c.event, c.endpoint}, c.delivery});
    EXPECT_EQ(pair->second, c.delivery) << "a redelivery with another id";
    (void)fresh;
    // Safety: budgets and ceilings.
    auto ep = store_.endpoints().find(c.endpoint);
    ASSERT_NE(ep, store_.endpoints().end()) << "send to a deleted endpoint";
    const RetryPolicy& p = *reg_.find(ep->second.policy);
    if (!d.test()) {
      EXPECT_LE(d.fast_attempts, p.fast_budget()) << "fast budget exceeded";
      EXPECT_LE(d.slow_attempts, p.slow_budget()) << "slow budget exceeded";
      EXPECT_LE(now(), delivery_deadline(d, p)) << "sent past a ceiling";
      if (p.use_breaker) {
        EXPECT_LT(d.held, opts_.breaker.hold_ceiling);
      }
      EXPECT_EQ(ep->second.state, EndpointState::kEnabled)
          << "sent to a paused/disabled endpoint: delivery " << c.delivery << " endpoint "
          << c.endpoint << " attempt " << c.attempt << ", the scheduler says "
          << endpoint_state_name(sched_->find_endpoint(c.endpoint)->state);
    } else {
      EXPECT_EQ(d.attempts, 1) << "a test delivery is single-shot";
    }
    ++receiver_[c.delivery].seen;
    trace("send d=%llu ep=%llu #%u%s (endpoint %s)", (unsigned long long)c.delivery,
          (unsigned long long)c.endpoint, c.attempt, c.probe ? " probe" : "",
          endpoint_state_name(ep->second.state));

    Op op;
    op.cmd = c;
    op.started = now();
    const Mode mode = d.test() ? Mode::kHealthy : mode_at(c.endpoint, now());
    const int64_t latency_ms = 1 + static_cast<int64_t>(rnd(30));
    op.done = now() + milliseconds(latency_ms);
    TransportResult& r = op.result;
    r.connect_attempted = true;
    auto answer = [&](int status) {
      r.response_received = r.request_written = true;
      r.http_status = static_cast<uint16_t>(status);
      op.acted = status >= 200 && status < 300;
    };
    const int64_t gone = gone_at_ms_[c.endpoint];
    if (now() < faults_end_ && chance(8)) {
      // ringcast's own back-pressure (pacing, connection limits): given back unsent, told
      // when to try again. Not an attempt; the receiver never sees it (SPEC R2.3).
      r = TransportResult{};
      r.deferred = chance(50) ? DeferReason::kPacing : DeferReason::kConnections;
      r.not_before = now() + milliseconds(static_cast<int64_t>(rnd(500)));
      op.done = now() + milliseconds(1 + static_cast<int64_t>(rnd(20)));
      --receiver_[c.delivery].seen;
    } else if (!d.test() && gone >= 0 && to_ms(now() - start_) >= gone && now() < faults_end_) {
      answer(410);
    } else {
      sim::Answer a = sim::answer_in(mode, rng_);
      r = std::move(a.result);
      op.acted = a.acted;
      if (a.hangs) op.done = now() + seconds(1);  // the scaled whole-request deadline
    }
    ops_.push_back(std::move(op));
  }

  WallTime next_op_done() const {
    WallTime best = WallTime::max();
    for (const Op& op : ops_) best = std::min(best, op.done);
    return best;
  }

  // Safety: no send while the tenant's breaker is open, except the one probe (R4.3, R4.6).
  void check_breaker(const std::vector<SendCommand>& out) {
    std::map<std::string, int> probes;
    for (const SendCommand& c : out) {
      auto ep = store_.endpoints().find(c.endpoint);
      if (ep == store_.endpoints().end()) continue;
      if (!reg_.find(ep->second.policy)->use_breaker) continue;
      if (store_.deliveries().at(c.delivery).test()) continue;
      const std::string& tenant = ep->second.tenant;
      const BreakerView v = sched_->breaker_view(tenant, now());
      if (v.snapshot.state == BreakerSnapshot::State::kClosed) {
        EXPECT_FALSE(c.probe);
        continue;
      }
      EXPECT_TRUE(c.probe) << "a non-probe send while the breaker of " << tenant << " is "
                           << (v.snapshot.state == BreakerSnapshot::State::kOpen ? "open"
                                                                                 : "half-open");
      EXPECT_EQ(v.snapshot.state, BreakerSnapshot::State::kHalfOpen);
      EXPECT_LE(++probes[tenant], 1) << "two probes in one pass";
      auto prev = outstanding_probe_.find(tenant);
      if (prev != outstanding_probe_.end()) {
        EXPECT_GE(now() - prev->second, opts_.breaker.probe_timeout)
            << "a second probe while one is in flight";
      }
      outstanding_probe_[tenant] = now();
    }
  }

  bool all_done() const { return ops_.empty() && script_.empty() && sched_->live() == 0; }

  void final_checks() {
    // No delivery lost: each accepted event has exactly its deliveries, all terminal.
    std::map<EventSeq, uint32_t> per_event;
    for (const auto& [id, d] : store_.deliveries()) {
      const std::vector<Attempt>& attempts = store_.attempts_of(id);
      EXPECT_TRUE(is_terminal(d.status))
          << "delivery " << id << " is " << delivery_status_name(d.status);
      // Every attempt is recorded, numbered 1..n, and matches the counter.
      EXPECT_EQ(attempts.size(), d.attempts) << "delivery " << id;
      for (size_t k = 0; k < attempts.size(); ++k) {
        EXPECT_EQ(attempts[k].number, k + 1) << "delivery " << id;
      }
      const Receiver& rc = receiver_[id];
      EXPECT_LE(rc.seen, d.attempts) << "the receiver saw more requests than attempts";
      if (d.status == DeliveryStatus::kDelivered) {
        EXPECT_TRUE(rc.acted) << "delivered " << id << " never reached the receiver";
      } else {
        EXPECT_FALSE(d.last_code.is_none()) << "terminal without a reason: " << id;
      }
      if (d.test()) continue;
      ++per_event[d.event];
      auto ep = store_.endpoints().find(d.endpoint);
      if (ep != store_.endpoints().end()) {
        const RetryPolicy& p = *reg_.find(ep->second.policy);
        EXPECT_LE(d.fast_attempts, p.fast_budget());
        EXPECT_LE(d.slow_attempts, p.slow_budget());
      }
      ++terminal_[d.status];
    }
    for (const auto& [seq, n] : accepted_) {
      EXPECT_EQ(per_event[seq], n) << "event " << seq << " lost deliveries";
    }
  }

 public:
  struct Summary {
    uint64_t deliveries = 0, delivered = 0, failed = 0, dead = 0, sends = 0, probes = 0;
    uint64_t breaker_opened = 0, disabled = 0, crashes = 0, postponed = 0, unknown = 0;
    uint64_t hold_expired = 0, deadline = 0, redelivered_after_acting = 0, deferred = 0;
  };
  void add_to(Summary& s) const {
    s.deliveries += store_.deliveries().size();
    s.delivered += count(DeliveryStatus::kDelivered);
    s.failed += count(DeliveryStatus::kFailed);
    s.dead += count(DeliveryStatus::kDead);
    s.crashes += static_cast<uint64_t>(crashes_);
    for (const auto& [id, d] : store_.deliveries()) {
      auto it = receiver_.find(id);
      if (it != receiver_.end() && it->second.acted && it->second.seen > 1) {
        ++s.redelivered_after_acting;
      }
    }
    const SchedulerStats st = sched_->stats();  // since the last restart
    s.sends += st.sends;
    s.probes += st.probes;
    s.breaker_opened += st.breaker_opened;
    s.disabled += st.endpoints_disabled;
    s.postponed += st.subscription_postponed;
    s.deferred += st.deferred;
    s.unknown += st.outcome[static_cast<int>(Outcome::kUnknown)];
    s.hold_expired += st.hold_expired;
    s.deadline += st.deadline_exceeded;
  }

 private:
  uint64_t count(DeliveryStatus st) const {
    auto it = terminal_.find(st);
    return it == terminal_.end() ? 0 : it->second;
  }

  struct Receiver {
    uint32_t seen = 0;
    bool acted = false;
  };

  uint64_t seed_;
  Rng rng_;
  PolicyRegistry reg_;
  SchedulerOptions opts_;
  ManualClock clock_;
  WallTime start_, faults_end_;
  MemoryStore store_;
  SeqIds ids_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::string> tenants_;
  std::map<EndpointId, std::vector<Window>> faults_;
  std::map<EndpointId, int64_t> gone_at_ms_;
  std::multimap<WallTime, int> script_;
  std::vector<Op> ops_;
  std::map<DeliveryId, Receiver> receiver_;
  std::map<std::pair<EventSeq, EndpointId>, DeliveryId> id_of_;
  std::map<EventSeq, uint32_t> accepted_;
  std::map<std::string, WallTime> outstanding_probe_;
  std::map<DeliveryStatus, uint64_t> terminal_;
  int crashes_ = 0;
  bool trace_ = std::getenv("RINGCAST_SIM_TRACE") != nullptr;
};

TEST(ShardSim, ManySeeds) {
  Sim::Summary sum;
  const size_t seeds = sim::run_seeds<Sim>(200, sum);
  // The runs did something (guards against a vacuous pass): most deliveries get through
  // once faults stop, and every fault path was taken.
  if (seeds >= 50 && !::testing::Test::HasFailure()) {
    EXPECT_GT(sum.delivered * 2, sum.deliveries);
    EXPECT_GT(sum.probes, 0u);
    EXPECT_GT(sum.breaker_opened, 0u);
    EXPECT_GT(sum.disabled, 0u);
    EXPECT_GT(sum.crashes, 0u);
    EXPECT_GT(sum.postponed, 0u);
    EXPECT_GT(sum.hold_expired, 0u);
    EXPECT_GT(sum.deadline, 0u);
    EXPECT_GT(sum.redelivered_after_acting, 0u);
    EXPECT_GT(sum.deferred, 0u);
  }
  std::printf(
      "sim: %zu seeds, %lu deliveries (%lu delivered, %lu failed, %lu dead), %lu sends, "
      "%lu probes, %lu breaker openings, %lu endpoints disabled, %lu crashes, %lu postponed, "
      "%lu unknown outcomes, %lu hold-expired, %lu past a ceiling, %lu redelivered after the "
      "receiver acted, %lu sends deferred\n",
      seeds, (unsigned long)sum.deliveries, (unsigned long)sum.delivered, (unsigned long)sum.failed,
      (unsigned long)sum.dead, (unsigned long)sum.sends, (unsigned long)sum.probes,
      (unsigned long)sum.breaker_opened, (unsigned long)sum.disabled, (unsigned long)sum.crashes,
      (unsigned long)sum.postponed, (unsigned long)sum.unknown, (unsigned long)sum.hold_expired,
      (unsigned long)sum.deadline, (unsigned long)sum.redelivered_after_acting,
      (unsigned long)sum.deferred);
}

}  // namespace
}  // namespace ringcast
