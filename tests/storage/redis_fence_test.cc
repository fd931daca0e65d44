// RedisStore's fence (docs/cluster.md "Fencing") on one real redis-server and on a real 3-primary
// Redis Cluster (where the lease {rc:p}:own and the partition's data must share a slot, or the
// script would fail with CROSSSLOT): with RedisStoreOptions::node_id set, a write of partition p
// lands only while the lease the test writes by hand (HSET {rc:p}:own node N epoch E, as the lease
// manager would) holds exactly {node_id, the epoch set for p}; otherwise nothing of p is written,
// the rest of the batch is, the batch becomes durable, and fenced(p, epoch) / on_fenced /
// fenced_writes() say so. An epoch of 0 is refused without a round trip. Without node_id nothing is
// checked.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/keys.h"
#include "storage/codec.h"
#include "storage/redis_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"

namespace ringcast::storage::test {
namespace {

using ringcast::test::SyncReply;

enum class Where { kServer, kCluster };

std::string where_name(const ::testing::TestParamInfo<Where>& info) {
  return info.param == Where::kServer ? "Redis" : "RedisCluster";
}

// What on_fenced saw, and on which thread.
struct FenceLog {
  std::mutex mu;
  std::vector<std::pair<Partition, uint64_t>> calls;
  std::vector<std::string> threads;
};

class RedisFenceTest : public ::testing::TestWithParam<Where> {
 protected:
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!ringcast::test::RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
    if (!dir_) {
      dir_ = new ringcast::test::TempDir("ringcast-redis-fence");
      for (const char* d : {"standalone", "cluster"})
        ASSERT_EQ(::mkdir(dir_->file(d).c_str(), 0755), 0);
    }
    if (GetParam() == Where::kServer) {
      if (!server_)
        server_ = ringcast::test::RedisServer::start(dir_->file("standalone")).release();
      ASSERT_FALSE(server_->cmd({"FLUSHALL"}).is_error());
    } else {
      if (!cluster_)
        cluster_ = ringcast::test::RedisCluster::start(dir_->file("cluster"), 3).release();
      for (size_t i = 0; i < cluster_->size(); ++i)
        ASSERT_FALSE(cluster_->node(i).cmd({"FLUSHALL"}).is_error());
    }
    // p and q: two tenants in different partitions, on different primaries in the cluster, so
    // that one batch really spans two nodes there.
    p_ = partition_of(tp_);
    for (int i = 0; i < 10'000 && tq_.empty(); ++i) {
      std::string t = "tenant-" + std::to_string(i);
      if (partition_of(t) == p_) continue;
      if (cluster_ && GetParam() == Where::kCluster &&
          owner(cluster::own_key("rc", partition_of(t))) == owner(cluster::own_key("rc", p_)))
        continue;
      tq_ = t;
    }
    ASSERT_FALSE(tq_.empty());
    q_ = partition_of(tq_);
  }

  RedisStoreOptions options(std::string node_id) {
    RedisStoreOptions o;
    o.cluster = GetParam() == Where::kCluster;
    o.servers = o.cluster ? cluster_->addresses() : std::vector<std::string>{server_->address()};
    o.node_id = std::move(node_id);
    o.on_fenced = [log = &log_](Partition p, uint64_t epoch) {
      char name[32] = {};
      ::pthread_getname_np(::pthread_self(), name, sizeof name);
      std::lock_guard lk(log->mu);
      log->calls.emplace_back(p, epoch);
      log->threads.emplace_back(name);
    };
    return o;
  }
  std::unique_ptr<RedisStore> open(std::string node_id) {
    auto r = RedisStore::open(options(std::move(node_id)));
    if (!r) ADD_FAILURE() << "open failed: " << r.error().message;
    return r ? std::move(*r) : nullptr;
  }

