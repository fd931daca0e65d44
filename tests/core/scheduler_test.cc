// The shard scheduler (SPEC R2–R9, R12): fan-out, leases, fairness, in-flight limits,
// on_result mutations, auto-disable, pause, subscription, breaker holds, recovery.
#include "core/scheduler.h"
#include "tests/core/scheduler_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace ringcast {
namespace {

using K = ErrorCode::Kind;
const WallTime kT0 = test::kSchedT0;
using test::SeqIds;

TransportResult http(int status, std::string retry_after = "") {
  TransportResult r;
  r.response_received = r.request_written = r.connect_attempted = true;
  r.http_status = static_cast<uint16_t>(status);
  r.retry_after = std::move(retry_after);
  r.body_prefix = "body " + std::to_string(status);
  return r;
}

// The whole request was written, then no answer within the deadline: UNKNOWN (R12.1).
TransportResult net_timeout() {
  TransportResult r;
  r.request_written = r.connect_attempted = true;
  r.code = ErrorCode::of(ErrorCode::Kind::kTimeout);
  return r;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(reg.put(test::smengo_ms()).ok());
    RetryPolicy hold = RetryPolicy::xhub();
    hold.name = "xhub-no-age";
    hold.absolute_ceiling = Duration(0);
    ASSERT_TRUE(reg.put(hold).ok());
    make();
  }
  void make() { s = std::make_unique<Scheduler>(opts, reg, 7, now); }

  // A new scheduler with this reconciliation schedule and deadline (SPEC R12.11), and one
  // endpoint of "acme" on xhub that reconciles its UNKNOWN outcomes at `status_url`.
  Endpoint reconciling_ep(std::vector<Duration> schedule, Duration deadline,
                          const std::string& status_url) {
    opts.reconcile_schedule = std::move(schedule);
    opts.reconcile_deadline = deadline;
    s = std::make_unique<Scheduler>(opts, reg, 7, now);
    Endpoint e = add_ep("acme", "xhub");
    Endpoint cfg = *s->find_endpoint(e.id);
    cfg.on_unknown = OnUnknown::kReconcile;
    cfg.status_url = status_url;
    EXPECT_TRUE(s->update_endpoint(cfg, now, m).ok());
    return e;
  }
  Endpoint add_ep(const std::string& tenant, const std::string& policy,
                  std::vector<std::string> filter = {}, uint32_t max_in_flight = 0) {
    Endpoint e;
    e.id = make_id(partition_of(tenant), 1000 + ++ep_seq);
    e.tenant = tenant;
    e.url = "https://example.com/hook";
    e.policy = policy;
    e.event_types = std::move(filter);
    e.max_in_flight = max_in_flight;
    Result<Endpoint> r = s->create_endpoint(e, now, m);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : e;
  }
  Event event(const std::string& tenant, const std::string& type = "order.created",
              const std::string& payload = "{}") {
    Event ev;
    ev.seq = make_id(partition_of(tenant), 1'000'000 + ++ev_seq);
    ev.tenant = tenant;
    ev.id = "ev" + std::to_string(ev_seq);
    ev.type = type;
    ev.payload = payload;
    ev.created_at = now;
    ev.payload_hash = payload_hash(payload);
    return ev;
  }
  uint32_t submit(const std::string& tenant, const std::string& type = "order.created",
                  const std::string& payload = "{}") {
    return s->fan_out(event(tenant, type, payload), now, ids, m);
  }
  std::vector<SendCommand> poll() {
    std::vector<SendCommand> out;
    s->poll(now, out, m);
    return out;
  }
  void reply(const SendCommand& c, const TransportResult& r) { s->on_result(c, r, now, now, m); }
  void reply_all(const std::vector<SendCommand>& cs, int status) {
    for (const SendCommand& c : cs) reply(c, http(status));
  }
  // The last DeliveryPut of `id` in m.
  const Delivery* last_put(DeliveryId id) const {
    for (auto it = m.deliveries.rbegin(); it != m.deliveries.rend(); ++it) {
      if (it->delivery.id == id) return &it->delivery;
    }
    return nullptr;
  }
  size_t count_status(DeliveryStatus st, ErrorCode code = {}) const {
    std::map<DeliveryId, Delivery> last;
    for (const DeliveryPut& p : m.deliveries) last[p.delivery.id] = p.delivery;
    size_t n = 0;
    for (const auto& [id, d] : last) {
      if (d.status == st && (code.is_none() || d.last_code == code)) ++n;
    }
    return n;
  }

  PolicyRegistry reg;
  SchedulerOptions opts;
  std::unique_ptr<Scheduler> s;
  SeqIds ids;
  WallTime now = kT0;
  Mutations m;
  uint64_t ep_seq = 0, ev_seq = 0;
};

TEST_F(SchedulerTest, FanOutOnePerEnabledMatchingEndpoint) {
  Endpoint all = add_ep("acme", "xhub");
  Endpoint pay = add_ep("acme", "xhub", {"payment.*"});
  Endpoint ref = add_ep("acme", "xhub", {"refund.*"});
  Endpoint paused = add_ep("acme", "xhub");
  Endpoint other = add_ep("globex", "xhub");
  ASSERT_TRUE(s->endpoint_action(paused.id, EndpointAction::kPause, now, m).ok());
  m.clear();
  EXPECT_EQ(submit("acme", "payment.status_changed", R"({"status":"paid"})"), 2u);
  ASSERT_EQ(m.events.size(), 1u);
  ASSERT_EQ(m.deliveries.size(), 2u);
  std::vector<EndpointId> got;
  for (const DeliveryPut& p : m.deliveries) {
    EXPECT_TRUE(p.is_new);
    EXPECT_EQ(p.tenant_hash, tenant_hash("acme"));
    EXPECT_EQ(p.delivery.status, DeliveryStatus::kPending);
    EXPECT_TRUE(p.delivery.money());  // SPEC R3.5 decided at intake
    EXPECT_EQ(id_partition(p.delivery.id), partition_of("acme"));
    got.push_back(p.delivery.endpoint);
  }
  EXPECT_EQ(got, (std::vector<EndpointId>{all.id, pay.id}));
  m.clear();
  EXPECT_EQ(submit("acme", "payment.status_changed", R"({"status":"failed"})"), 2u);
  for (const DeliveryPut& p : m.deliveries) EXPECT_FALSE(p.delivery.money());
  m.clear();
  EXPECT_EQ(submit("nobody"), 0u);
  EXPECT_EQ(m.events.size(), 1u);  // stored anyway: the idempotency key (R12.5)
  (void)ref;
  (void)other;
}

TEST_F(SchedulerTest, LeaseIsWrittenBeforeTheSend) {
  add_ep("acme", "xhub");
  for (int i = 0; i < 5; ++i) submit("acme");
  m.clear();
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 5u);
  for (const SendCommand& c : out) {
    const Delivery* d = last_put(c.delivery);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->status, DeliveryStatus::kInFlight);  // SPEC R12.2: the lease
    EXPECT_EQ(d->attempts, 1);
    EXPECT_EQ(d->fast_attempts, 1);
    EXPECT_EQ(c.attempt, 1);
    EXPECT_FALSE(c.probe);
  }
  EXPECT_EQ(s->stats().in_flight, 5u);
}

TEST_F(SchedulerTest, FairnessCapFiftyPerEndpointPerPass) {
  Endpoint a = add_ep("acme", "xhub", {}, 1000);
  Endpoint b = add_ep("acme", "xhub", {"b.*"}, 1000);
  for (int i = 0; i < 200; ++i) submit("acme", "a.x");
  for (int i = 0; i < 10; ++i) submit("acme", "b.x");  // both endpoints (a takes all)
  std::map<EndpointId, int> per;
  for (const SendCommand& c : poll()) ++per[c.endpoint];
  EXPECT_EQ(per[a.id], 50);  // SPEC R5.3
  EXPECT_EQ(per[b.id], 10);
  per.clear();
  for (const SendCommand& c : poll()) ++per[c.endpoint];
  EXPECT_EQ(per[a.id], 50);
  EXPECT_EQ(per[b.id], 0);
  int rest = 0;
  for (int i = 0; i < 10; ++i) rest += static_cast<int>(poll().size());
  EXPECT_EQ(rest, 110);  // 210 - 100
}

TEST_F(SchedulerTest, MaxSendsPerPollIsABound) {
  opts.max_sends_per_poll = 30;
  make();
  add_ep("acme", "xhub", {}, 1000);
  add_ep("acme", "xhub", {}, 1000);
  for (int i = 0; i < 40; ++i) submit("acme");
  EXPECT_EQ(poll().size(), 30u);
  EXPECT_EQ(poll().size(), 30u);
  EXPECT_EQ(poll().size(), 20u);
}

TEST_F(SchedulerTest, InFlightLimitPerEndpoint) {
  Endpoint e = add_ep("acme", "xhub", {}, 3);
  for (int i = 0; i < 10; ++i) submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 3u);  // R12.6 bulkhead
  EXPECT_TRUE(poll().empty());
  reply(out[0], http(200));
  std::vector<SendCommand> more = poll();
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(s->stats().in_flight, 3u);
  // FIFO: deliveries go in creation order.
  EXPECT_LT(out[2].delivery, more[0].delivery);
  (void)e;
}

TEST_F(SchedulerTest, DefaultInFlightLimit) {
  opts.default_max_in_flight = 4;
  make();
  add_ep("acme", "xhub");
  for (int i = 0; i < 10; ++i) submit("acme");
  EXPECT_EQ(poll().size(), 4u);
}

TEST_F(SchedulerTest, OnResultSuccessWritesAttemptAndDelivered) {
  add_ep("acme", "xhub");
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  m.clear();
  const WallTime started = now;
  now += milliseconds(120);
  TransportResult r = http(200);
  r.body_prefix = std::string(600, 'x');
  s->on_result(out[0], r, started, now, m);
  ASSERT_EQ(m.attempts.size(), 1u);
  const Attempt& a = m.attempts[0];
  EXPECT_EQ(a.delivery, out[0].delivery);
  EXPECT_EQ(a.number, 1);
  EXPECT_EQ(a.ladder, Ladder::kFast);
  EXPECT_EQ(a.outcome, Outcome::kSuccess);
  EXPECT_EQ(a.http_status, 200);
  EXPECT_EQ(a.duration, milliseconds(120));
  EXPECT_EQ(a.started_at, started);
  EXPECT_EQ(a.response_prefix.size(), kResponsePrefixBytes);  // R10.3
  ASSERT_EQ(m.deliveries.size(), 1u);
  EXPECT_EQ(m.deliveries[0].delivery.status, DeliveryStatus::kDelivered);
  EXPECT_EQ(s->stats().live, 0u);
  EXPECT_EQ(s->stats().delivered, 1u);
  // The same command again is stale: ignored.
  m.clear();
  s->on_result(out[0], r, started, now, m);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(s->stats().stale_results, 1u);
}

TEST_F(SchedulerTest, RetryFollowsTheLadderWithTheSameId) {
  add_ep("acme", "xhub");  // 429: the fast ladder, and no breaker (R4.5)
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const DeliveryId id = out[0].delivery;
  const int64_t pauses_s[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  for (int n = 1; n <= 9; ++n) {
    m.clear();
    reply(out[0], http(429));
    const Delivery* d = last_put(id);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->status, DeliveryStatus::kPending);
    const WallTime due = now + seconds(pauses_s[n - 1]);
    EXPECT_EQ(d->next_attempt_at, due);
    EXPECT_EQ(d->last_code, ErrorCode::http(429));
    // next_wakeup() is a lower bound (the wheel's); following it never overshoots.
    while (true) {
      ASSERT_TRUE(s->next_wakeup().has_value());
      ASSERT_LE(*s->next_wakeup(), due);
      now = std::max(now, *s->next_wakeup());
      out = poll();
      if (!out.empty()) break;
      if (now == due) FAIL() << "nothing sent at the due time";
      ASSERT_LT(now, due);
    }
    EXPECT_EQ(now, due);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].delivery, id);  // R12.9: a redelivery carries the same id
    EXPECT_EQ(out[0].attempt, n + 1);
  }
  m.clear();
  reply(out[0], http(429));
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kFailed);  // R2.2: budget of 10
  EXPECT_FALSE(s->next_wakeup().has_value());
  EXPECT_EQ(s->stats().live, 0u);
}

