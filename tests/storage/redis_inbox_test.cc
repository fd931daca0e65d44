// RedisInbox (cluster mode's intake on a non-owner, core/inbox.h) on a real redis-server: a push
// queues an event once per (tenant, id), answers a repeat with the queued payload's hash, an
// accepted id with its stored record and an unknown tenant without writing; reads page through
// an inbox after a cursor in arrival order; an ack removes entries and their queued keys; the
// store's key lookup sees queued keys except for events drained from the inbox; a push whose
// WAIT cannot be satisfied is never answered as queued.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "core/trace_context.h"
#include "storage/codec.h"
#include "storage/redis_inbox.h"
#include "storage/redis_store.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {
namespace {

// Runs posted work inline: the inbox's answers arrive on its loop thread and are handed over
// through a promise.
struct InlinePoster final : Poster {
  void post(std::function<void()> fn) override { fn(); }
};

std::string be64s(uint64_t v) {
  std::string s;
  put_be64(s, v);
  return s;
}

std::string field(const std::string& tenant, const std::string& id) {
  std::string f = tenant;
  f.push_back('\0');
  f += id;
  return f;
}

class RedisInboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ringcast::test::RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
    server_ = ringcast::test::RedisServer::start(dir_.path());
    p_ = partition_of(tenant_);
    tag_ = "{rc:" + std::to_string(p_) + "}:";
    // The tenant exists (as RedisStore writes it when its first endpoint is made).
    ASSERT_FALSE(server_->cmd({"HSET", tag_ + "tn", tenant_, "x"}).is_error());
  }

  std::unique_ptr<RedisInbox> open(uint32_t wait_replicas = 0) {
    RedisInboxOptions o;
    o.servers = {server_->address()};
    o.command_timeout = seconds(2);
    o.wait_replicas = wait_replicas;
    auto r = RedisInbox::open(o);
    EXPECT_TRUE(r.ok());
    return r.ok() ? std::move(*r) : nullptr;
  }

  std::vector<Result<InboxAnswer>> push(RedisInbox& inbox, const std::vector<EventInput>& evs) {
    std::vector<InboxPush> ps;
    for (const EventInput& e : evs) ps.push_back({&e, std::hash<std::string>{}(e.payload)});
    std::promise<std::vector<Result<InboxAnswer>>> pr;
    inbox.push(std::move(ps), poster_,
               [&](std::vector<Result<InboxAnswer>> a) { pr.set_value(std::move(a)); });
    return pr.get_future().get();
  }

  std::vector<InboxRead> read(RedisInbox& inbox, std::vector<std::pair<Partition, std::string>> at,
                              size_t max_each) {
    std::promise<Result<std::vector<InboxRead>>> pr;
    inbox.read(std::move(at), max_each, poster_,
               [&](Result<std::vector<InboxRead>> r) { pr.set_value(std::move(r)); });
    auto r = pr.get_future().get();
    EXPECT_TRUE(r.ok());
    return r.ok() ? std::move(*r) : std::vector<InboxRead>{};
  }

  // Each with a message id of its own, as the intake gives one before queueing (core/inbox.h).
  EventInput ev(const std::string& tenant, const std::string& id, const std::string& payload) {
    EventInput e{tenant, id, "order.paid", payload};
    e.message_id = make_message_id(WallTime::from_ms(1'767'225'600'000), 0, ++message_seq_);
    return e;
  }
  uint64_t message_seq_ = 0;

  ringcast::test::TempDir dir_{"ringcast-redis-inbox"};
  std::unique_ptr<ringcast::test::RedisServer> server_;
  InlinePoster poster_;
  std::string tenant_ = "acme";
  Partition p_ = 0;
  std::string tag_;
};