  int owner(const std::string& key) const { return cluster_->owner_of(cluster_->key_slot(key)); }
  // The server holding `key` (in the cluster: the primary of its slot).
  ringcast::test::RedisServer& node_of(const std::string& key) {
    if (GetParam() == Where::kServer) return *server_;
    const int o = owner(key);
    EXPECT_GE(o, 0);
    return cluster_->node(static_cast<size_t>(o < 0 ? 0 : o));
  }
  // A raw command about `key` (args[1]), on its node.
  SyncReply raw(const std::vector<std::string>& args) { return node_of(args.at(1)).cmd(args); }

  // What the lease manager would write: {rc:p}:own = {node, epoch}.
  void set_lease(Partition p, const std::string& node, const std::string& epoch) {
    auto r = raw({"HSET", cluster::own_key("rc", p), "node", node, "epoch", epoch});
    ASSERT_FALSE(r.is_error()) << r.str;
  }
  // Every key of partition p (KEYS on the node of its slot).
  std::vector<std::string> keys_of(Partition p) {
    const std::string own = cluster::own_key("rc", p);
    auto r = node_of(own).cmd({"KEYS", cluster::partition_tag("rc", p) + ":*"});
    EXPECT_EQ(r.type, SyncReply::Type::kArray);
    std::vector<std::string> out;
    for (const auto& e : r.elements) out.push_back(e.str);
    std::sort(out.begin(), out.end());
    return out;
  }

  // A batch of everything a shard writes, for `tenant` (ids from `seq` on).
  Mutations batch_of(const std::string& tenant, const std::string& event_id, uint64_t seq) {
    Mutations m;
    Endpoint ep = make_endpoint(tenant, seq);
    Event ev = make_event(tenant, event_id, seq + 1, "{\"n\":1}");
    Delivery d = make_delivery(ev, ep.id, seq + 2);
    m.endpoints.push_back(ep);
    m.events.push_back(ev);
    m.deliveries.push_back(put_new(d, tenant));
    m.attempts.push_back(make_attempt(d.id, 1));
    m.tenants.push_back(Tenant{tenant, true, {}, kT0, "", false, {}});
    m.notifications.push_back(Notification{make_id(partition_of(tenant), seq + 3), tenant, ep.id,
                                           "endpoint_disabled",
                                           ErrorCode::of(ErrorCode::Kind::kGone), kT0, "410"});
    return m;
  }
  static Mutations merge(Mutations a, const Mutations& b) {
    auto add = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    add(a.endpoints, b.endpoints);
    add(a.events, b.events);
    add(a.deliveries, b.deliveries);
    add(a.attempts, b.attempts);
    add(a.tenants, b.tenants);
    add(a.notifications, b.notifications);
    return a;
  }