TEST_F(SchedulerTest, ExhaustionDisablesEndpointAndKillsBacklog) {
  // SPEC R8: the first delivery that exhausts its attempts disables the endpoint; every
  // queued delivery is dead (endpoint_disabled) and not sent after re-enabling.
  Endpoint e = add_ep("acme", "smengo-ms", {}, 2);
  for (int i = 0; i < 8; ++i) submit("acme");
  std::vector<SendCommand> in_flight;
  int rounds = 0;
  while (s->find_endpoint(e.id)->state == EndpointState::kEnabled && rounds++ < 100) {
    for (const SendCommand& c : poll()) in_flight.push_back(c);
    // Answer the oldest in-flight one with 500; the rest stay in flight for a while.
    if (!in_flight.empty()) {
      reply(in_flight.front(), http(500));
      in_flight.erase(in_flight.begin());
    }
    now += milliseconds(7);
  }
  ASSERT_EQ(s->find_endpoint(e.id)->state, EndpointState::kDisabled);
  EXPECT_EQ(s->find_endpoint(e.id)->disabled_reason, ErrorCode::http(500));
  ASSERT_EQ(m.notifications.size(), 1u);  // R8.4
  EXPECT_EQ(m.notifications[0].kind, "endpoint_disabled");
  EXPECT_EQ(m.notifications[0].endpoint, e.id);
  const DeliveryId trigger = [&] {
    for (auto it = m.deliveries.rbegin(); it != m.deliveries.rend(); ++it) {
      if (it->delivery.status == DeliveryStatus::kDead &&
          it->delivery.last_code == ErrorCode::http(500)) {
        return it->delivery.id;
      }
    }
    return DeliveryId{0};
  }();
  ASSERT_NE(trigger, 0u);
  EXPECT_EQ(last_put(trigger)->attempts, 3);
  // The in-flight ones end dead when they come back, whatever they got.
  ASSERT_FALSE(in_flight.empty());
  for (const SendCommand& c : in_flight) reply(c, http(503));
  EXPECT_EQ(count_status(DeliveryStatus::kDead), 8u);
  EXPECT_EQ(count_status(DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDisabled)), 7u);
  EXPECT_EQ(s->stats().live, 0u);
  // Re-enable: the backlog is gone; only new events go out.
  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kEnable, now, m).ok());
  now += hours(1);
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(submit("acme"), 1u);
  EXPECT_EQ(poll().size(), 1u);
}

TEST_F(SchedulerTest, GoneDisablesAtOnceIncludingRetriesInTheWheelAndInFlight) {
  Endpoint e = add_ep("acme", "smengo", {}, 2);
  for (int i = 0; i < 5; ++i) submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 2u);
  reply(out[0], http(503));  // → in the wheel, retry in ~5 s
  std::vector<SendCommand> next = poll();
  ASSERT_EQ(next.size(), 1u);  // in flight: out[1], next[0]
  m.clear();
  reply(out[1], http(410));  // SPEC R6: gone → dead + disable
  EXPECT_EQ(last_put(out[1].delivery)->status, DeliveryStatus::kDead);
  EXPECT_EQ(last_put(out[1].delivery)->last_code, ErrorCode::of(K::kGone));
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kDisabled);
  EXPECT_EQ(s->find_endpoint(e.id)->disabled_reason, ErrorCode::of(K::kGone));
  // The wheel one and the two queued ones are dead now; the in-flight one when it returns.
  EXPECT_EQ(count_status(DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDisabled)), 3u);
  m.clear();
  reply(next[0], http(500));
  EXPECT_EQ(last_put(next[0].delivery)->status, DeliveryStatus::kDead);
  EXPECT_EQ(last_put(next[0].delivery)->last_code, ErrorCode::of(K::kEndpointDisabled));
  EXPECT_EQ(s->stats().live, 0u);
  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kEnable, now, m).ok());
  now += hours(30);
  EXPECT_TRUE(poll().empty());
}

TEST_F(SchedulerTest, PauseResumeAndTestWhilePaused) {
  Endpoint e = add_ep("acme", "xhub", {}, 100);
  for (int i = 0; i < 3; ++i) submit("acme");
  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kPause, now, m).ok());
  EXPECT_EQ(submit("acme"), 0u);  // SPEC R9.1: nothing new is enqueued
  EXPECT_TRUE(poll().empty());    // R9.2: queued ones wait
  EXPECT_EQ(s->stats().held_by_pause, 3u);
  // R9.3: a test event goes out while paused, and is single-shot.
  Event t = event("acme", "ringcast.test");
  Result<DeliveryId> tid = s->add_test_delivery(e.id, t, now, ids, m);
  ASSERT_TRUE(tid.ok());
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].delivery, *tid);
  m.clear();
  reply(out[0], http(500));
  EXPECT_EQ(last_put(*tid)->status, DeliveryStatus::kFailed);  // no retry for tests
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kPaused);
  now += hours(2);
  EXPECT_TRUE(poll().empty());
  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kResume, now, m).ok());
  EXPECT_EQ(poll().size(), 3u);  // R9.2: the queue goes out after resume
}

TEST_F(SchedulerTest, RetryDueWhilePausedWaitsForResume) {
  Endpoint e = add_ep("acme", "xhub");
  submit("acme");
  std::vector<SendCommand> out = poll();
  reply(out[0], http(503));
  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kPause, now, m).ok());
  now += seconds(10);
  EXPECT_TRUE(poll().empty());
  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kResume, now, m).ok());
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].attempt, 2);
}

TEST_F(SchedulerTest, TestDeliveryToDisabledEndpointNeverChangesIt) {
  Endpoint e = add_ep("acme", "smengo");
  submit("acme");
  reply(poll()[0], http(410));
  ASSERT_EQ(s->find_endpoint(e.id)->state, EndpointState::kDisabled);
  Result<DeliveryId> tid = s->add_test_delivery(e.id, event("acme", "ringcast.test"), now, ids, m);
  ASSERT_TRUE(tid.ok());
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);  // R8.5: fix, test, see 2xx, re-enable
  m.clear();
  reply(out[0], http(200));
  EXPECT_EQ(last_put(*tid)->status, DeliveryStatus::kDelivered);
  EXPECT_TRUE(m.endpoints.empty());
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kDisabled);
  EXPECT_FALSE(s->add_test_delivery(999, event("acme"), now, ids, m).ok());
}

TEST_F(SchedulerTest, SubscriptionInactivePostponesWithoutSpendingAttempts) {
  Endpoint e = add_ep("acme", "smengo");
  s->set_subscription("acme", false, now, m);
  ASSERT_FALSE(m.tenants.empty());
  EXPECT_FALSE(m.tenants.back().subscription_active);
  m.clear();
  EXPECT_EQ(submit("acme"), 1u);  // enqueued; it waits
  const DeliveryId id = m.deliveries[0].delivery.id;
  EXPECT_TRUE(poll().empty());
  const Delivery* d = last_put(id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->status, DeliveryStatus::kPending);
  EXPECT_EQ(d->attempts, 0);  // no attempt spent
  EXPECT_EQ(d->last_code, ErrorCode::of(K::kSubscriptionInactive));
  EXPECT_EQ(d->next_attempt_at, now + hours(1));
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kEnabled);  // untouched
  // Still inactive an hour later: postponed again.
  now += hours(1);
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(last_put(id)->next_attempt_at, now + hours(1));
  s->set_subscription("acme", true, now, m);
  now += minutes(59);
  EXPECT_TRUE(poll().empty());
  now += minutes(1);  // back within the hour (the seed)
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].attempt, 1);
}

TEST_F(SchedulerTest, SubscriptionGoingInactiveHoldsQueuedDeliveries) {
  add_ep("acme", "smengo", {}, 1);
  submit("acme");
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  s->set_subscription("acme", false, now, m);
  reply(out[0], http(200));
  EXPECT_TRUE(poll().empty());  // the queued one is postponed at dispatch
  EXPECT_EQ(s->stats().subscription_postponed, 1u);
}

// ---- breaker ------------------------------------------------------------------------------------

class BreakerSchedulerTest : public SchedulerTest {
 protected:
  // Five deliveries answered 503: the tenant breaker opens (R4.1).
  std::vector<DeliveryId> open_breaker(const std::string& tenant = "acme") {
    for (int i = 0; i < 5; ++i) submit(tenant);
    std::vector<SendCommand> out = poll();
    EXPECT_EQ(out.size(), 5u);
    std::vector<DeliveryId> ids_;
    for (const SendCommand& c : out) {
      ids_.push_back(c.delivery);
      reply(c, http(503));
    }
    EXPECT_EQ(s->breaker_view(tenant, now).snapshot.state, BreakerSnapshot::State::kOpen);
    return ids_;
  }
};

TEST_F(BreakerSchedulerTest, OpenHoldsEverythingWithoutSpendingAttempts) {
  add_ep("acme", "xhub");
  std::vector<DeliveryId> held = open_breaker();
  EXPECT_EQ(submit("acme"), 1u);  // fresh ones are held too (R4.6)
  // The retries (+1 s) and the fresh one stay put for the whole pause.
  for (int i = 0; i < 10; ++i) {
    now += seconds(29);
    EXPECT_TRUE(poll().empty()) << i;
  }
  EXPECT_EQ(s->stats().held_by_breaker, 6u);
  for (DeliveryId id : held) {
    std::optional<Delivery> d = s->find_live_delivery(id);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->attempts, 1);  // R2.3: held time spends no attempts
  }
}

TEST_F(BreakerSchedulerTest, OneProbePerCycleDoublingPausesThenDrain) {
  add_ep("acme", "xhub", {}, 100);
  const WallTime opened = now;
  open_breaker();
  submit("acme");
  const Duration pauses[] = {minutes(5), minutes(10), minutes(20), minutes(30), minutes(30)};
  WallTime cycle = opened;
  for (Duration pause : pauses) {
    now = cycle + pause - seconds(1);
    EXPECT_TRUE(poll().empty());
    now = cycle + pause;
    std::vector<SendCommand> out = poll();
    ASSERT_EQ(out.size(), 1u);  // SPEC R4.3: one probe
    EXPECT_TRUE(out[0].probe);
    EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kHalfOpen);
    now += seconds(30);  // the others ask again after ~30 s: still held
    EXPECT_TRUE(poll().empty());
    reply(out[0], http(503));  // probe failed → open, pause doubled
    cycle = now;
    EXPECT_EQ(s->breaker_view("acme", now).snapshot.reopen_at,
              cycle + std::min<Duration>(pause * 2, minutes(30)));
  }
  now = s->breaker_view("acme", now).snapshot.reopen_at;
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].probe);
  m.clear();
  reply(out[0], http(200));  // probe succeeded → closed, the queue drains at once (R4.4)
  EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kClosed);
  ASSERT_FALSE(m.tenants.empty());
  EXPECT_EQ(m.tenants.back().breaker.state, BreakerSnapshot::State::kClosed);
  std::vector<SendCommand> rest = poll();
  EXPECT_EQ(rest.size(), 5u);
  for (const SendCommand& c : rest) {
    EXPECT_FALSE(c.probe);
    const Delivery* d = last_put(c.delivery);
    ASSERT_NE(d, nullptr);
    EXPECT_GT(d->held, hours(1));  // held time accounted (R4.7)
    EXPECT_LE(d->attempts, 7);     // 5 probes over 6 deliveries at most; never the pauses
  }
}