TEST_F(RedisInboxTest, QueuesOncePerIdAndAnswersRepeatsStoredIdsAndUnknownTenants) {
  auto inbox = open();
  ASSERT_TRUE(inbox);
  // An id accepted before (RedisStore's T key: be64(seq) + record).
  EventKeyRecord stored{make_id(p_, 41), 777, 3,
                        message_id_bits(make_message_id(WallTime::from_ms(5), 1, 2))};
  std::string v = be64s(stored.seq);
  encode_event_key(stored, v);
  ASSERT_FALSE(server_->cmd({"HSET", tag_ + "key", field(tenant_, "e-old"), v}).is_error());

  std::vector<EventInput> first = {ev(tenant_, "e1", R"({"a":1})"), ev(tenant_, "e2", R"({"a":2})"),
                                   ev("nobody-here", "e3", "{}"), ev(tenant_, "e-old", "{}"),
                                   ev(tenant_, "e1", R"({"a":1})")};
  auto a = push(*inbox, first);
  ASSERT_EQ(a.size(), 5u);
  for (const auto& r : a) ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(a[0]->kind, InboxAnswer::Kind::kQueued);
  EXPECT_EQ(a[1]->kind, InboxAnswer::Kind::kQueued);
  EXPECT_EQ(a[2]->kind, InboxAnswer::Kind::kUnknownTenant);
  EXPECT_EQ(a[3]->kind, InboxAnswer::Kind::kStored);
  EXPECT_EQ(a[3]->stored.seq, stored.seq);
  EXPECT_EQ(a[3]->stored.deliveries, 3u);
  EXPECT_EQ(a[3]->payload_hash, 777u);
  EXPECT_EQ(a[3]->stored.message, stored.message) << "a repeat names the first's message id";
  // The same id twice in one push: the second sees the first.
  EXPECT_EQ(a[4]->kind, InboxAnswer::Kind::kAlreadyQueued);
  EXPECT_EQ(a[4]->payload_hash, std::hash<std::string>{}(R"({"a":1})"));
  EXPECT_EQ(message_id_of(a[4]->stored.message), first[0].message_id)
      << "a repeat of a queued event names the message id it was queued with";

  // Another payload under a queued id: answered with the queued payload's hash (the caller
  // calls that a conflict); nothing new is queued.
  auto b = push(*inbox, {ev(tenant_, "e2", R"({"a":"other"})")});
  ASSERT_TRUE(b[0].ok());
  EXPECT_EQ(b[0]->kind, InboxAnswer::Kind::kAlreadyQueued);
  EXPECT_EQ(b[0]->payload_hash, std::hash<std::string>{}(R"({"a":2})"));
  EXPECT_EQ(server_->cmd({"XLEN", tag_ + "in"}).integer, 2);
  EXPECT_EQ(server_->cmd({"HLEN", tag_ + "ik"}).integer, 2);
  EXPECT_EQ(
      server_->cmd({"HLEN", "{rc:" + std::to_string(partition_of("nobody-here")) + "}:ik"}).integer,
      0);
}

