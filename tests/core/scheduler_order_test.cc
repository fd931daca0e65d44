// Ordered delivery in the scheduler (SPEC R13): one delivery of a key at a time in acceptance
// order, keys independent, whole-endpoint order, block / skip after a failed head, supersede,
// recovery in acceptance order (a block included), and the key table itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/order_keys.h"
#include "core/scheduler.h"
#include "tests/core/scheduler_test_util.h"

namespace ringcast {
namespace {

const WallTime kT0 = test::kSchedT0;
using test::SeqIds;

TransportResult http(int status) {
  TransportResult r;
  r.response_received = r.request_written = r.connect_attempted = true;
  r.http_status = static_cast<uint16_t>(status);
  return r;
}

class OrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RetryPolicy ms = test::smengo_ms();
    ms.slow_pauses.clear();
    ms.disable_on_exhaustion = false;  // a failed head ends the delivery, not the endpoint
    ASSERT_TRUE(reg.put(ms).ok());
    s = std::make_unique<Scheduler>(opts, reg, 7, now);
  }
  Endpoint add_ep(Ordering o, OnHeadFailure f = OnHeadFailure::kBlock, bool supersede = false,
                  uint32_t max_in_flight = 0) {
    Endpoint e;
    e.id = make_id(partition_of("acme"), 1000 + ++ep_seq);
    e.tenant = "acme";
    e.url = "https://example.com/hook";
    e.policy = "smengo-ms";
    e.ordering = o;
    e.on_head_failure = f;
    e.supersede = supersede;
    e.max_in_flight = max_in_flight;
    Result<Endpoint> r = s->create_endpoint(e, now, m);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : e;
  }
  // Submits an event with this ordering key (empty: none); returns its seq.
  EventSeq submit(const std::string& key) {
    Event ev;
    ev.seq = make_id(partition_of("acme"), ++ids.n);
    ev.tenant = "acme";
    ev.id = "ev" + std::to_string(ev.seq);
    ev.type = "order.paid";
    ev.payload = "{}";
    ev.payload_hash = payload_hash(ev.payload);
    ev.created_at = now;
    ev.ordering_key = key;
    key_of[ev.seq] = key;
    s->fan_out(ev, now, ids, m);
    return ev.seq;
  }
  std::vector<SendCommand> poll() {
    std::vector<SendCommand> out;
    s->poll(now, out, m);
    return out;
  }
  void reply(const SendCommand& c, int status) { s->on_result(c, http(status), now, now, m); }
  void advance(Duration d) { now += d; }
  const Delivery* last_put(DeliveryId id) const {
    for (auto it = m.deliveries.rbegin(); it != m.deliveries.rend(); ++it) {
      if (it->delivery.id == id) return &it->delivery;
    }
    return nullptr;
  }
  std::vector<std::string> keys(const std::vector<SendCommand>& cs) {
    std::vector<std::string> out;
    for (const SendCommand& c : cs) out.push_back(key_of[c.event]);
    std::sort(out.begin(), out.end());
    return out;
  }
  // The latest record of every delivery written so far (what a store would recover).
  std::vector<Delivery> records() const {
    std::map<DeliveryId, Delivery> last;
    for (const DeliveryPut& p : m.deliveries) last[p.delivery.id] = p.delivery;
    std::vector<Delivery> out;
    for (const auto& [id, d] : last) out.push_back(d);
    return out;
  }

  PolicyRegistry reg;
  SchedulerOptions opts;
  std::unique_ptr<Scheduler> s;
  SeqIds ids;
  WallTime now = kT0;
  Mutations m;
  uint64_t ep_seq = 0;
  std::map<EventSeq, std::string> key_of;
};

TEST_F(OrderTest, PerKeyOneAtATimeInAcceptanceOrderAndKeysIndependent) {
  add_ep(Ordering::kPerKey);
  const EventSeq a1 = submit("A"), a2 = submit("A"), b1 = submit("B"), n1 = submit(""),
                 a3 = submit("A"), n2 = submit("");
  auto sent = poll();
  // A's head, B's head and both unkeyed ones; A2 and A3 wait.
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(keys(sent), (std::vector<std::string>{"", "", "A", "B"}));
  std::vector<EventSeq> a_order;
  for (int round = 0; round < 5; ++round) {
    for (const SendCommand& c : sent) {
      if (key_of[c.event] == "A") a_order.push_back(c.event);
      reply(c, 200);
    }
    sent = poll();
  }
  EXPECT_EQ(a_order, (std::vector<EventSeq>{a1, a2, a3}));
  EXPECT_EQ(s->stats().order_keys, 0u);
  EXPECT_EQ(s->stats().order_waiting, 0u);
  (void)b1, (void)n1, (void)n2;
}