TEST_F(BreakerSchedulerTest, FourxxNeverOpens) {
  add_ep("acme", "xhub", {}, 100);
  for (int i = 0; i < 20; ++i) submit("acme");
  for (const SendCommand& c : poll()) reply(c, http(400));
  EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kClosed);
  EXPECT_EQ(s->breaker_view("acme", now).window_total, 20u);
  EXPECT_EQ(s->breaker_view("acme", now).window_failed, 0u);
}

TEST_F(BreakerSchedulerTest, BreakerIsPerTenant) {
  add_ep("acme", "xhub");
  add_ep("globex", "xhub");
  open_breaker("acme");
  submit("globex");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(s->breaker_view("globex", now).snapshot.state, BreakerSnapshot::State::kClosed);
}

TEST_F(BreakerSchedulerTest, SmengoEndpointsIgnoreTheBreaker) {
  add_ep("acme", "xhub");
  Endpoint sm = add_ep("acme", "smengo", {"sm.*"});
  open_breaker();
  submit("acme", "sm.x");  // both endpoints match; only the smengo one may send
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].endpoint, sm.id);
  // The breaker view counts which endpoints use it (the portal says "not used" at 0).
  EXPECT_EQ(s->breaker_view("acme", now).endpoints, 2u);
  EXPECT_EQ(s->breaker_view("acme", now).endpoints_using, 1u);
  add_ep("initech", "smengo");
  EXPECT_EQ(s->breaker_view("initech", now).endpoints, 1u);
  EXPECT_EQ(s->breaker_view("initech", now).endpoints_using, 0u);
}

TEST_F(BreakerSchedulerTest, LostProbeIsReplacedAfterTheProbeTimeout) {
  add_ep("acme", "xhub", {}, 100);
  open_breaker();
  now += minutes(5);
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].probe);
  // No result ever comes back for it (say the engine lost it).
  for (int i = 0; i < 3; ++i) {
    now += seconds(30);
    EXPECT_TRUE(poll().empty()) << i;
  }
  now += opts.breaker.probe_timeout;
  std::vector<SendCommand> again = poll();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].probe);
  EXPECT_NE(again[0].delivery, out[0].delivery);
}

TEST_F(BreakerSchedulerTest, ManualResetReleasesAtOnce) {
  add_ep("acme", "xhub", {}, 100);
  open_breaker();
  now += minutes(1);
  EXPECT_TRUE(poll().empty());
  m.clear();
  s->reset_breaker("acme", now, m);  // SPEC R4.8
  ASSERT_EQ(m.tenants.size(), 1u);
  EXPECT_EQ(m.tenants[0].breaker.state, BreakerSnapshot::State::kClosed);
  std::vector<SendCommand> out = poll();
  EXPECT_EQ(out.size(), 5u);
  for (const SendCommand& c : out) EXPECT_EQ(c.attempt, 2);
}

TEST_F(BreakerSchedulerTest, HoldCeilingThirtyDays) {
  // SPEC R4.7 with a policy that has no age ceiling, so the hold ceiling is what ends it.
  Endpoint e = add_ep("acme", "xhub-no-age", {}, 100);
  Tenant t;
  t.name = "acme";
  t.breaker.state = BreakerSnapshot::State::kOpen;
  t.breaker.failed_probes = 3;
  t.breaker.opened_at = now - days(29);
  t.breaker.reopen_at = now + minutes(30);
  s->restore_tenant(t);
  Delivery d;
  d.id = make_id(partition_of("acme"), 77);
  d.endpoint = e.id;
  d.created_at = now - days(40);
  d.next_attempt_at = now - days(29);  // due (and held) for 29 days
  d.held = hours(12);                  // plus earlier holds
  // Six younger deliveries share the probe duty (a probe is a real attempt).
  for (int i = 0; i < 6; ++i) {
    Delivery f;
    f.id = make_id(partition_of("acme"), 100 + static_cast<uint64_t>(i));
    f.endpoint = e.id;
    f.created_at = now - days(1);
    f.next_attempt_at = now - hours(1);
    s->restore_delivery(f, now);
  }
  s->restore_delivery(d, now);
  m.clear();
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(s->stats().held_by_breaker, 7u);
  // 29 d + 12 h held so far; at the half-open transitions the ceiling is checked.
  int probes_of_d = 0;  // it may itself be chosen as a probe: a real attempt
  while (s->find_live_delivery(d.id).has_value() && now < kT0 + days(2)) {
    std::optional<WallTime> w = s->next_wakeup();
    ASSERT_TRUE(w.has_value());
    now = std::max(now, *w);
    for (const SendCommand& c : poll()) {
      EXPECT_TRUE(c.probe);
      if (c.delivery == d.id) ++probes_of_d;
      reply(c, http(503));  // probes keep failing
    }
  }
  const Delivery* last = last_put(d.id);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->status, DeliveryStatus::kFailed);
  EXPECT_EQ(last->last_code, ErrorCode::of(K::kBreakerHoldExpired));
  EXPECT_GE(last->held, days(30));
  EXPECT_LE(last->held, days(30) + minutes(31));
  EXPECT_EQ(last->attempts, probes_of_d);  // nothing but probes while held
  EXPECT_LT(probes_of_d, 10);
}

TEST_F(BreakerSchedulerTest, XhubAgeCeilingEndsLongHolds) {
  Endpoint e = add_ep("acme", "xhub", {}, 100);
  Tenant t;
  t.name = "acme";
  t.breaker.state = BreakerSnapshot::State::kOpen;
  t.breaker.opened_at = now - days(1);
  t.breaker.reopen_at = now + minutes(30);
  s->restore_tenant(t);
  Delivery d;
  d.id = make_id(partition_of("acme"), 78);
  d.endpoint = e.id;
  d.created_at = now - days(30) + minutes(10);
  d.next_attempt_at = now - days(1);
  d.attempts = d.fast_attempts = 1;
  s->restore_delivery(d, now);
  m.clear();
  while (s->find_live_delivery(d.id).has_value() && now < kT0 + days(1)) {
    now = std::max(now, *s->next_wakeup());
    for (const SendCommand& c : poll()) reply(c, http(503));
  }
  EXPECT_EQ(last_put(d.id)->status, DeliveryStatus::kFailed);
  EXPECT_EQ(last_put(d.id)->last_code, ErrorCode::of(K::kDeadlineExceeded));  // R3.3
}

// ---- recovery, deletion, determinism ------------------------------------------------------------

TEST_F(SchedulerTest, RecoveryNeverOverspendsABudget) {
  Endpoint e = add_ep("acme", "xhub");
  Delivery spent;
  spent.id = make_id(partition_of("acme"), 1);
  spent.endpoint = e.id;
  spent.created_at = now - minutes(10);
  spent.next_attempt_at = now - seconds(5);
  spent.attempts = spent.fast_attempts = 10;  // the 10th was in flight at the crash
  spent.last_code = ErrorCode::of(K::kLeaseExpired);
  Delivery mid = spent;
  mid.id = make_id(partition_of("acme"), 2);
  mid.attempts = mid.fast_attempts = 3;
  Delivery done = spent;
  done.id = make_id(partition_of("acme"), 3);
  done.status = DeliveryStatus::kDelivered;
  s->restore_delivery(spent, now);
  s->restore_delivery(mid, now);
  s->restore_delivery(done, now);  // terminal: ignored
  m.clear();
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].delivery, mid.id);
  EXPECT_EQ(out[0].attempt, 4);
  // The lost attempt may have reached the receiver (R12.1): the budget ends UNKNOWN (R12.10).
  EXPECT_EQ(last_put(spent.id)->status, DeliveryStatus::kUnknown);
  EXPECT_EQ(last_put(spent.id)->last_code, ErrorCode::of(K::kLeaseExpired));
  EXPECT_EQ(last_put(spent.id)->attempts, 10);
  EXPECT_EQ(s->stats().live, 1u);
}

// SPEC R6 lease_expired: a crash of ringcast with the delivery in flight is recorded (the
// store's recovery, core expire_lease) but is no answer of the receiver: five crashes in a row
// do not spend a 3-attempt smengo budget, so its exhaustion cannot auto-disable a healthy
// endpoint (R8.1) — a crash loop of the service used to kill every queued delivery that way.
TEST_F(SchedulerTest, CrashesWithADeliveryInFlightSpendNoBudgetAndNeverDisable) {
  const Endpoint e = add_ep("acme", "smengo-ms");  // 3 attempts; exhaustion disables
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const DeliveryId id = out[0].delivery;
  for (int crash = 1; crash <= 5; ++crash) {
    ASSERT_NE(last_put(id), nullptr);
    Delivery d = *last_put(id);  // the lease as the store holds it
    ASSERT_EQ(d.status, DeliveryStatus::kInFlight);
    const Attempt lost = expire_lease(d, d.attempts, now);  // what recovery writes
    EXPECT_EQ(lost.code, ErrorCode::of(K::kLeaseExpired));
    EXPECT_EQ(lost.outcome, Outcome::kUnknown);
    EXPECT_EQ(d.fast_attempts, 0u) << "crash " << crash;
    EXPECT_EQ(d.lease_expiries, crash);
    make();  // the restarted process
    ASSERT_TRUE(s->restore_endpoint(e).ok());
    s->restore_delivery(d, now);
    m.clear();
    out = poll();
    ASSERT_EQ(out.size(), 1u) << "crash " << crash << ": sent again, not ended";
    EXPECT_EQ(out[0].attempt, crash + 1) << "the receiver sees the numbers go on";
    now += milliseconds(1);
  }
  EXPECT_EQ(s->stats().endpoints_disabled, 0u);
  // The receiver's own answers still spend the budget: 503, 503, 503 ends it (and disables).
  reply(out[0], http(503));
  for (int i = 0; i < 10 && s->find_live_delivery(id).has_value(); ++i) {
    now = std::max(now, *s->next_wakeup());
    for (const SendCommand& c : poll()) reply(c, http(503));
  }
  ASSERT_NE(last_put(id), nullptr);
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kDead);
  EXPECT_EQ(last_put(id)->attempts, 5 + 3);
  EXPECT_EQ(s->stats().endpoints_disabled, 1u);
}

// A delivery found in flight more than max_lease_expiries times (it may be what crashes the
// process) ends `unknown` with lease_expired instead of being sent again; nothing is disabled
// and the endpoint's other deliveries go on.
TEST_F(SchedulerTest, ADeliveryInFlightAtTooManyCrashesEndsUnknownWithoutDisabling) {
  opts.max_lease_expiries = 2;
  make();
  const Endpoint e = add_ep("acme", "smengo-ms");
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const DeliveryId id = out[0].delivery;
  Delivery d = *last_put(id);
  for (int crash = 1; crash <= 3; ++crash) {
    expire_lease(d, d.attempts, now);
    make();
    ASSERT_TRUE(s->restore_endpoint(e).ok());
    s->restore_delivery(d, now);
    m.clear();
    out = poll();
    if (crash < 3) {
      ASSERT_EQ(out.size(), 1u) << "crash " << crash;
      d = *last_put(id);
      continue;
    }
    EXPECT_TRUE(out.empty());
    ASSERT_NE(last_put(id), nullptr);
    EXPECT_EQ(last_put(id)->status, DeliveryStatus::kUnknown);
    EXPECT_EQ(last_put(id)->last_code, ErrorCode::of(K::kLeaseExpired));
  }
  EXPECT_EQ(s->stats().endpoints_disabled, 0u);
  submit("acme");
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].delivery, id);
}