TEST_F(RedisInboxTest, ReadsPageInArrivalOrderAndAnAckRemovesEntriesAndTheirKeys) {
  auto inbox = open();
  ASSERT_TRUE(inbox);
  std::vector<EventInput> evs;
  for (int i = 0; i < 5; ++i)
    evs.push_back(ev(tenant_, "e" + std::to_string(i), "{\"n\":" + std::to_string(i) + "}"));
  evs[1].ordering_key = "order 7";  // SPEC R13.1: carried to the owner with the event
  for (const auto& r : push(*inbox, evs))
    ASSERT_TRUE(r.ok() && r->kind == InboxAnswer::Kind::kQueued);

  auto all = read(*inbox, {{p_, ""}}, 10);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].p, p_);
  ASSERT_EQ(all[0].entries.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const InboxEntry& e = all[0].entries[static_cast<size_t>(i)];
    EXPECT_EQ(e.event.tenant, tenant_);
    EXPECT_EQ(e.event.id, "e" + std::to_string(i));
    EXPECT_EQ(e.event.type, "order.paid");
    EXPECT_EQ(e.event.payload, "{\"n\":" + std::to_string(i) + "}");
    EXPECT_EQ(e.event.ordering_key, i == 1 ? "order 7" : "");
    EXPECT_EQ(e.event.message_id, evs[static_cast<size_t>(i)].message_id) << "the owner keeps it";
    EXPECT_GT(e.accepted_at.ms(), 1'600'000'000'000);  // Redis's clock, in ms
  }
  // Pages: two, then after the second entry's id the rest.
  auto page = read(*inbox, {{p_, ""}}, 2);
  ASSERT_EQ(page[0].entries.size(), 2u);
  auto rest = read(*inbox, {{p_, page[0].entries[1].id}}, 10);
  ASSERT_EQ(rest[0].entries.size(), 3u);
  EXPECT_EQ(rest[0].entries[0].event.id, "e2");
  // An empty inbox of another partition answers in its place.
  const Partition q = (p_ + 1) % kPartitions;
  auto two = read(*inbox, {{q, ""}, {p_, ""}}, 1);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].p, q);
  EXPECT_TRUE(two[0].entries.empty());
  EXPECT_EQ(two[1].entries.size(), 1u);

  inbox->ack(p_, {all[0].entries[0].id, all[0].entries[1].id},
             {field(tenant_, "e0"), field(tenant_, "e1")});
  // Acks are fire-and-forget: a read after it travels on the same connection, so it sees it.
  auto after = read(*inbox, {{p_, ""}}, 10);
  ASSERT_EQ(after[0].entries.size(), 3u);
  EXPECT_EQ(after[0].entries[0].event.id, "e2");
  EXPECT_EQ(server_->cmd({"HEXISTS", tag_ + "ik", field(tenant_, "e0")}).integer, 0);
  EXPECT_EQ(server_->cmd({"HEXISTS", tag_ + "ik", field(tenant_, "e2")}).integer, 1);
  // Once its key is gone the id can be queued again (the owner's T key guards it from then on).
  auto again = push(*inbox, {ev(tenant_, "e0", "{}")});
  EXPECT_EQ(again[0]->kind, InboxAnswer::Kind::kQueued);
}

TEST_F(RedisInboxTest, TheStoresLookupSeesQueuedKeysExceptForEventsDrainedFromTheInbox) {
  auto inbox = open();
  ASSERT_TRUE(inbox);
  ASSERT_TRUE(push(*inbox, {ev(tenant_, "q1", R"({"k":1})")})[0].ok());
  for (bool fencing : {true, false}) {
    RedisStoreOptions so;
    so.servers = {server_->address()};
    if (fencing) so.node_id = "node-a";  // cluster mode
    auto store = RedisStore::open(so);
    ASSERT_TRUE(store.ok());
    auto seen = (*store)->find_event_keys({Store::EventKeyRef{tenant_, "q1"}});
    ASSERT_TRUE(seen.ok());
    if (fencing) {
      ASSERT_TRUE((*seen)[0].has_value());
      EXPECT_EQ((*seen)[0]->seq, 0u);  // queued, not taken in
      EXPECT_EQ((*seen)[0]->payload_hash, std::hash<std::string>{}(R"({"k":1})"));
    } else {
      EXPECT_FALSE((*seen)[0].has_value());  // one node alone on its Redis keeps no inboxes
    }
    auto drained = (*store)->find_event_keys({Store::EventKeyRef{tenant_, "q1", true}});
    ASSERT_TRUE(drained.ok());
    EXPECT_FALSE((*drained)[0].has_value());
  }
}

TEST_F(RedisInboxTest, APushWhoseReplicaCountIsShortIsNeverAnsweredQueued) {
  // wait_replicas = 1 on a server without replicas: the script runs, its WAIT counts 0.
  auto inbox = open(1);
  ASSERT_TRUE(inbox);
  auto a = push(*inbox, {ev(tenant_, "w1", "{}"), ev("nobody-here", "w2", "{}")});
  ASSERT_EQ(a.size(), 2u);
  ASSERT_FALSE(a[0].ok());
  EXPECT_STREQ(a[0].error().reason, "store_unavailable");
  // A refusal needs no replica: it wrote nothing.
  ASSERT_TRUE(a[1].ok());
  EXPECT_EQ(a[1]->kind, InboxAnswer::Kind::kUnknownTenant);
  // The retry (the producer's) finds it queued — and is still not confirmed without a replica.
  auto again = push(*inbox, {ev(tenant_, "w1", "{}")});
  EXPECT_FALSE(again[0].ok());
}