TEST_F(OrderTest, AFailingKeyHoldsOnlyItself) {
  add_ep(Ordering::kPerKey);
  submit("A");
  for (int i = 0; i < 3; ++i) submit("A");
  for (int i = 0; i < 3; ++i) submit("B");
  size_t b_delivered = 0, a_sent = 0;
  for (int round = 0; round < 10; ++round) {
    for (const SendCommand& c : poll()) {
      if (key_of[c.event] == "A") {
        ++a_sent;
        reply(c, 503);  // A's head keeps failing
      } else {
        ++b_delivered;
        reply(c, 200);
      }
    }
    advance(milliseconds(25));
  }
  EXPECT_EQ(b_delivered, 3u);
  EXPECT_GE(a_sent, 2u);  // A's head was retried, nothing behind it went
  EXPECT_EQ(s->stats().order_waiting, 3u);
}

TEST_F(OrderTest, EndpointOrderingSendsOneAtATime) {
  add_ep(Ordering::kEndpoint);
  std::vector<EventSeq> want{submit("A"), submit(""), submit("B"), submit("A")};
  std::vector<EventSeq> got;
  for (int round = 0; round < 6; ++round) {
    auto sent = poll();
    ASSERT_LE(sent.size(), 1u);
    for (const SendCommand& c : sent) {
      got.push_back(c.event);
      reply(c, 200);
    }
  }
  EXPECT_EQ(got, want);
}

TEST_F(OrderTest, BlockHoldsTheKeyUntilItsHeadIsResent) {
  add_ep(Ordering::kPerKey, OnHeadFailure::kBlock);
  const EventSeq a1 = submit("A"), a2 = submit("A");
  DeliveryId head = 0;
  for (int round = 0; round < 10; ++round) {  // three attempts, all 500: A1 fails
    for (const SendCommand& c : poll()) {
      EXPECT_EQ(c.event, a1);
      head = c.delivery;
      reply(c, 500);
    }
    advance(milliseconds(25));
  }
  ASSERT_EQ(last_put(head)->status, DeliveryStatus::kFailed);
  advance(seconds(5));
  EXPECT_TRUE(poll().empty());  // A2 is held (R13.2)
  auto view = s->order_keys_of(s->find_endpoint(last_put(head)->endpoint)->id, 10);
  ASSERT_EQ(view.size(), 1u);
  EXPECT_TRUE(view[0].blocked);
  EXPECT_EQ(view[0].blocked_by, head);
  EXPECT_EQ(view[0].waiting, 1u);
  // The first waiting one carries the block to the store (a restart keeps it).
  ASSERT_NE(last_put(view[0].first_waiting), nullptr);
  EXPECT_TRUE(last_put(view[0].first_waiting)->flags & Delivery::kFlagKeyBlocked);
  // Resending the head: the key goes on, the resent one behind what waited.
  ASSERT_TRUE(s->reopen_delivery(*last_put(head), now, m).ok());
  std::vector<EventSeq> got;
  for (int round = 0; round < 4; ++round) {
    for (const SendCommand& c : poll()) {
      got.push_back(c.event);
      reply(c, 200);
    }
  }
  EXPECT_EQ(got, (std::vector<EventSeq>{a2, a1}));
  EXPECT_EQ(s->stats().order_keys, 0u);
}

TEST_F(OrderTest, SkipLetsTheNextGoAfterAFailedHead) {
  add_ep(Ordering::kPerKey, OnHeadFailure::kSkip);
  const EventSeq a1 = submit("A"), a2 = submit("A");
  std::vector<EventSeq> got;
  for (int round = 0; round < 10; ++round) {
    for (const SendCommand& c : poll()) {
      got.push_back(c.event);
      reply(c, c.event == a1 ? 500 : 200);
    }
    advance(milliseconds(25));
  }
  EXPECT_EQ(got, (std::vector<EventSeq>{a1, a1, a1, a2}));
  EXPECT_EQ(s->stats().order_keys_blocked, 0u);
}

TEST_F(OrderTest, SettlingAnUnknownHeadReleasesItsKey) {
  add_ep(Ordering::kPerKey, OnHeadFailure::kBlock);
  const EventSeq a1 = submit("A"), a2 = submit("A");
  DeliveryId head = 0;
  for (int round = 0; round < 10; ++round) {
    for (const SendCommand& c : poll()) {
      head = c.delivery;
      reply(c, 502);  // UNKNOWN (R12.1): ends unknown after the budget
    }
    advance(milliseconds(25));
  }
  Delivery d = *last_put(head);
  ASSERT_EQ(d.status, DeliveryStatus::kUnknown);
  EXPECT_TRUE(poll().empty());
  d.status = DeliveryStatus::kDelivered;  // the operator's resolution
  EXPECT_TRUE(s->settle_key(d, now, m));
  auto sent = poll();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].event, a2);
  (void)a1;
}