// SPEC R12.1, R12.10: a 502 leaves the delivery retrying with its latest outcome UNKNOWN
// (persisted, the API shows it); a later 200 settles it.
TEST_F(SchedulerTest, AnUnknownOutcomeIsKeptWhileRetryingAndClearedByAnAnswer) {
  add_ep("acme", "xhub");
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const DeliveryId id = out[0].delivery;
  m.clear();
  reply(out[0], http(502));
  ASSERT_NE(last_put(id), nullptr);
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kPending);
  EXPECT_TRUE(last_put(id)->last_unknown());
  now = now + seconds(1);
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  m.clear();
  reply(out[0], http(503));  // a definitive answer: no longer UNKNOWN
  EXPECT_FALSE(last_put(id)->last_unknown());
  now = now + seconds(2);
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  m.clear();
  reply(out[0], http(200));
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kDelivered);
  EXPECT_FALSE(last_put(id)->last_unknown());
  EXPECT_EQ(s->stats().unknown, 0u);
}

// SPEC R12.10: a ceiling that ends a delivery whose latest outcome was UNKNOWN ends it unknown;
// one whose latest outcome was a definitive failure, failed.
TEST_F(SchedulerTest, ACeilingPassedAfterAnUnknownOutcomeEndsUnknown) {
  Endpoint e = add_ep("acme", "xhub");
  Delivery unknown;
  unknown.id = make_id(partition_of("acme"), 1);
  unknown.endpoint = e.id;
  unknown.created_at = now - days(31);  // past the 30-day absolute ceiling (R3.3)
  unknown.next_attempt_at = now;
  unknown.attempts = unknown.fast_attempts = 2;
  unknown.last_code = ErrorCode::of(K::kTimeout);
  unknown.flags = Delivery::kFlagLastUnknown;
  Delivery failed = unknown;
  failed.id = make_id(partition_of("acme"), 2);
  failed.last_code = ErrorCode::http(503);
  failed.flags = 0;
  s->restore_delivery(unknown, now);
  s->restore_delivery(failed, now);
  m.clear();
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(last_put(unknown.id)->status, DeliveryStatus::kUnknown);
  EXPECT_EQ(last_put(unknown.id)->last_code, ErrorCode::of(K::kDeadlineExceeded));
  EXPECT_EQ(last_put(failed.id)->status, DeliveryStatus::kFailed);
  EXPECT_EQ(s->stats().unknown, 1u);
  EXPECT_EQ(s->stats().failed, 1u);
}

// A single-shot test delivery (R9.3) answered 502 ends unknown, not failed.
TEST_F(SchedulerTest, ATestDeliveryWithAnUnknownOutcomeEndsUnknown) {
  Endpoint e = add_ep("acme", "smengo");
  auto id = s->add_test_delivery(e.id, event("acme", "ringcast.test"), now, ids, m);
  ASSERT_TRUE(id.ok());
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  m.clear();
  reply(out[0], http(502));
  EXPECT_EQ(last_put(*id)->status, DeliveryStatus::kUnknown);
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kEnabled);
}

// SPEC R12.11 reconciliation: after an UNKNOWN outcome a reconciling endpoint's delivery sends a
// status check (no lease written, no attempt spent) after the schedule's first pause; 404 →
// a real resend at once; 2xx (not 202) → delivered with no second send.
TEST_F(SchedulerTest, ReconcileAsksBeforeResending) {
  Endpoint e = reconciling_ep({seconds(5), seconds(10)}, minutes(1),
                              "https://r.example/status/{webhook_id}");
  ASSERT_FALSE(HasFailure());
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const DeliveryId id = out[0].delivery;
  m.clear();
  reply(out[0], http(502));  // UNKNOWN
  EXPECT_EQ(last_put(id)->next_attempt_at, now + seconds(5));
  now = now + seconds(5);
  m.clear();
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].check);
  EXPECT_EQ(out[0].attempt, 1);
  EXPECT_EQ(last_put(id), nullptr) << "a check writes no lease";
  reply(out[0], http(202));  // still processing: asked again after the next pause
  ASSERT_EQ(m.attempts.size(), 1u);
  EXPECT_TRUE(is_check_record(m.attempts[0].number));
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kPending);
  EXPECT_EQ(last_put(id)->next_attempt_at, now + seconds(10));
  now = now + seconds(10);
  m.clear();
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].check);
  reply(out[0], http(404));  // never got it: resent now, as attempt 2
  m.clear();
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].check);
  EXPECT_EQ(out[0].attempt, 2);
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kInFlight);
  reply(out[0], http(502));  // UNKNOWN again
  now = now + seconds(5);
  m.clear();
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].check);
  reply(out[0], http(200));  // the receiver has it
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kDelivered);
  EXPECT_EQ(last_put(id)->attempts, 2);
  EXPECT_EQ(s->stats().checks, 3u);
  EXPECT_EQ(s->stats().checks_confirmed, 1u);
  EXPECT_EQ(s->stats().checks_not_received, 1u);
  EXPECT_EQ(s->stats().checks_pending, 1u);
  EXPECT_EQ(s->stats().live, 0u);
}

// Unanswered until the deadline: unknown (reconcile_expired), and never resent.
TEST_F(SchedulerTest, ReconcileEndsUnknownAtTheDeadline) {
  Endpoint e =
      reconciling_ep({seconds(5), seconds(20)}, seconds(30), "https://r.example/s/{webhook_id}");
  ASSERT_FALSE(HasFailure());
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const DeliveryId id = out[0].delivery;
  reply(out[0], net_timeout());
  int checks = 0;
  for (int i = 0; i < 10 && s->live() > 0; ++i) {
    ASSERT_TRUE(s->next_wakeup().has_value());
    now = std::max(now, *s->next_wakeup());
    out = poll();
    for (const SendCommand& c : out) {
      EXPECT_TRUE(c.check) << "resent blindly";
      ++checks;
      reply(c, http(503));
    }
  }
  EXPECT_EQ(checks, 3);  // at 5 s, 25 s, and the deadline (30 s)
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kUnknown);
  EXPECT_EQ(last_put(id)->last_code, ErrorCode::of(K::kReconcileExpired));
  EXPECT_EQ(last_put(id)->attempts, 1);
}

// on_unknown = review: never resent after an UNKNOWN.
TEST_F(SchedulerTest, ReviewEndsUnknownAtOnce) {
  Endpoint e = add_ep("acme", "xhub");
  Endpoint cfg = *s->find_endpoint(e.id);
  cfg.on_unknown = OnUnknown::kReview;
  ASSERT_TRUE(s->update_endpoint(cfg, now, m).ok());
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  m.clear();
  reply(out[0], http(502));
  EXPECT_EQ(last_put(out[0].delivery)->status, DeliveryStatus::kUnknown);
  EXPECT_EQ(last_put(out[0].delivery)->last_code, ErrorCode::http(502));
  EXPECT_EQ(s->stats().review_ended, 1u);
  EXPECT_EQ(s->live(), 0u);
}

// ---- on_result()'s report: what the shard's metrics take instead of scanning the Mutations ----

TEST_F(SchedulerTest, TheReportOfASuccessSaysDelivered) {
  add_ep("acme", "xhub");
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const ResultReport rep = s->on_result(out[0], http(200), now, now, m);
  EXPECT_EQ(rep.outcome, Outcome::kSuccess);
  EXPECT_EQ(rep.ended_as, DeliveryStatus::kDelivered);
  EXPECT_FALSE(rep.endpoint_disabled);
  EXPECT_FALSE(rep.reconcile_expired);
  // The same command again is stale: nothing happened.
  const ResultReport stale = s->on_result(out[0], http(200), now, now, m);
  EXPECT_FALSE(stale.outcome.has_value());
  EXPECT_FALSE(stale.ended_as.has_value());
  EXPECT_FALSE(stale.endpoint_disabled);
}

TEST_F(SchedulerTest, TheReportOfARetryableFailureEndsNothing) {
  add_ep("acme", "xhub");  // 429: the fast ladder, no breaker (R4.5)
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const ResultReport rep = s->on_result(out[0], http(429), now, now, m);
  EXPECT_EQ(rep.outcome, Outcome::kRetryable);
  EXPECT_FALSE(rep.ended_as.has_value());
  EXPECT_FALSE(rep.endpoint_disabled);
  EXPECT_FALSE(rep.reconcile_expired);
  EXPECT_EQ(last_put(out[0].delivery)->status, DeliveryStatus::kPending);
  // A send the transport gave back unsent is no attempt (R2.3): no outcome either.
  now += seconds(1);
  out = poll();
  ASSERT_EQ(out.size(), 1u);
  TransportResult unsent;
  unsent.deferred = DeferReason::kConnections;
  unsent.not_before = now + seconds(1);
  const ResultReport deferred = s->on_result(out[0], unsent, now, now, m);
  EXPECT_FALSE(deferred.outcome.has_value());
  EXPECT_FALSE(deferred.ended_as.has_value());
}

TEST_F(SchedulerTest, TheReportSaysWhenAResultDisablesTheEndpoint) {
  Endpoint e = add_ep("acme", "smengo", {}, 2);
  for (int i = 0; i < 3; ++i) submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 2u);
  const ResultReport gone = s->on_result(out[0], http(410), now, now, m);  // SPEC R6, R8
  EXPECT_EQ(gone.outcome, Outcome::kRejected);
  EXPECT_EQ(gone.ended_as, DeliveryStatus::kDead);
  EXPECT_TRUE(gone.endpoint_disabled);
  EXPECT_FALSE(gone.reconcile_expired);
  ASSERT_EQ(s->find_endpoint(e.id)->state, EndpointState::kDisabled);
  // The one still in flight ends dead when it returns; the endpoint was disabled before.
  const ResultReport after = s->on_result(out[1], http(500), now, now, m);
  EXPECT_EQ(after.outcome, Outcome::kRetryable);
  EXPECT_EQ(after.ended_as, DeliveryStatus::kDead);
  EXPECT_FALSE(after.endpoint_disabled);
}

TEST_F(SchedulerTest, TheReportSaysWhenAReconcileExpires) {
  Endpoint e =
      reconciling_ep({seconds(5), seconds(20)}, seconds(30), "https://r.example/s/{webhook_id}");
  ASSERT_FALSE(HasFailure());
  submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  const ResultReport first = s->on_result(out[0], net_timeout(), now, now, m);
  EXPECT_EQ(first.outcome, Outcome::kUnknown);
  EXPECT_FALSE(first.ended_as.has_value());  // reconciled, not ended
  std::vector<ResultReport> checks;
  for (int i = 0; i < 10 && s->live() > 0; ++i) {
    ASSERT_TRUE(s->next_wakeup().has_value());
    now = std::max(now, *s->next_wakeup());
    for (const SendCommand& c : poll()) {
      ASSERT_TRUE(c.check);
      checks.push_back(s->on_result(c, http(503), now, now, m));
    }
  }
  ASSERT_EQ(checks.size(), 3u);  // at 5 s, 25 s, and the deadline (30 s)
  for (size_t i = 0; i < checks.size(); ++i) {
    const bool last = i + 1 == checks.size();
    EXPECT_FALSE(checks[i].outcome.has_value()) << i;  // a status check is no attempt
    EXPECT_EQ(checks[i].reconcile_expired, last) << i;
    EXPECT_EQ(checks[i].ended_as.has_value(), last) << i;
    EXPECT_FALSE(checks[i].endpoint_disabled) << i;
  }
  EXPECT_EQ(checks.back().ended_as, DeliveryStatus::kUnknown);
}