TEST_F(RedisInboxTest, AClosedInboxAnswersEveryPushAndReadWithAnError) {
  auto inbox = open();
  ASSERT_TRUE(inbox);
  server_.reset();  // Redis is gone: no answer within the command timeout
  auto a = push(*inbox, {ev(tenant_, "z1", "{}")});
  ASSERT_FALSE(a[0].ok());
  std::promise<bool> pr;
  inbox->read({{p_, ""}}, 10, poster_,
              [&](Result<std::vector<InboxRead>> r) { pr.set_value(r.ok()); });
  EXPECT_FALSE(pr.get_future().get());
}

TEST_F(RedisInboxTest, APushRingsItsPartitionAndTheOwnerTakesOnlyItsOwnRings) {
  auto inbox = open();
  ASSERT_TRUE(inbox);
  auto take = [&](std::vector<Partition> mine) {
    std::promise<Result<std::vector<Partition>>> pr;
    inbox->take_rung(std::move(mine), poster_,
                     [&](Result<std::vector<Partition>> r) { pr.set_value(std::move(r)); });
    auto r = pr.get_future().get();
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : std::vector<Partition>{};
  };
  EXPECT_TRUE(take({p_}).empty()) << "nothing was pushed";
  ASSERT_EQ(push(*inbox, {ev(tenant_, "r1", "{}")})[0]->kind, InboxAnswer::Kind::kQueued);
  // A refusal writes nothing and rings nothing.
  const Partition other = partition_of("nobody-here");
  ASSERT_EQ(push(*inbox, {ev("nobody-here", "r2", "{}")})[0]->kind,
            InboxAnswer::Kind::kUnknownTenant);
  // The ring is sent after the push's script answered: it is there once the push answered.
  EXPECT_EQ(server_->cmd({"SISMEMBER", "{rc}:ring", std::to_string(p_)}).integer, 1);
  EXPECT_EQ(server_->cmd({"SISMEMBER", "{rc}:ring", std::to_string(other)}).integer, 0);
  // Another node's partitions: its ring stays for its owner.
  const Partition q = static_cast<Partition>((p_ + 7) % kPartitions);
  ASSERT_FALSE(server_->cmd({"SADD", "{rc}:ring", std::to_string(q)}).is_error());
  auto got = take({p_, static_cast<Partition>((p_ + 1) % kPartitions)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], p_);
  EXPECT_TRUE(take({p_}).empty()) << "a ring is taken once";
  EXPECT_EQ(server_->cmd({"SISMEMBER", "{rc}:ring", std::to_string(q)}).integer, 1);
}

}  // namespace
}  // namespace ringcast::storage::test

namespace ringcast::storage::test {
namespace {

// docs/tracing.md: a producer's traceparent travels with an event queued for its partition's
// owner (entry field c) and comes back whole; an event without one comes back without one.
TEST_F(RedisInboxTest, AProducersTraceContextTravelsWithTheQueuedEvent) {
  auto inbox = open();
  ASSERT_TRUE(inbox);
  EventInput traced = ev(tenant_, "t1", "{}");
  traced.parent = *parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  traced.ordering_key = "k1";
  const EventInput plain = ev(tenant_, "t2", "{}");
  auto a = push(*inbox, {traced, plain});
  ASSERT_EQ(a.size(), 2u);
  for (const auto& r : a) {
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->kind, InboxAnswer::Kind::kQueued);
  }
  auto got = read(*inbox, {{p_, ""}}, 10);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].entries.size(), 2u);
  EXPECT_EQ(got[0].entries[0].event.id, "t1");
  EXPECT_EQ(got[0].entries[0].event.parent, traced.parent);
  EXPECT_EQ(got[0].entries[0].event.ordering_key, "k1");
  EXPECT_EQ(got[0].entries[1].event.id, "t2");
  EXPECT_FALSE(got[0].entries[1].event.parent.valid());
}

}  // namespace
}  // namespace ringcast::storage::test