TEST_F(OrderTest, SupersedeEndsTheOlderWaitingOnesButNeverTheOneOnTheWire) {
  add_ep(Ordering::kPerKey, OnHeadFailure::kBlock, true);
  submit("A");
  auto sent = poll();
  ASSERT_EQ(sent.size(), 1u);  // A1 on the wire
  const EventSeq a2 = submit("A"), a3 = submit("A"), a4 = submit("A");
  std::map<DeliveryId, EventSeq> ev_of;
  for (const DeliveryPut& p : m.deliveries) ev_of[p.delivery.id] = p.delivery.event;
  size_t superseded = 0;
  std::map<EventSeq, DeliveryId> id_of;
  for (const auto& [id, ev] : ev_of) id_of[ev] = id;
  for (const auto& [id, ev] : ev_of) {
    const Delivery* d = last_put(id);
    if (ev == a2 || ev == a3) {
      EXPECT_EQ(d->status, DeliveryStatus::kSuperseded);
      ++superseded;
    } else {
      EXPECT_NE(d->status, DeliveryStatus::kSuperseded);
    }
  }
  EXPECT_EQ(superseded, 2u);
  EXPECT_EQ(s->stats().superseded, 2u);
  size_t records = 0;
  for (const Attempt& a : m.attempts) {
    if (a.code.kind != ErrorCode::Kind::kSuperseded) continue;
    ++records;
    EXPECT_EQ(a.number, kSupersededRecord);
    // Each names the one that replaced it: A2 the newer A3, A3 the newest A4.
    const EventSeq by = a.delivery == id_of[a2] ? a3 : a4;
    EXPECT_EQ(a.response_prefix, std::to_string(id_of[by]));
  }
  EXPECT_EQ(records, 2u);
  reply(sent[0], 200);
  sent = poll();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].event, a4);
}

TEST_F(OrderTest, SupersedeTakesAHeadThatNeverHadAnAttempt) {
  // One in flight at a time: key X holds the endpoint's slot, so A1 is A's head, due, unsent.
  add_ep(Ordering::kPerKey, OnHeadFailure::kBlock, true, 1);
  submit("X");
  auto sent = poll();
  ASSERT_EQ(sent.size(), 1u);
  const EventSeq a1 = submit("A");
  EXPECT_TRUE(poll().empty());
  const EventSeq a2 = submit("A");
  reply(sent[0], 200);
  std::vector<EventSeq> got;
  for (int round = 0; round < 3; ++round) {
    for (const SendCommand& c : poll()) {
      got.push_back(c.event);
      reply(c, 200);
    }
  }
  EXPECT_EQ(got, (std::vector<EventSeq>{a2}));
  EXPECT_EQ(s->stats().superseded, 1u);
  (void)a1;
}

TEST_F(OrderTest, RecoveryRebuildsAcceptanceOrderFromAnyVisitOrder) {
  Endpoint ep = add_ep(Ordering::kPerKey);
  const EventSeq a1 = submit("A"), a2 = submit("A"), a3 = submit("A"), b1 = submit("B");
  auto sent = poll();  // A1 and B1 leased: a crash now leaves both leases open
  ASSERT_EQ(sent.size(), 2u);
  std::vector<Delivery> recs = records();
  std::reverse(recs.begin(), recs.end());  // a visit order that is not acceptance order
  s = std::make_unique<Scheduler>(opts, reg, 7, now);
  ASSERT_TRUE(s->restore_endpoint(*std::find_if(m.endpoints.begin(), m.endpoints.end(),
                                                [&](const Endpoint& e) { return e.id == ep.id; }))
                  .ok());
  for (Delivery d : recs) {
    if (d.status == DeliveryStatus::kInFlight) {
      d.status = DeliveryStatus::kPending;  // what the store's recovery hands over
      d.last_code = ErrorCode::of(ErrorCode::Kind::kLeaseExpired);
    }
    s->restore_delivery(d, now);
  }
  EXPECT_EQ(s->stats().order_waiting, 2u);
  std::vector<EventSeq> a_order;
  for (int round = 0; round < 5; ++round) {
    for (const SendCommand& c : poll()) {
      if (key_of[c.event] == "A") a_order.push_back(c.event);
      reply(c, 200);
    }
  }
  EXPECT_EQ(a_order, (std::vector<EventSeq>{a1, a2, a3}));
  (void)b1;
}