// Resend (operations.md "Delivery log"): a resend reopens an ended delivery — same id and event,
// the attempt count goes on (the receiver sees attempt N+1), a fresh budget and ceilings from now —
// written as a rewrite; a pending one, a test delivery and a disabled endpoint's are refused.
TEST_F(SchedulerTest, AResendReopensAnEndedDeliveryWithAFreshBudget) {
  Endpoint e = add_ep("acme", "xhub");
  Delivery ended;
  ended.id = make_id(partition_of("acme"), 1);
  ended.event = make_id(partition_of("acme"), 2);
  ended.endpoint = e.id;
  ended.created_at = now - days(31);
  ended.first_slow_at = now - days(30);
  ended.attempts = 10;
  ended.fast_attempts = 4;
  ended.slow_attempts = 6;
  ended.status = DeliveryStatus::kUnknown;
  ended.flags = Delivery::kFlagLastUnknown | Delivery::kFlagSlowLadder | Delivery::kFlagMoney;
  m.clear();
  auto r = s->reopen_delivery(ended, now, m);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(m.deliveries.empty());
  EXPECT_TRUE(m.deliveries[0].rewrite);
  EXPECT_FALSE(m.deliveries[0].is_new);
  const Delivery& put = m.deliveries[0].delivery;
  EXPECT_EQ(put.id, ended.id);
  EXPECT_EQ(put.status, DeliveryStatus::kPending);
  EXPECT_EQ(put.attempts, 10);
  EXPECT_EQ(put.fast_attempts, 0);
  EXPECT_EQ(put.slow_attempts, 0);
  EXPECT_EQ(put.created_at, now);
  EXPECT_FALSE(put.last_unknown());
  EXPECT_EQ(put.ladder(), Ladder::kFast);
  EXPECT_TRUE(put.money());
  EXPECT_EQ(s->stats().live, 1u);
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].delivery, ended.id);
  EXPECT_EQ(out[0].attempt, 11);
  m.clear();
  reply(out[0], http(200));
  EXPECT_EQ(last_put(ended.id)->status, DeliveryStatus::kDelivered);

  Delivery pending = ended;
  pending.status = DeliveryStatus::kPending;
  auto busy = s->reopen_delivery(pending, now, m);
  ASSERT_FALSE(busy.ok());
  EXPECT_STREQ(busy.error().reason, "delivery_pending");
  Delivery test = ended;
  test.flags = Delivery::kFlagTest;
  auto t = s->reopen_delivery(test, now, m);
  ASSERT_FALSE(t.ok());
  EXPECT_STREQ(t.error().reason, "test_delivery");
  Endpoint off = e;
  off.id = make_id(partition_of("acme"), 99);
  off.state = EndpointState::kDisabled;
  ASSERT_TRUE(s->restore_endpoint(off).ok());
  Delivery of_off = ended;
  of_off.endpoint = off.id;
  auto dis = s->reopen_delivery(of_off, now, m);
  ASSERT_FALSE(dis.ok());
  EXPECT_STREQ(dis.error().reason, "endpoint_disabled");
  Delivery orphan = ended;
  orphan.endpoint = make_id(partition_of("acme"), 1234);
  auto gone = s->reopen_delivery(orphan, now, m);
  ASSERT_FALSE(gone.ok());
  EXPECT_STREQ(gone.error().reason, "unknown_endpoint");
}

// Replay missing: only the matching endpoints without a delivery of the event get one; the
// event is not written again.
TEST_F(SchedulerTest, FanOutMissingSkipsTheEndpointsThatHaveOne) {
  Endpoint a = add_ep("acme", "xhub");
  Endpoint b = add_ep("acme", "xhub");
  Endpoint c = add_ep("acme", "xhub");
  Event ev = event("acme", "payment.captured");
  m.clear();
  std::vector<EndpointId> have = {a.id, c.id};
  std::sort(have.begin(), have.end());
  std::vector<EndpointId> created;
  EXPECT_EQ(s->fan_out_missing(ev, have, now, ids, m, &created), 1u);
  EXPECT_EQ(created, (std::vector<EndpointId>{b.id}));
  EXPECT_TRUE(m.events.empty());
  ASSERT_EQ(m.deliveries.size(), 1u);
  EXPECT_TRUE(m.deliveries[0].is_new);
  EXPECT_EQ(m.deliveries[0].delivery.endpoint, b.id);
}

TEST_F(SchedulerTest, RecoveredDeliveryOfDisabledEndpointIsDead) {
  Endpoint e;
  e.id = make_id(partition_of("acme"), 5);
  e.tenant = "acme";
  e.policy = "smengo";
  e.state = EndpointState::kDisabled;
  e.disabled_reason = ErrorCode::of(K::kGone);
  ASSERT_TRUE(s->restore_endpoint(e).ok());
  Delivery d;
  d.id = make_id(partition_of("acme"), 6);
  d.endpoint = e.id;
  d.created_at = now;
  d.next_attempt_at = now;
  s->restore_delivery(d, now);
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(last_put(d.id)->status, DeliveryStatus::kDead);
  EXPECT_EQ(last_put(d.id)->last_code, ErrorCode::of(K::kEndpointDisabled));
}

TEST_F(SchedulerTest, DeleteEndpointKillsQueuedAndEndsInFlight) {
  Endpoint e = add_ep("acme", "smengo", {}, 1);
  for (int i = 0; i < 4; ++i) submit("acme");
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  m.clear();
  ASSERT_TRUE(s->delete_endpoint(e.id, now, m).ok());
  EXPECT_EQ(m.endpoint_deletes, std::vector<EndpointId>{e.id});
  EXPECT_EQ(count_status(DeliveryStatus::kDead, ErrorCode::of(K::kEndpointDeleted)), 3u);
  EXPECT_EQ(s->find_endpoint(e.id), nullptr);
  EXPECT_TRUE(s->endpoints_of("acme").empty());
  reply(out[0], http(500));
  EXPECT_EQ(last_put(out[0].delivery)->status, DeliveryStatus::kDead);
  EXPECT_EQ(s->stats().live, 0u);
  EXPECT_EQ(s->delete_endpoint(e.id, now, m).error().code, Errc::kNotFound);
  EXPECT_TRUE(poll().empty());
}

TEST_F(SchedulerTest, EndpointValidationAndUpdate) {
  Endpoint e;
  e.id = 42;
  e.tenant = "acme";
  e.policy = "nope";
  Result<Endpoint> r = s->create_endpoint(e, now, m);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "unknown_policy");
  e.policy = "xhub";
  e.event_types = {"pay*"};
  r = s->create_endpoint(e, now, m);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().field, "event_types");
  e.event_types = {"payment.*"};
  ASSERT_TRUE(s->create_endpoint(e, now, m).ok());
  EXPECT_EQ(s->create_endpoint(e, now, m).error().code, Errc::kConflict);
  // Update keeps state; a policy change applies.
  ASSERT_TRUE(s->endpoint_action(42, EndpointAction::kPause, now, m).ok());
  Endpoint u = *s->find_endpoint(42);
  u.policy = "smengo";
  u.event_types = {};
  u.state = EndpointState::kEnabled;  // ignored: state moves only by actions
  Result<Endpoint> up = s->update_endpoint(u, now + seconds(1), m);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->state, EndpointState::kPaused);
  EXPECT_EQ(up->policy, "smengo");
  EXPECT_EQ(up->updated_at, now + seconds(1));
  u.tenant = "other";
  EXPECT_FALSE(s->update_endpoint(u, now, m).ok());
  EXPECT_EQ(s->endpoint_action(43, EndpointAction::kPause, now, m).error().code, Errc::kNotFound);
}

TEST_F(SchedulerTest, RateLimitPacesSends) {
  Endpoint e;
  e.id = 9;
  e.tenant = "acme";
  e.policy = "xhub";
  e.rate_limit = {10.0, 2};
  e.max_in_flight = 100;
  ASSERT_TRUE(s->create_endpoint(e, now, m).ok());
  for (int i = 0; i < 6; ++i) submit("acme");
  EXPECT_EQ(poll().size(), 2u);  // the burst
  EXPECT_TRUE(poll().empty());
  ASSERT_TRUE(s->next_wakeup().has_value());
  EXPECT_EQ(*s->next_wakeup(), now + milliseconds(100));
  now += milliseconds(100);
  EXPECT_EQ(poll().size(), 1u);
  now += milliseconds(300);
  EXPECT_EQ(poll().size(), 2u);  // refilled up to the burst
}

TEST_F(SchedulerTest, LiftingTheRateLimitReleasesTheQueueAtOnce) {
  Endpoint e;
  e.id = 9;
  e.tenant = "acme";
  e.policy = "xhub";
  e.rate_limit = {1.0, 1};
  e.max_in_flight = 100;
  ASSERT_TRUE(s->create_endpoint(e, now, m).ok());
  for (int i = 0; i < 5; ++i) submit("acme");
  EXPECT_EQ(poll().size(), 1u);  // the burst; the next token is 1 s away
  EXPECT_TRUE(poll().empty());
  Endpoint patched = *s->find_endpoint(9);
  patched.rate_limit = {};
  ASSERT_TRUE(s->update_endpoint(patched, now, m).ok());
  // No waiting for the old limit's timer: the rest goes out in the same millisecond.
  EXPECT_EQ(poll().size(), 4u);
}

TEST_F(SchedulerTest, DeterministicForASeed) {
  auto run = [&](uint64_t seed) {
    PolicyRegistry r;
    Scheduler sc(SchedulerOptions{}, r, seed, kT0);
    SeqIds i;
    Mutations mm;
    Endpoint e;
    e.id = 1;
    e.tenant = "t";
    e.policy = "smengo";
    (void)sc.create_endpoint(e, kT0, mm);
    for (int k = 0; k < 20; ++k) {
      Event ev;
      ev.seq = static_cast<uint64_t>(k + 1);
      ev.tenant = "t";
      ev.type = std::string("x");
      sc.fan_out(ev, kT0, i, mm);
    }
    std::vector<SendCommand> out;
    sc.poll(kT0, out, mm);
    for (const SendCommand& c : out) sc.on_result(c, http(500), kT0, kT0, mm);
    std::vector<int64_t> times;
    for (const DeliveryPut& p : mm.deliveries) times.push_back(p.delivery.next_attempt_at.ms());
    return times;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));  // smengo jitter differs by seed
}

TEST_F(SchedulerTest, NextWakeupAndStats) {
  EXPECT_FALSE(s->next_wakeup().has_value());
  add_ep("acme", "xhub");
  submit("acme");
  EXPECT_EQ(s->next_wakeup(), now);  // ready work
  std::vector<SendCommand> out = poll();
  EXPECT_FALSE(s->next_wakeup().has_value());  // only in flight
  reply(out[0], http(500));
  ASSERT_TRUE(s->next_wakeup().has_value());
  EXPECT_LE(*s->next_wakeup(), now + seconds(1));  // a lower bound
  EXPECT_GT(*s->next_wakeup(), now);
  SchedulerStats st = s->stats();
  EXPECT_EQ(st.live, 1u);
  EXPECT_EQ(st.in_wheel, 1u);
  EXPECT_EQ(st.endpoints, 1u);
  EXPECT_EQ(st.tenants, 1u);
  EXPECT_LE(st.pending_bytes, 104u);
  EXPECT_EQ(st.outcome[static_cast<int>(Outcome::kRetryable)], 1u);
}

// ---- SPEC R2.3: ringcast's own back-pressure is never the receiver's failure --------------------

TransportResult deferred(DeferReason why, WallTime not_before) {
  TransportResult r;
  r.deferred = why;
  r.not_before = not_before;
  return r;
}