  // What the store's reads and Redis itself show of batch_of(tenant, event_id, seq).
  void expect_written(RedisStore& s, const std::string& tenant, const std::string& event_id,
                      uint64_t seq) {
    const Partition p = partition_of(tenant);
    auto ev = s.load_event(make_id(p, seq + 1));
    ASSERT_TRUE(ev.ok());
    EXPECT_TRUE(ev->has_value());
    auto key = s.find_event_key(tenant, event_id);
    ASSERT_TRUE(key.ok());
    EXPECT_TRUE(key->has_value());
    auto d = s.get_delivery(make_id(p, seq + 2));
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(d->has_value());
    EXPECT_EQ((*d)->attempts.size(), 1u);
    auto notes = s.list_notifications(tenant, 10);
    ASSERT_TRUE(notes.ok());
    EXPECT_FALSE(notes->empty());
    const std::string ev_key = cluster::partition_key("rc", p, "ev");
    std::string field;
    put_be64(field, make_id(p, seq + 1));
    EXPECT_EQ(raw({"HEXISTS", ev_key, field}).integer, 1) << "raw: the event is in " << ev_key;
  }
  void expect_nothing_of(RedisStore& s, const std::string& tenant, const std::string& event_id,
                         uint64_t seq) {
    const Partition p = partition_of(tenant);
    auto ev = s.load_event(make_id(p, seq + 1));
    ASSERT_TRUE(ev.ok());
    EXPECT_FALSE(ev->has_value());
    auto key = s.find_event_key(tenant, event_id);
    ASSERT_TRUE(key.ok());
    EXPECT_FALSE(key->has_value());
    auto d = s.get_delivery(make_id(p, seq + 2));
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->has_value());
    auto recent = s.recent_deliveries(tenant, 10);
    ASSERT_TRUE(recent.ok());
    EXPECT_TRUE(recent->empty());
    auto notes = s.list_notifications(tenant, 10);
    ASSERT_TRUE(notes.ok());
    EXPECT_TRUE(notes->empty());
    std::string field;
    put_be64(field, make_id(p, seq + 1));
    EXPECT_EQ(raw({"HEXISTS", cluster::partition_key("rc", p, "ev"), field}).integer, 0);
    field.clear();
    put_be64(field, make_id(p, seq + 2));
    EXPECT_EQ(raw({"HEXISTS", cluster::partition_key("rc", p, "dl"), field}).integer, 0);
    EXPECT_EQ(raw({"HEXISTS", cluster::partition_key("rc", p, "tn"), tenant}).integer, 0);
  }
  size_t hook_calls() {
    std::lock_guard lk(log_.mu);
    return log_.calls.size();
  }

  const std::string tp_ = "acme";
  std::string tq_;
  Partition p_ = 0;
  Partition q_ = 0;
  FenceLog log_;
  static inline ringcast::test::TempDir* dir_ = nullptr;
  static inline ringcast::test::RedisServer* server_ = nullptr;
  static inline ringcast::test::RedisCluster* cluster_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Backends, RedisFenceTest,
                         ::testing::Values(Where::kServer, Where::kCluster), where_name);

// (a) The lease holds {node_id, epoch}: the write lands, nothing is fenced.
TEST_P(RedisFenceTest, AWriteAtTheLeaseEpochLands) {
  set_lease(p_, "node-a", "7");
  auto s = open("node-a");
  ASSERT_NE(s, nullptr);
  s->set_partition_epoch(p_, 7);
  auto w = s->write(batch_of(tp_, "evt-1", 10));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  EXPECT_FALSE(s->failed().has_value());
  expect_written(*s, tp_, "evt-1", 10);
  EXPECT_FALSE(s->fenced(p_, 7));
  EXPECT_EQ(s->fenced_writes(), 0u);
  EXPECT_EQ(hook_calls(), 0u);
  // The store only reads the lease.
  auto lease = raw({"HGETALL", cluster::own_key("rc", p_)});
  ASSERT_EQ(lease.elements.size(), 4u);
}

