// Micro benchmarks of the decision core: policy decision per attempt result, and the shard
// scheduler's fan-out + poll + on_result per delivery, against a naive peer measured in the
// same run (std::multimap timers + std::unordered_map records + std::deque queues, the same
// policy code) — report the ratio of the two per-delivery times.
//
//   ninja -C build bench_core_policy && ./build/bench/bench_core_policy
#include <benchmark/benchmark.h>

#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/classify.h"
#include "core/policy.h"
#include "core/scheduler.h"

namespace ringcast {
namespace {

const WallTime kT0 = WallTime::from_ms(1'767'225'600'000);

TransportResult http(int status) {
  TransportResult r;
  r.response_received = r.request_written = r.connect_attempted = true;
  r.http_status = static_cast<uint16_t>(status);
  return r;
}

// ---- policy decision ----------------------------------------------------------------------------

void BM_Decide(benchmark::State& state, const char* policy, int status, bool money) {
  PolicyRegistry reg;
  const RetryPolicy& p = *reg.find(policy);
  const Classification c = classify(http(status), kT0);
  Rng rng(1);
  Delivery d;
  d.created_at = kT0;
  d.flags = money ? Delivery::kFlagMoney : 0;
  uint8_t n = 1;
  for (auto _ : state) {
    d.fast_attempts = n;
    d.attempts = n;
    Decision dec = decide(d, c, p, kT0, rng);
    benchmark::DoNotOptimize(dec);
    n = static_cast<uint8_t>(n % 7 + 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_Decide, xhub_503, "xhub", 503, false);
BENCHMARK_CAPTURE(BM_Decide, xhub_money_400, "xhub", 400, true);
BENCHMARK_CAPTURE(BM_Decide, xhub_nonmoney_400, "xhub", 400, false);
BENCHMARK_CAPTURE(BM_Decide, smengo_500_jitter, "smengo", 500, false);
BENCHMARK_CAPTURE(BM_Decide, success, "xhub", 200, false);

void BM_ClassifyAndDecide(benchmark::State& state) {
  PolicyRegistry reg;
  const RetryPolicy& p = *reg.find("xhub");
  TransportResult r = http(503);
  r.retry_after = "120";
  Rng rng(1);
  Delivery d;
  d.created_at = kT0;
  d.fast_attempts = d.attempts = 3;
  for (auto _ : state) {
    Decision dec = decide(d, classify(r, kT0), p, kT0, rng);
    benchmark::DoNotOptimize(dec);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClassifyAndDecide);

void BM_MoneyRule(benchmark::State& state) {
  const MoneyRules rules = MoneyRules::xhub_default();
  const std::string payload =
      R"({"payment_id":"pay_8f2c","amount":"125.00","currency":"USD","meta":{"k":[1,2,3]},)"
      R"("external_id":"ord-77","status":"settled"})";
  for (auto _ : state) {
    benchmark::DoNotOptimize(rules.is_money("payment.status_changed", payload));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MoneyRule);

// ---- scheduler round trip -----------------------------------------------------------------------

struct SeqIds : IdAllocator {
  uint64_t n = 0;
  uint64_t next_id(Partition p) override { return make_id(p, ++n); }
};

constexpr int kEndpoints = 64;
constexpr int kBatch = 4096;  // events per iteration, one delivery each

// One iteration: kBatch events fanned out (one matching endpoint each), then polls and
// results until the batch is done; every `fail_every`-th result is a 503 retried once.
void BM_Scheduler(benchmark::State& state) {
  const int fail_every = static_cast<int>(state.range(0));
  PolicyRegistry reg;
  RetryPolicy p = RetryPolicy::smengo();
  p.name = "bench";
  p.jitter_permille = 0;
  (void)reg.put(p);
  SchedulerOptions o;
  o.max_sends_per_poll = 1 << 20;
  o.max_fire_per_poll = 1 << 20;
  o.fairness_cap = 1 << 20;
  Scheduler s(o, reg, 1, kT0);
  Mutations m;
  SeqIds ids;
  std::vector<std::string> types;
  for (int i = 0; i < kEndpoints; ++i) {
    Endpoint e;
    e.id = static_cast<EndpointId>(i + 1);
    e.tenant = "t" + std::to_string(i % 8);
    e.policy = "bench";
    e.max_in_flight = 1 << 20;
    types.push_back("type" + std::to_string(i));
    e.event_types = {types.back()};
    (void)s.create_endpoint(e, kT0, m);
  }
  Event ev;
  ev.payload = "{}";
  WallTime now = kT0;
  std::vector<SendCommand> out;
  uint64_t seq = 0, n = 0;
  for (auto _ : state) {
    m.clear();
    for (int i = 0; i < kBatch; ++i) {
      ev.seq = ++seq;
      ev.tenant = std::string("t").append(std::to_string(i % kEndpoints % 8));
      ev.type = types[static_cast<size_t>(i % kEndpoints)];
      s.fan_out(ev, now, ids, m);
    }
    int rounds = 0;
    while (s.stats().live > 0 && rounds++ < 4) {
      out.clear();
      s.poll(now, out, m);
      for (const SendCommand& c : out) {
        s.on_result(c, http(fail_every && (++n % fail_every == 0) && c.attempt == 1 ? 503 : 200),
                    now, now, m);
      }
      now += seconds(6);  // past the +5 s retry (jitter off)
    }
    benchmark::DoNotOptimize(m.deliveries.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["slot_bytes"] = static_cast<double>(s.stats().pending_bytes);
}
BENCHMARK(BM_Scheduler)->Arg(0)->Arg(4)->Unit(benchmark::kMicrosecond);

// The naive peer: the same work (fan-out by filter, money check, lease record, FIFO per
// endpoint, decide(), retry timers) on standard maps.
class NaiveScheduler {
 public:
  NaiveScheduler(const RetryPolicy& p, int endpoints) : p_(p), rng_(1) {
    for (int i = 0; i < endpoints; ++i) {
      eps_[static_cast<EndpointId>(i + 1)].filter = "type" + std::to_string(i);
      tenant_eps_[std::string("t").append(std::to_string(i % 8))].push_back(
          static_cast<EndpointId>(i + 1));
    }
  }
  void fan_out(const Event& ev, WallTime now, IdAllocator& ids, Mutations& m) {
    m.events.push_back(ev);
    for (EndpointId id : tenant_eps_[ev.tenant]) {
      if (eps_[id].filter != ev.type) continue;
      Delivery d;
      d.id = ids.next_id(0);
      d.event = ev.seq;
      d.endpoint = id;
      d.created_at = d.next_attempt_at = now;
      if (p_.money.is_money(ev.type, ev.payload)) d.flags |= Delivery::kFlagMoney;
      records_[d.id] = d;
      m.deliveries.push_back({d, 0, true});
      timers_.insert({now.ms(), d.id});
    }
  }
  void poll(WallTime now, std::vector<SendCommand>& out, Mutations& m) {
    while (!timers_.empty() && timers_.begin()->first <= now.ms()) {
      const DeliveryId id = timers_.begin()->second;
      timers_.erase(timers_.begin());
      eps_[records_[id].endpoint].ready.push_back(id);
    }
    for (auto& [eid, ep] : eps_) {
      while (!ep.ready.empty()) {
        Delivery& d = records_[ep.ready.front()];
        ep.ready.pop_front();
        ++d.attempts;
        ++d.fast_attempts;
        d.status = DeliveryStatus::kInFlight;
        m.deliveries.push_back({d, 0, false});
        out.push_back({d.id, d.event, d.endpoint, d.attempts, false, 0});
      }
    }
  }
  void on_result(const SendCommand& c, const TransportResult& r, WallTime now, Mutations& m) {
    auto it = records_.find(c.delivery);
    Delivery& d = it->second;
    Attempt a;
    a.delivery = d.id;
    a.number = c.attempt;
    a.http_status = r.http_status;
    m.attempts.push_back(a);
    Decision dec = decide(d, classify(r, now), p_, now, rng_);
    if (dec.kind == Decision::Kind::kRetry) {
      d.status = DeliveryStatus::kPending;
      d.next_attempt_at = dec.next_at;
      m.deliveries.push_back({d, 0, false});
      timers_.insert({dec.next_at.ms(), d.id});
    } else {
      d.status = DeliveryStatus::kDelivered;
      m.deliveries.push_back({d, 0, false});
      records_.erase(it);
    }
  }
  size_t live() const { return records_.size(); }

 private:
  struct Ep {
    std::string filter;
    std::deque<DeliveryId> ready;
  };
  const RetryPolicy& p_;
  Rng rng_;
  std::multimap<int64_t, DeliveryId> timers_;
  std::unordered_map<DeliveryId, Delivery> records_;
  std::map<EndpointId, Ep> eps_;
  std::unordered_map<std::string, std::vector<EndpointId>> tenant_eps_;
};

void BM_NaivePeer(benchmark::State& state) {
  const int fail_every = static_cast<int>(state.range(0));
  RetryPolicy p = RetryPolicy::smengo();
  p.jitter_permille = 0;
  NaiveScheduler s(p, kEndpoints);
  Mutations m;
  SeqIds ids;
  std::vector<std::string> types;
  for (int i = 0; i < kEndpoints; ++i) types.push_back("type" + std::to_string(i));
  Event ev;
  ev.payload = "{}";
  WallTime now = kT0;
  std::vector<SendCommand> out;
  uint64_t seq = 0, n = 0;
  for (auto _ : state) {
    m.clear();
    for (int i = 0; i < kBatch; ++i) {
      ev.seq = ++seq;
      ev.tenant = std::string("t").append(std::to_string(i % kEndpoints % 8));
      ev.type = types[static_cast<size_t>(i % kEndpoints)];
      s.fan_out(ev, now, ids, m);
    }
    int rounds = 0;
    while (s.live() > 0 && rounds++ < 4) {
      out.clear();
      s.poll(now, out, m);
      for (const SendCommand& c : out) {
        s.on_result(c, http(fail_every && (++n % fail_every == 0) && c.attempt == 1 ? 503 : 200),
                    now, m);
      }
      now += seconds(6);
    }
    benchmark::DoNotOptimize(m.deliveries.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_NaivePeer)->Arg(0)->Arg(4)->Unit(benchmark::kMicrosecond);

// Memory per pending delivery: 1 M deliveries parked in the wheel (subscription inactive).
void BM_SchedulerPendingMemory(benchmark::State& state) {
  const int64_t n = state.range(0);
  for (auto _ : state) {
    PolicyRegistry reg;
    SchedulerOptions o;
    o.max_fire_per_poll = 1 << 30;
    auto s = std::make_unique<Scheduler>(o, reg, 1, kT0);
    Mutations m;
    SeqIds ids;
    for (int i = 0; i < 100; ++i) {
      Endpoint e;
      e.id = static_cast<EndpointId>(i + 1);
      e.tenant = "t";
      (void)s->create_endpoint(e, kT0, m);
    }
    s->set_subscription("t", false, kT0, m);
    Event ev;
    ev.tenant = "t";
    ev.type = std::string("x");
    for (int64_t i = 0; i < n / 100; ++i) {
      ev.seq = static_cast<uint64_t>(i + 1);
      s->fan_out(ev, kT0, ids, m);
      if (m.deliveries.size() > 100000) m.clear();
    }
    const SchedulerStats st = s->stats();
    state.counters["pending"] = static_cast<double>(st.in_wheel);
    state.counters["bytes_per_pending"] =
        static_cast<double>(st.slab_capacity * st.pending_bytes) / static_cast<double>(st.in_wheel);
  }
}
BENCHMARK(BM_SchedulerPendingMemory)->Arg(1'000'000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ringcast

BENCHMARK_MAIN();