TEST_F(SchedulerTest, ADeferredSendSpendsNoAttemptAndRecordsNothing) {
  Endpoint e = add_ep("acme", "xhub");
  ASSERT_EQ(submit("acme"), 1u);
  auto cmds = poll();
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].attempt, 1);
  const DeliveryId id = cmds[0].delivery;
  m.clear();
  // Deferred ten times in a row (more than the xhub budget of 10): never an attempt.
  for (int i = 0; i < 12; ++i) {
    reply(cmds[0], deferred(DeferReason::kConnections, now + seconds(1)));
    EXPECT_TRUE(m.attempts.empty());   // no attempt record at all
    const Delivery* d = last_put(id);  // the lease, released
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->status, DeliveryStatus::kPending);
    EXPECT_EQ(d->attempts, 0);
    EXPECT_EQ(d->fast_attempts, 0);
    EXPECT_TRUE(d->deferred());
    EXPECT_EQ(d->next_attempt_at, now + seconds(1));  // visible: when it will go
    EXPECT_EQ(s->stats().deferred_waiting, 1u);
    EXPECT_TRUE(poll().empty());  // not before not_before
    now = now + seconds(1);
    cmds = poll();
    ASSERT_EQ(cmds.size(), 1u) << i;
    EXPECT_EQ(cmds[0].attempt, 1);  // still the first attempt the receiver sees (R5.4)
    EXPECT_EQ(s->stats().deferred_waiting, 0u);
    m.clear();
  }
  const SchedulerStats st = s->stats();
  EXPECT_EQ(st.deferred, 12u);
  EXPECT_EQ(st.results, 0u);
  EXPECT_EQ(st.outcome[static_cast<int>(Outcome::kRetryable)], 0u);
  BreakerView b = s->breaker_view("acme", now);
  EXPECT_EQ(b.window_total, 0u);  // no breaker sample (R4.5)
  EXPECT_EQ(b.snapshot.state, BreakerSnapshot::State::kClosed);
  reply(cmds[0], http(200));
  EXPECT_EQ(last_put(id)->status, DeliveryStatus::kDelivered);
  EXPECT_EQ(last_put(id)->attempts, 1);
  ASSERT_EQ(m.attempts.size(), 1u);
  EXPECT_EQ(m.attempts[0].number, 1);
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kEnabled);
}

// A send that came back queue_full (its host's queue, shared by every endpoint on that host,
// was full) holds that endpoint's new sends until its come-back time: it does not send more into
// the full queue only to have them come back too (a lease written and released each). Other
// endpoints go on; the endpoint resumes by itself; no attempt is spent.
TEST_F(SchedulerTest, AQueueFullDeferralHoldsOnlyThatEndpointsNewSendsUntilItsComeBack) {
  Endpoint a = add_ep("acme", "xhub");
  Endpoint b = add_ep("bolt", "xhub");
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(submit("acme"), 1u);
    ASSERT_EQ(submit("bolt"), 1u);
  }
  auto first = poll();
  ASSERT_EQ(first.size(), 8u);
  // acme's first send comes back queue_full, 300 ms out; its other three are still out.
  const SendCommand* bounced = nullptr;
  for (const SendCommand& c : first) {
    if (c.endpoint == a.id && bounced == nullptr) bounced = &c;
  }
  ASSERT_NE(bounced, nullptr);
  reply(*bounced, deferred(DeferReason::kQueueFull, now + milliseconds(300)));
  EXPECT_TRUE(m.attempts.empty());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(submit("acme"), 1u);
    ASSERT_EQ(submit("bolt"), 1u);
  }
  now = now + milliseconds(100);
  auto during = poll();
  for (const SendCommand& c : during) EXPECT_NE(c.endpoint, a.id) << "acme sent into a full queue";
  EXPECT_EQ(during.size(), 3u);   // bolt's three new ones
  now = now + milliseconds(200);  // the come-back time: the bounced one and the new ones go
  auto after = poll();
  size_t acme = 0;
  bool again = false;
  for (const SendCommand& c : after) {
    if (c.endpoint != a.id) continue;
    ++acme;
    if (c.delivery == bounced->delivery) {
      again = true;
      EXPECT_EQ(c.attempt, 1);  // the bounce was not an attempt
    }
  }
  EXPECT_TRUE(again);
  EXPECT_EQ(acme, 4u);
  // A connection or pacing deferral does not hold the endpoint (those are timed by their own).
  const SendCommand* other = nullptr;
  for (const SendCommand& c : during) other = &c;
  ASSERT_NE(other, nullptr);
  reply(*other, deferred(DeferReason::kConnections, now + seconds(5)));
  ASSERT_EQ(submit("bolt"), 1u);
  auto next = poll();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].endpoint, b.id);
}

TEST_F(SchedulerTest, DeferralsNeverAutoDisableAnEndpoint) {
  // smengo-ms: 3 attempts, then the endpoint is auto-disabled (R8.1). Deferrals are not
  // attempts, so they never get there.
  Endpoint e = add_ep("acme", "smengo-ms");
  for (int i = 0; i < 5; ++i) ASSERT_EQ(submit("acme"), 1u);
  for (int round = 0; round < 10; ++round) {
    auto cmds = poll();
    ASSERT_EQ(cmds.size(), 5u) << round;
    for (const SendCommand& c : cmds) reply(c, deferred(DeferReason::kPacing, now));
  }
  EXPECT_EQ(s->find_endpoint(e.id)->state, EndpointState::kEnabled);
  EXPECT_EQ(count_status(DeliveryStatus::kDead), 0u);
  EXPECT_EQ(count_status(DeliveryStatus::kFailed), 0u);
  EXPECT_TRUE(m.notifications.empty());
}

TEST_F(SchedulerTest, ADeferredProbeFreesTheProbeSlot) {
  opts.breaker.min_deliveries = 1;
  opts.breaker.first_pause = seconds(1);
  make();
  add_ep("acme", "xhub");
  ASSERT_EQ(submit("acme"), 1u);
  auto cmds = poll();
  reply(cmds[0], http(503));  // opens (1 delivery, 100 % failed)
  ASSERT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kOpen);
  now = now + seconds(2);
  cmds = poll();
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_TRUE(cmds[0].probe);
  reply(cmds[0], deferred(DeferReason::kConnections, now));
  // Still half-open; the probe was never sent, so another probe may go at once.
  EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kHalfOpen);
  cmds = poll();
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_TRUE(cmds[0].probe);
  EXPECT_EQ(cmds[0].attempt, 2);  // the deferral did not count
  reply(cmds[0], http(200));
  EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kClosed);
}

TEST_F(SchedulerTest, RetryAfterHoldsOnlyThatEndpoint) {
  // SPEC R7 per endpoint: a 429 Retry-After: 3600 from one endpoint holds its queue for the
  // hour (no attempt spent on the waiting ones); another tenant's endpoint keeps sending.
  Endpoint limited = add_ep("acme", "xhub", {}, 1);
  Endpoint other = add_ep("globex", "xhub", {}, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(submit("acme"), 1u);
    ASSERT_EQ(submit("globex"), 1u);
  }
  auto cmds = poll();
  ASSERT_EQ(cmds.size(), 2u);  // max_in_flight 1 each
  for (const SendCommand& c : cmds) {
    reply(c, c.endpoint == limited.id ? http(429, "3600") : http(200));
  }
  for (int i = 0; i < 2; ++i) {  // globex drains; acme sends nothing
    cmds = poll();
    ASSERT_EQ(cmds.size(), 1u);
    EXPECT_EQ(cmds[0].endpoint, other.id);
    reply(cmds[0], http(200));
  }
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(s->stats().held_by_retry_after, 2u);
  // The waiting ones are persisted with the hold's end: the API shows it, a restart keeps it.
  size_t parked = 0;
  for (const DeliveryPut& p : m.deliveries) {
    if (p.delivery.endpoint != limited.id || p.delivery.attempts != 0) continue;
    if (p.delivery.next_attempt_at == now + hours(1)) ++parked;
  }
  EXPECT_EQ(parked, 2u);
  now = now + minutes(59);
  EXPECT_TRUE(poll().empty());
  now = now + minutes(2);
  cmds = poll();
  ASSERT_EQ(cmds.size(), 1u);  // the hold is over: in FIFO order, first attempts
  EXPECT_EQ(cmds[0].endpoint, limited.id);
  EXPECT_EQ(cmds[0].attempt, 1);
}

TEST_F(SchedulerTest, OneFailingDeliveryAloneNeverOpensTheBreaker) {
  // SPEC R4.1 counts deliveries: one delivery retrying at +1, +2, +4, +8 s is one delivery in
  // the window, however many attempts it makes.
  add_ep("acme", "xhub");
  ASSERT_EQ(submit("acme"), 1u);
  for (int attempt = 1; attempt <= 10; ++attempt) {
    auto cmds = poll();
    if (cmds.empty()) {
      now = now + seconds(300);
      cmds = poll();
    }
    ASSERT_EQ(cmds.size(), 1u) << attempt;
    reply(cmds[0], http(503));
    const BreakerView b = s->breaker_view("acme", now);
    EXPECT_EQ(b.snapshot.state, BreakerSnapshot::State::kClosed) << attempt;
    EXPECT_LE(b.window_total, 1u);
    now = now + seconds(1u << std::min(attempt - 1, 8));
  }
}

TEST_F(SchedulerTest, FiveFailingDeliveriesOpenTheBreakerOnce) {
  add_ep("acme", "xhub");
  for (int i = 0; i < 4; ++i) ASSERT_EQ(submit("acme"), 1u);
  auto cmds = poll();
  ASSERT_EQ(cmds.size(), 4u);
  for (const SendCommand& c : cmds) reply(c, http(503));
  // Four deliveries retried again and again: still four in the window, still closed.
  for (int round = 0; round < 3; ++round) {
    now = now + seconds(300);
    cmds = poll();
    ASSERT_EQ(cmds.size(), 4u);
    for (const SendCommand& c : cmds) reply(c, http(503));
    EXPECT_EQ(s->breaker_view("acme", now).window_total, 4u);
    EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kClosed);
  }
  ASSERT_EQ(submit("acme"), 1u);  // the fifth delivery fails: 5 of 5 ≥ 80 %
  cmds = poll();
  ASSERT_EQ(cmds.size(), 1u);
  reply(cmds[0], http(503));
  EXPECT_EQ(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kOpen);
}

TEST_F(SchedulerTest, RestoringAnEndpointWhosePolicyIsGoneIsRefused) {
  Endpoint e;
  e.id = make_id(partition_of("acme"), 77);
  e.tenant = "acme";
  e.policy = "removed-from-config";
  Result<void> r = s->restore_endpoint(e);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, "unknown_policy");
  EXPECT_EQ(s->find_endpoint(e.id), nullptr);  // no silent fall-back to smengo
}

// ---- cluster mode: dropping a partition --------------------------------------------------------

// The last record of everything a scheduler wrote, as a store would keep it.
struct RecordStore {
  std::map<EndpointId, Endpoint> endpoints;
  std::map<std::string, Tenant> tenants;
  std::map<DeliveryId, Delivery> deliveries;
  void apply(const Mutations& m) {
    for (const Endpoint& e : m.endpoints) endpoints[e.id] = e;
    for (EndpointId id : m.endpoint_deletes) endpoints.erase(id);
    for (const Tenant& t : m.tenants) tenants[t.name] = t;
    for (const DeliveryPut& p : m.deliveries) deliveries[p.delivery.id] = p.delivery;
  }
  // What a new owner of partition p loads (recovery order: endpoints, tenants, deliveries).
  void restore(Scheduler& s, Partition p, WallTime now) const {
    for (const auto& [id, e] : endpoints) {
      if (partition_of(e.tenant) == p) {
        EXPECT_TRUE(s.restore_endpoint(e).ok());
      }
    }
    for (const auto& [name, t] : tenants) {
      if (partition_of(name) == p) s.restore_tenant(t);
    }
    for (const auto& [id, d] : deliveries) {
      if (id_partition(id) == p) s.restore_delivery(d, now);
    }
  }
};

// Whether any record in `m` belongs to partition p.
bool mentions(const Mutations& m, Partition p) {
  for (const DeliveryPut& d : m.deliveries) {
    if (id_partition(d.delivery.id) == p || id_partition(d.delivery.endpoint) == p) return true;
  }
  for (const Attempt& a : m.attempts) {
    if (id_partition(a.delivery) == p) return true;
  }
  for (const Endpoint& e : m.endpoints) {
    if (partition_of(e.tenant) == p) return true;
  }
  for (EndpointId id : m.endpoint_deletes) {
    if (id_partition(id) == p) return true;
  }
  for (const Tenant& t : m.tenants) {
    if (partition_of(t.name) == p) return true;
  }
  for (const Notification& n : m.notifications) {
    if (partition_of(n.tenant) == p) return true;
  }
  return false;
}