// (b) The lease moved (to another node, then to another epoch of this node): one batch with
// records of p and of q (whose lease is right) writes q's, nothing of p, and is durable; the
// store goes on (not failed), fenced(p, 7) is true by the time durable_seq passes the batch,
// on_fenced fires once for (p, 7) on the store's thread.
TEST_P(RedisFenceTest, AFencedPartitionWritesNothingAndTheRestOfTheBatchLands) {
  set_lease(p_, "node-a", "7");
  set_lease(q_, "node-a", "3");
  auto s = open("node-a");
  ASSERT_NE(s, nullptr);
  s->set_partition_epoch(p_, 7);
  s->set_partition_epoch(q_, 3);
  const std::vector<std::string> p_keys_before = keys_of(p_);
  EXPECT_EQ(p_keys_before, std::vector<std::string>{cluster::own_key("rc", p_)});

  struct Case {
    const char* node;
    const char* epoch;
  };
  const Case cases[] = {{"node-b", "7"}, {"node-a", "8"}};
  uint64_t seq = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("lease moved to ") + c.node + " at epoch " + c.epoch);
    set_lease(p_, c.node, c.epoch);
    const std::string pid = "evt-p-" + std::to_string(seq), qid = "evt-q-" + std::to_string(seq);
    auto w = s->write(merge(batch_of(tp_, pid, seq), batch_of(tq_, qid, seq)));
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
    // Right after durable_seq passed the batch, with no other wait.
    EXPECT_TRUE(s->fenced(p_, 7));
    EXPECT_FALSE(s->fenced(q_, 3));
    EXPECT_GE(s->durable_seq(), *w);
    EXPECT_FALSE(s->failed().has_value()) << s->failed()->message;
    expect_nothing_of(*s, tp_, pid, seq);
    expect_written(*s, tq_, qid, seq);
    // Raw: p holds its lease (as the test set it) and nothing else.
    EXPECT_EQ(keys_of(p_), p_keys_before);
    auto lease = raw({"HMGET", cluster::own_key("rc", p_), "node", "epoch"});
    ASSERT_EQ(lease.elements.size(), 2u);
    EXPECT_EQ(lease.elements[0].str, c.node);
    EXPECT_EQ(lease.elements[1].str, c.epoch);
    EXPECT_EQ(raw({"EXISTS", cluster::partition_key("rc", p_, "seq")}).integer, 0);
    EXPECT_EQ(raw({"EXISTS", cluster::partition_key("rc", p_, "cr")}).integer, 0);
    EXPECT_EQ(raw({"EXISTS", cluster::partition_key("rc", q_, "cr")}).integer, 1);
    seq += 100;
  }
  EXPECT_EQ(s->fenced_writes(), 2u);
  EXPECT_FALSE(s->fenced(p_, 8)) << "only the epoch that was refused";
  {
    std::lock_guard lk(log_.mu);
    ASSERT_EQ(log_.calls.size(), 1u) << "once per (partition, epoch)";
    EXPECT_EQ(log_.calls[0], std::make_pair(p_, uint64_t{7}));
    EXPECT_EQ(log_.threads[0], "rc-redis-store");
  }
  // The store still takes writes: p again once its lease is back at the epoch it is set to.
  set_lease(p_, "node-a", "9");
  s->set_partition_epoch(p_, 9);
  auto w = s->write(batch_of(tp_, "evt-p-back", 900));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  expect_written(*s, tp_, "evt-p-back", 900);
  EXPECT_FALSE(s->fenced(p_, 9));
  EXPECT_TRUE(s->fenced(p_, 7)) << "an earlier refusal stays recorded";
  EXPECT_EQ(s->fenced_writes(), 2u);
}

// (c) Fencing on and p at epoch 0 (never set, or cleared): refused without a round trip. The
// lease says epoch "0" for this very node, which the script would accept: only a refusal
// before sending keeps p empty.
TEST_P(RedisFenceTest, EpochZeroIsFencedWithoutARoundTrip) {
  set_lease(p_, "node-a", "0");
  set_lease(q_, "node-a", "3");
  auto s = open("node-a");
  ASSERT_NE(s, nullptr);
  s->set_partition_epoch(q_, 3);
  // Never set.
  auto w = s->write(merge(batch_of(tp_, "evt-p", 10), batch_of(tq_, "evt-q", 10)));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  EXPECT_TRUE(s->fenced(p_, 0));
  EXPECT_FALSE(s->fenced(q_, 3));
  EXPECT_FALSE(s->failed().has_value());
  expect_nothing_of(*s, tp_, "evt-p", 10);
  expect_written(*s, tq_, "evt-q", 10);
  EXPECT_EQ(s->fenced_writes(), 1u);
  // Set, then cleared.
  s->set_partition_epoch(p_, 5);
  s->set_partition_epoch(p_, 0);
  w = s->write(batch_of(tp_, "evt-p2", 20));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  expect_nothing_of(*s, tp_, "evt-p2", 20);
  EXPECT_FALSE(s->fenced(p_, 5));
  EXPECT_EQ(s->fenced_writes(), 2u);
  EXPECT_EQ(keys_of(p_), std::vector<std::string>{cluster::own_key("rc", p_)});
  std::lock_guard lk(log_.mu);
  ASSERT_EQ(log_.calls.size(), 1u);
  EXPECT_EQ(log_.calls[0], std::make_pair(p_, uint64_t{0}));
}