TEST_F(OrderTest, RecoveryKeepsABlockedKeyBlocked) {
  Endpoint ep = add_ep(Ordering::kPerKey, OnHeadFailure::kBlock);
  submit("A");
  const EventSeq a2 = submit("A");
  submit("A");
  for (int round = 0; round < 10; ++round) {
    for (const SendCommand& c : poll()) reply(c, 500);
    advance(milliseconds(25));
  }
  ASSERT_EQ(s->stats().order_keys_blocked, 1u);
  std::vector<Delivery> recs = records();
  std::shuffle(recs.begin(), recs.end(), std::mt19937(3));
  s = std::make_unique<Scheduler>(opts, reg, 7, now);
  ASSERT_TRUE(s->restore_endpoint(m.endpoints.front()).ok());
  for (const Delivery& d : recs) s->restore_delivery(d, now);
  advance(seconds(1));
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(s->stats().order_keys_blocked, 1u);
  auto view = s->order_keys_of(ep.id, 10);
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0].blocked_by, 0u);  // not known after a restart
  EXPECT_EQ(view[0].waiting, 2u);
  // Any resolution of a delivery of the key releases it then.
  Delivery failed_head;
  for (const Delivery& d : recs) {
    if (d.status == DeliveryStatus::kFailed) failed_head = d;
  }
  ASSERT_TRUE(s->settle_key(failed_head, now, m));
  auto sent = poll();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].event, a2);
  EXPECT_FALSE(last_put(sent[0].delivery)->flags & Delivery::kFlagKeyBlocked);
}

TEST_F(OrderTest, DeletingTheEndpointOrDroppingThePartitionForgetsItsKeys) {
  Endpoint ep = add_ep(Ordering::kPerKey);
  for (int i = 0; i < 3; ++i) submit("A");
  for (int i = 0; i < 3; ++i) submit("B");
  auto sent = poll();
  ASSERT_EQ(sent.size(), 2u);
  ASSERT_TRUE(s->delete_endpoint(ep.id, now, m).ok());
  for (const SendCommand& c : sent) reply(c, 200);
  EXPECT_EQ(s->stats().order_keys, 0u);
  EXPECT_EQ(s->stats().order_waiting, 0u);
  EXPECT_EQ(s->live(), 0u);

  add_ep(Ordering::kPerKey, OnHeadFailure::kBlock);
  for (int i = 0; i < 3; ++i) submit("C");
  poll();
  EXPECT_EQ(s->drop_partition(partition_of("acme")), 2u);  // two waiting; the head in flight
  EXPECT_EQ(s->stats().order_keys, 0u);
  EXPECT_EQ(s->stats().order_waiting, 0u);
}

TEST_F(OrderTest, TurningOrderingOffReleasesTheWaitingOnes) {
  Endpoint ep = add_ep(Ordering::kPerKey);
  for (int i = 0; i < 3; ++i) submit("A");
  EXPECT_EQ(poll().size(), 1u);
  Endpoint cfg = *s->find_endpoint(ep.id);
  cfg.ordering = Ordering::kNone;
  ASSERT_TRUE(s->update_endpoint(cfg, now, m).ok());
  EXPECT_EQ(poll().size(), 2u);
  EXPECT_EQ(s->stats().order_keys, 0u);
}

TEST(OrderKeysTable, MatchesAMapUnderRandomInsertsAndErases) {
  OrderKeys t;
  std::map<uint64_t, TimerEntry*> want;
  std::mt19937_64 rng(11);
  std::vector<TimerEntry> heads(64);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t id = 1 + rng() % 5000;
    if (rng() % 3 == 0) {
      t.erase(id);
      want.erase(id);
    } else if (OrderKeys::Key* k = t.find(id)) {
      ASSERT_TRUE(want.count(id));
      EXPECT_EQ(k->head, want[id]);
    } else {
      ASSERT_FALSE(want.count(id));
      TimerEntry* h = &heads[rng() % heads.size()];
      t.insert(id).head = h;
      want[id] = h;
    }
    ASSERT_EQ(t.size(), want.size());
  }
  for (const auto& [id, h] : want) {
    ASSERT_NE(t.find(id), nullptr);
    EXPECT_EQ(t.find(id)->head, h);
  }
}

TEST(OrderKeysTable, WaitingListKeepsOrderAndSortedInsertion) {
  OrderKeys::Key k;
  std::vector<TimerEntry> e(6);
  for (size_t i = 0; i < e.size(); ++i) e[i].expiry_ms = static_cast<int64_t>(i);
  auto before = [](const TimerEntry* a, const TimerEntry* b) {
    return a->expiry_ms < b->expiry_ms;
  };
  for (int i : {3, 1, 5, 0, 4, 2}) OrderKeys::insert_sorted(k, &e[i], before);
  OrderKeys::unlink(k, &e[4]);
  std::vector<int64_t> got;
  while (TimerEntry* x = OrderKeys::pop_front(k)) got.push_back(x->expiry_ms);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 3, 5}));
  EXPECT_EQ(k.tail, nullptr);
}

}  // namespace
}  // namespace ringcast