// Many partitions in one pass (a SIGTERM hands them all over in one turn): the same as dropping
// each, and a partition not in the set keeps everything.
TEST_F(SchedulerTest, DropPartitionsForgetsEveryPartitionInTheSetAndOnlyThose) {
  const Partition pa = partition_of("acme"), pg = partition_of("globex"),
                  pi = partition_of("initech");
  ASSERT_TRUE(pa != pg && pg != pi && pa != pi);
  Endpoint a = add_ep("acme", "xhub");
  Endpoint g = add_ep("globex", "xhub");
  Endpoint i = add_ep("initech", "xhub");
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(submit("acme"), 1u);
    ASSERT_EQ(submit("globex"), 1u);
    ASSERT_EQ(submit("initech"), 1u);
  }
  ASSERT_EQ(s->stats().live, 9u);
  PartitionSet ps;
  ps.set(pa);
  ps.set(pi);
  EXPECT_EQ(s->drop_partitions(ps), 6u);
  SchedulerStats st = s->stats();
  EXPECT_EQ(st.live, 3u);
  EXPECT_EQ(st.endpoints, 1u);
  EXPECT_EQ(st.tenants, 1u);
  EXPECT_EQ(s->find_endpoint(a.id), nullptr);
  EXPECT_EQ(s->find_endpoint(i.id), nullptr);
  ASSERT_NE(s->find_endpoint(g.id), nullptr);
  std::vector<SendCommand> out = poll();
  EXPECT_EQ(out.size(), 3u);
  for (const SendCommand& c : out) EXPECT_EQ(c.endpoint, g.id);
  EXPECT_EQ(s->drop_partitions(ps), 0u);  // nothing left of them
}

TEST_F(SchedulerTest, DropPartitionForgetsOnlyThatPartition) {
  const Partition pa = partition_of("acme"), pg = partition_of("globex");
  ASSERT_NE(pa, pg);
  Endpoint a1 = add_ep("acme", "xhub", {}, 1);
  Endpoint a2 = add_ep("acme", "xhub");
  Endpoint g = add_ep("globex", "xhub", {}, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(submit("acme"), 2u);
    ASSERT_EQ(submit("globex"), 1u);
  }
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 5u);  // a1 1, a2 3, g 1
  int a2_seen = 0;
  for (const SendCommand& c : out) {
    if (c.endpoint == a1.id) {
      reply(c, http(429, "60"));  // a1's queue held 60 s: its 2 others parked in the wheel
    } else if (c.endpoint == a2.id) {
      const int k = a2_seen++;
      if (k == 0) reply(c, deferred(DeferReason::kConnections, now + seconds(2)));
      if (k == 1) reply(c, http(503));  // a retry in the wheel
      if (k == 2) reply(c, http(200));
    } else {
      reply(c, http(503));  // globex: a retry at +1 s, 2 queued behind it
    }
  }
  ASSERT_TRUE(s->add_test_delivery(a2.id, event("acme"), now, ids, m).ok());
  SchedulerStats st = s->stats();
  ASSERT_EQ(st.live, 9u);  // acme: a1 3, a2 2 + the test; globex 3
  ASSERT_EQ(st.held_by_retry_after, 2u);
  ASSERT_EQ(st.deferred_waiting, 1u);
  ASSERT_EQ(st.in_flight, 0u);
  ASSERT_EQ(st.endpoints, 3u);
  ASSERT_EQ(st.tenants, 2u);

  EXPECT_EQ(s->drop_partition(pa), 6u);
  st = s->stats();
  EXPECT_EQ(st.live, 3u);
  EXPECT_EQ(st.in_wheel, 1u);  // globex's retry
  EXPECT_EQ(st.ready, 2u);     // globex's queue
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(st.orphaned, 0u);
  EXPECT_EQ(st.held_by_retry_after, 0u);
  EXPECT_EQ(st.deferred_waiting, 0u);
  EXPECT_EQ(st.endpoints, 1u);
  EXPECT_EQ(st.tenants, 1u);
  EXPECT_EQ(s->find_endpoint(a1.id), nullptr);
  EXPECT_EQ(s->find_endpoint(a2.id), nullptr);
  EXPECT_TRUE(s->endpoints_of("acme").empty());
  EXPECT_NE(s->find_endpoint(g.id), nullptr);
  EXPECT_EQ(s->in_flight(pa), 0u);
  EXPECT_EQ(s->drop_partition(pa), 0u);  // nothing left of it

  // Past every due time of both partitions (acme's hold ends at +60 s): only globex sends.
  m.clear();
  std::vector<SendCommand> sent;
  for (int i = 0; i < 120; ++i) {
    for (const SendCommand& c : poll()) {
      sent.push_back(c);
      reply(c, http(200));
    }
    if (i == 10) {  // globex is done: nothing of acme is left to wake up for
      EXPECT_EQ(s->live(), 0u);
      EXPECT_FALSE(s->next_wakeup().has_value());
    }
    now += seconds(1);
  }
  ASSERT_EQ(sent.size(), 3u);  // globex: its queue, then its retry
  for (const SendCommand& c : sent) EXPECT_EQ(c.endpoint, g.id);
  EXPECT_EQ(count_status(DeliveryStatus::kDelivered), 3u);
  EXPECT_FALSE(mentions(m, pa));
  EXPECT_TRUE(mentions(m, pg));
  EXPECT_EQ(s->stats().live, 0u);
}

TEST_F(SchedulerTest, DropPartitionWithDeliveriesInFlightIgnoresTheirResults) {
  const Partition pa = partition_of("acme"), pg = partition_of("globex");
  ASSERT_NE(pa, pg);
  Endpoint a1 = add_ep("acme", "xhub", {}, 1);
  Endpoint a2 = add_ep("acme", "xhub", {}, 1);
  Endpoint g = add_ep("globex", "xhub", {}, 1);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(submit("acme"), 2u);
    ASSERT_EQ(submit("globex"), 1u);
  }
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 3u);  // one per endpoint
  std::map<EndpointId, SendCommand> cmd;
  for (const SendCommand& c : out) cmd[c.endpoint] = c;
  ASSERT_EQ(cmd.size(), 3u);
  EXPECT_EQ(s->in_flight(pa), 2u);
  EXPECT_EQ(s->in_flight(pg), 1u);

  EXPECT_EQ(s->drop_partition(pa), 2u);  // the queued ones; the leased ones stay out
  EXPECT_EQ(s->in_flight(pa), 0u);
  EXPECT_EQ(s->in_flight(pg), 1u);
  SchedulerStats st = s->stats();
  EXPECT_EQ(st.live, 2u);  // globex: 1 in flight, 1 queued
  EXPECT_EQ(st.in_flight, 1u);
  EXPECT_EQ(st.ready, 1u);
  EXPECT_EQ(st.orphaned, 2u);
  EXPECT_FALSE(s->find_live_delivery(cmd[a1.id].delivery).has_value());
  EXPECT_EQ(s->drop_partition(pa), 0u);  // again: the leased ones are not counted out twice
  EXPECT_EQ(s->stats().live, 2u);
  EXPECT_EQ(s->stats().in_flight, 1u);
  EXPECT_EQ(s->stats().orphaned, 2u);
  st = s->stats();

  // Their results: no crash, nothing written, nothing fed to anything.
  const uint64_t stale = st.stale_results, results = st.results;
  m.clear();
  reply(cmd[a1.id], http(503));
  reply(cmd[a2.id], deferred(DeferReason::kConnections, now + seconds(1)));
  EXPECT_TRUE(m.empty());
  st = s->stats();
  EXPECT_EQ(st.orphaned, 0u);
  EXPECT_EQ(st.live, 2u);
  EXPECT_EQ(st.in_flight, 1u);
  EXPECT_EQ(st.results, results);
  EXPECT_EQ(st.stale_results, stale + 2);
  EXPECT_EQ(s->breaker_view("acme", now).window_total, 0u);
  EXPECT_EQ(s->find_endpoint(a1.id), nullptr);
  reply(cmd[a1.id], http(200));  // again: stale
  EXPECT_TRUE(m.empty());

  // Globex goes on; its next lease may reuse a freed in-flight index: the old command stays stale.
  reply(cmd[g.id], http(200));
  std::vector<SendCommand> next = poll();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].endpoint, g.id);
  EXPECT_EQ(s->in_flight(pg), 1u);
  reply(cmd[a1.id], http(200));
  reply(cmd[a2.id], http(200));
  EXPECT_EQ(s->stats().in_flight, 1u);
  reply(next[0], http(200));
  EXPECT_EQ(count_status(DeliveryStatus::kDelivered), 2u);
  EXPECT_FALSE(mentions(m, pa));
  st = s->stats();
  EXPECT_EQ(st.live, 0u);
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(s->in_flight(pg), 0u);
  EXPECT_TRUE(poll().empty());
}