// (d) No node_id: no check at all, whatever the lease says (or without one).
TEST_P(RedisFenceTest, WithoutANodeIdNothingIsChecked) {
  set_lease(p_, "node-b", "7");  // someone else's lease; q has none
  auto s = open("");
  ASSERT_NE(s, nullptr);
  s->set_partition_epoch(p_, 3);  // ignored
  auto w = s->write(merge(batch_of(tp_, "evt-p", 10), batch_of(tq_, "evt-q", 10)));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  EXPECT_FALSE(s->failed().has_value());
  expect_written(*s, tp_, "evt-p", 10);
  expect_written(*s, tq_, "evt-q", 10);
  EXPECT_FALSE(s->fenced(p_, 3));
  EXPECT_FALSE(s->fenced(q_, 0));
  EXPECT_EQ(s->fenced_writes(), 0u);
  EXPECT_EQ(hook_calls(), 0u);
  EXPECT_EQ(raw({"EXISTS", cluster::own_key("rc", q_)}).integer, 0) << "the store makes no lease";
}

// Everything but FENCED stays fatal with fencing on: a CONFLICT behind a valid lease.
TEST_P(RedisFenceTest, AConflictBehindAValidLeaseIsStillFatal) {
  set_lease(p_, "node-a", "7");
  auto s = open("node-a");
  ASSERT_NE(s, nullptr);
  s->set_partition_epoch(p_, 7);
  Mutations m;
  m.events.push_back(make_event(tp_, "evt-1", 2, "{\"a\":1}"));
  auto w = s->write(m);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  Mutations other;
  other.events.push_back(make_event(tp_, "evt-1", 3, "{\"a\":2}"));  // same id, other event
  w = s->write(other);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(s->wait_durable(*w, seconds(10)));
  auto failed = s->failed();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->code, Errc::kConflict);
  EXPECT_FALSE(s->fenced(p_, 7));
  EXPECT_EQ(s->fenced_writes(), 0u);
}

// recover(p) turns leases back at p's epoch; when that write is fenced it answers "fenced" and
// the delivery stays as stored.
TEST_P(RedisFenceTest, RecoveryOfAFencedPartitionFails) {
  set_lease(p_, "node-a", "7");
  auto s = open("node-a");
  ASSERT_NE(s, nullptr);
  s->set_partition_epoch(p_, 7);
  Event ev = make_event(tp_, "evt-lease", 2, "{}");
  Delivery d = make_delivery(ev, make_id(p_, 1), 3, DeliveryStatus::kInFlight);
  Mutations m;
  m.events.push_back(ev);
  m.deliveries.push_back(put_new(d, tp_));
  auto w = s->write(m);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(s->wait_durable(*w, seconds(10)));
  set_lease(p_, "node-b", "8");
  CollectingVisitor v;
  auto st = s->recover(p_, kT0 + hours(1), v);
  ASSERT_FALSE(st.ok());
  EXPECT_STREQ(st.error().reason_or_code(), "fenced");
  EXPECT_TRUE(s->fenced(p_, 7));
  auto det = s->get_delivery(d.id);
  ASSERT_TRUE(det.ok() && det->has_value());
  EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kInFlight);
  EXPECT_TRUE((*det)->attempts.empty());
  EXPECT_FALSE(s->failed().has_value());
  // Back at the lease's epoch, recovery turns the lease back.
  set_lease(p_, "node-a", "9");
  s->set_partition_epoch(p_, 9);
  CollectingVisitor again;
  st = s->recover(p_, kT0 + hours(1), again);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->leases_expired, 1u);
}

}  // namespace
}  // namespace ringcast::storage::test