TEST_F(SchedulerTest, DropThenRestoreSendsWhatAFreshOwnerWould) {
  const Partition pa = partition_of("acme"), pg = partition_of("globex");
  ASSERT_NE(pa, pg);
  Endpoint a1 = add_ep("acme", "xhub");
  Endpoint a2;
  a2.id = make_id(pa, 2000);
  a2.tenant = "acme";
  a2.url = "https://example.com/paced";
  a2.policy = "xhub";
  a2.rate_limit = RateLimit{2, 1};  // 2/s, no burst
  ASSERT_TRUE(s->create_endpoint(a2, now, m).ok());
  Endpoint g = add_ep("globex", "xhub", {}, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(submit("acme"), 2u);
    ASSERT_EQ(submit("globex"), 1u);
  }
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 5u);  // a1 3, a2 1 (one token), g 1 (limit 1)
  SendCommand orphan;
  int a1_seen = 0;
  for (const SendCommand& c : out) {
    if (c.endpoint == a1.id) {
      const int k = a1_seen++;
      if (k == 0) reply(c, http(429, "5"));  // a retry, and a1 held 5 s
      if (k == 1) reply(c, http(200));
      if (k == 2) orphan = c;  // still out at the drop
    }
    if (c.endpoint == a2.id) reply(c, http(503));  // a retry in the wheel
    if (c.endpoint == g.id) reply(c, http(503));
  }
  ASSERT_EQ(a1_seen, 3);
  now += milliseconds(600);
  out = poll();  // a2's next token; g's next
  ASSERT_EQ(out.size(), 2u);
  for (const SendCommand& c : out) reply(c, http(200));

  RecordStore store;
  store.apply(m);  // everything written so far: what a new owner would load
  ASSERT_EQ(s->in_flight(pa), 1u);
  const uint64_t live_before = s->live();
  // acme: a1's retry, a2's retry and its queued one (the in-flight one is not counted).
  EXPECT_EQ(s->drop_partition(pa), 3u);
  const uint64_t globex_live = s->live();
  EXPECT_EQ(globex_live, live_before - 3 - 1);
  EXPECT_EQ(s->stats().orphaned, 1u);
  store.restore(*s, pa, now);

  Scheduler fresh(opts, reg, 7, now);
  store.restore(fresh, pa, now);
  EXPECT_EQ(fresh.live(), 4u);  // the in-flight one comes back as a lost lease
  EXPECT_EQ(s->live(), fresh.live() + globex_live);
  EXPECT_EQ(s->stats().in_wheel, fresh.stats().in_wheel + 1);  // globex's retry
  EXPECT_EQ(s->stats().endpoints, fresh.stats().endpoints + 1);
  EXPECT_EQ(s->stats().tenants, fresh.stats().tenants + 1);

  // The same script on both; sends compared per poll (the order within one poll among
  // deliveries due in the same millisecond is the wheel's, unspecified).
  using Send = std::tuple<DeliveryId, EventSeq, EndpointId, uint16_t, bool>;
  auto key = [](const SendCommand& c) {
    return Send{c.delivery, c.event, c.endpoint, c.attempt, c.probe};
  };
  auto by_key = [&](const SendCommand& x, const SendCommand& y) { return key(x) < key(y); };
  std::vector<std::vector<Send>> got, want;
  Mutations fm;
  m.clear();
  size_t acme_sends = 0;
  for (int i = 0; i < 200; ++i) {  // 100 s in steps of 0.5 s
    std::vector<SendCommand> a, b;
    s->poll(now, a, m);
    fresh.poll(now, b, fm);
    std::sort(a.begin(), a.end(), by_key);
    std::sort(b.begin(), b.end(), by_key);
    const int status = i % 3 == 0 ? 503 : 200;
    got.emplace_back();
    want.emplace_back();
    for (const SendCommand& c : a) {
      if (c.endpoint != g.id) got.back().push_back(key(c));
      s->on_result(c, http(c.endpoint == g.id ? 200 : status), now, now, m);
    }
    for (const SendCommand& c : b) {
      want.back().push_back(key(c));
      fresh.on_result(c, http(status), now, now, fm);
    }
    acme_sends += b.size();
    if (i == 3) s->on_result(orphan, http(200), now, now, m);  // the old lease: ignored
    now += milliseconds(500);
  }
  EXPECT_GE(acme_sends, 4u);
  EXPECT_EQ(got, want);
  // The same records written for acme's deliveries.
  using Put = std::tuple<DeliveryStatus, uint16_t, int64_t, uint8_t>;
  std::map<DeliveryId, std::vector<Put>> got_puts, want_puts;
  for (const DeliveryPut& p : m.deliveries) {
    if (id_partition(p.delivery.id) != pa) continue;
    got_puts[p.delivery.id].emplace_back(p.delivery.status, p.delivery.attempts,
                                         p.delivery.next_attempt_at.ms(), p.delivery.flags);
  }
  for (const DeliveryPut& p : fm.deliveries) {
    want_puts[p.delivery.id].emplace_back(p.delivery.status, p.delivery.attempts,
                                          p.delivery.next_attempt_at.ms(), p.delivery.flags);
  }
  EXPECT_EQ(got_puts.size(), 4u);
  EXPECT_EQ(got_puts, want_puts);
  EXPECT_EQ(s->live(), 0u);
  EXPECT_EQ(fresh.live(), 0u);
  EXPECT_EQ(s->stats().orphaned, 0u);
}

TEST_F(SchedulerTest, ADroppedEndpointRestoredIsDispatchedOncePerPass) {
  ASSERT_NE(partition_of("acme"), partition_of("globex"));
  const Partition pa = partition_of("acme");
  Endpoint a = add_ep("acme", "xhub", {}, 1000);
  for (int i = 0; i < 60; ++i) ASSERT_EQ(submit("acme"), 1u);
  ASSERT_EQ(poll().size(), 50u);  // SPEC R5.3; the endpoint waits in line for the next pass
  RecordStore store;
  store.apply(m);
  EXPECT_EQ(s->drop_partition(pa), 10u);
  EXPECT_EQ(s->stats().orphaned, 50u);
  EXPECT_FALSE(s->next_wakeup().has_value());  // nothing of acme is waiting in line
  store.restore(*s, pa, now);
  std::vector<SendCommand> out = poll();
  EXPECT_EQ(out.size(), 50u);  // one pass, one turn for the endpoint: not one per incarnation
  for (const SendCommand& c : out) EXPECT_EQ(c.endpoint, a.id);
  EXPECT_EQ(s->stats().live, 60u);
}

TEST_F(BreakerSchedulerTest, DropPartitionForgetsItsBreakersOnly) {
  const Partition pa = partition_of("acme"), pg = partition_of("globex");
  ASSERT_NE(pa, pg);
  Endpoint a = add_ep("acme", "xhub");
  Endpoint g = add_ep("globex", "xhub");
  open_breaker("acme");
  open_breaker("globex");  // opened at the same time: both reopen at the same moment
  EXPECT_EQ(s->stats().breakers_open, 2u);
  Tenant acme_rec;
  for (const Tenant& t : m.tenants) {
    if (t.name == "acme") acme_rec = t;
  }
  ASSERT_EQ(acme_rec.breaker.state, BreakerSnapshot::State::kOpen);
  const WallTime reopen = s->breaker_view("globex", now).snapshot.reopen_at;
  ASSERT_EQ(s->breaker_view("acme", now).snapshot.reopen_at, reopen);

  EXPECT_EQ(s->drop_partition(pa), 5u);  // acme's retries, held
  const BreakerView va = s->breaker_view("acme", now);
  EXPECT_EQ(va.snapshot.state, BreakerSnapshot::State::kClosed);
  EXPECT_EQ(va.snapshot.failed_probes, 0u);
  EXPECT_EQ(va.window_total, 0u);
  EXPECT_EQ(va.window_failed, 0u);
  const BreakerView vg = s->breaker_view("globex", now);
  EXPECT_EQ(vg.snapshot.state, BreakerSnapshot::State::kOpen);
  EXPECT_GE(vg.endpoints, 1u);
  EXPECT_EQ(vg.endpoints_using, vg.endpoints);  // globex's endpoints are on xhub (R4)
  EXPECT_EQ(vg.snapshot.reopen_at, reopen);
  EXPECT_EQ(vg.window_failed, 5u);
  SchedulerStats st = s->stats();  // at once, not a second later
  EXPECT_EQ(st.breakers_open, 1u);
  EXPECT_EQ(st.held_by_breaker, 0u);  // globex's retries are in the wheel, not ready
  EXPECT_EQ(st.tenants, 1u);

  // The pause ends: only globex's breaker moves (acme's timer went with it).
  m.clear();
  now = reopen;
  std::vector<SendCommand> out = poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].probe);
  EXPECT_EQ(out[0].endpoint, g.id);
  EXPECT_EQ(s->breaker_view("globex", now).snapshot.state, BreakerSnapshot::State::kHalfOpen);
  EXPECT_FALSE(mentions(m, pa));

  // Restored from its record, acme's breaker is back as it was persisted.
  ASSERT_TRUE(s->restore_endpoint(a).ok());
  s->restore_tenant(acme_rec);
  EXPECT_NE(s->breaker_view("acme", now).snapshot.state, BreakerSnapshot::State::kClosed);
  EXPECT_EQ(s->breaker_view("acme", now).snapshot.opened_at, acme_rec.breaker.opened_at);
  EXPECT_EQ(s->stats().tenants, 2u);
}

// SPEC R14 (docs/security.md "Owner e-mail"): an address the merchant sets is unconfirmed and
// gets a confirmation e-mail (one per interval per tenant); notices name it only once its link
// was followed; the platform's is confirmed at once; the record keeps all of it.
TEST_F(SchedulerTest, AMerchantsOwnerAddressGetsNoticesOnlyOnceConfirmed) {
  s->set_id_allocator(&ids);
  Endpoint e = add_ep("acme", "smengo");
  m.clear();
  auto set = s->set_owner_email("acme", "a@shop.example", false, minutes(10), now, m);
  ASSERT_TRUE(set.ok());
  EXPECT_TRUE(*set);
  ASSERT_EQ(m.notifications.size(), 1u);
  EXPECT_EQ(m.notifications[0].kind, "owner_email_confirmation");
  EXPECT_EQ(m.notifications[0].owner_email, "a@shop.example");
  EXPECT_EQ(m.notifications[0].tenant, "acme");
  EXPECT_NE(m.notifications[0].seq, 0u);
  ASSERT_EQ(m.tenants.size(), 1u);
  EXPECT_FALSE(m.tenants[0].owner_email_confirmed);
  EXPECT_EQ(m.tenants[0].owner_email_asked_at, now);
  EXPECT_FALSE(s->owner_email("acme").confirmed);

  // Another address within the interval: refused, nothing changes, nothing is mailed.
  m.clear();
  now = now + minutes(1);
  auto again = s->set_owner_email("acme", "b@elsewhere.example", false, minutes(10), now, m);
  ASSERT_FALSE(again.ok());
  EXPECT_STREQ(again.error().reason, "too_many_confirmations");
  EXPECT_TRUE(m.notifications.empty());
  EXPECT_TRUE(m.tenants.empty());
  EXPECT_EQ(s->owner_email("acme").address, "a@shop.example");

  // Disabled while unconfirmed: the notice names no owner address (no e-mail).
  auto disable = [&] {
    m.clear();
    submit("acme");
    std::vector<SendCommand> out = poll();
    EXPECT_EQ(out.size(), 1u);
    if (!out.empty()) reply(out[0], http(410));
    for (const Notification& n : m.notifications) {
      if (n.kind == "endpoint_disabled") return n;
    }
    ADD_FAILURE() << "no endpoint_disabled notification";
    return Notification{};
  };
  EXPECT_EQ(disable().owner_email, "");

  // A link for another address confirms nothing; the right one does, twice alike.
  m.clear();
  auto wrong = s->confirm_owner_email("acme", "b@elsewhere.example", now, m);
  ASSERT_FALSE(wrong.ok());
  EXPECT_STREQ(wrong.error().reason, "owner_email_changed");
  EXPECT_FALSE(s->confirm_owner_email("zeta", "a@shop.example", now, m).ok());
  ASSERT_TRUE(s->confirm_owner_email("acme", "a@shop.example", now, m).ok());
  ASSERT_EQ(m.tenants.size(), 1u);
  EXPECT_TRUE(m.tenants[0].owner_email_confirmed);
  ASSERT_TRUE(s->confirm_owner_email("acme", "a@shop.example", now, m).ok());
  EXPECT_EQ(m.tenants.size(), 1u);  // already confirmed: nothing written
  // Setting the confirmed address again changes nothing and mails nothing.
  m.clear();
  auto same = s->set_owner_email("acme", "a@shop.example", false, minutes(10), now, m);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same);
  EXPECT_TRUE(m.notifications.empty());

  ASSERT_TRUE(s->endpoint_action(e.id, EndpointAction::kEnable, now, m).ok());
  EXPECT_EQ(disable().owner_email, "a@shop.example");

  // A restart keeps the state (the tenant record).
  m.clear();
  now = now + minutes(10);
  auto later = s->set_owner_email("acme", "b@elsewhere.example", false, minutes(10), now, m);
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE(*later);
  ASSERT_EQ(m.tenants.size(), 1u);
  const Tenant rec = m.tenants[0];
  make();
  s->restore_tenant(rec);
  EXPECT_EQ(s->owner_email("acme").address, "b@elsewhere.example");
  EXPECT_FALSE(s->owner_email("acme").confirmed);
  EXPECT_EQ(s->owner_email("acme").asked_at, now);
  m.clear();
  EXPECT_FALSE(s->set_owner_email("acme", "c@other.example", false, minutes(10), now, m).ok());

  // The platform's address is confirmed at once and mails nothing; clearing needs no wait.
  m.clear();
  auto platform = s->set_owner_email("acme", "ops@shop.example", true, minutes(10), now, m);
  ASSERT_TRUE(platform.ok());
  EXPECT_FALSE(*platform);
  EXPECT_TRUE(m.notifications.empty());
  EXPECT_TRUE(s->owner_email("acme").confirmed);
  ASSERT_TRUE(s->set_owner_email("acme", "", false, minutes(10), now, m).ok());
  EXPECT_EQ(s->owner_email("acme").address, "");
  EXPECT_FALSE(s->owner_email("acme").confirmed);
}

}  // namespace
}  // namespace ringcast
