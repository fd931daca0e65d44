// RedisStore's created deliveries (docs/cluster.md "Created deliveries") on a real
// redis-server: a batch's new deliveries of a partition are one T cr member and not T act
// members; a delivery whose first attempt ends it touches T act not at all, and the member goes
// once none of its ids is only created; a retry's wait puts the delivery in T act; a restart
// (another store, as a new owner) finds the created-only deliveries from T cr, turns back their
// leases, and removes the members nothing is left in.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "storage/codec.h"
#include "storage/redis_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {
namespace {

using ringcast::test::RedisServer;
using ringcast::test::SyncReply;
using ringcast::test::TempDir;

class RedisCreatedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
    server_ = RedisServer::start(dir_.path());
    ASSERT_NE(server_, nullptr);
  }
  std::unique_ptr<RedisStore> open() {
    RedisStoreOptions o;
    o.servers = {server_->address()};
    auto r = RedisStore::open(std::move(o));
    if (!r) ADD_FAILURE() << "open failed: " << r.error().message;
    return r ? std::move(*r) : nullptr;
  }
  std::string key(const std::string& suffix) const {
    return "{rc:" + std::to_string(p_) + "}:" + suffix;
  }
  long long zcard(const std::string& suffix) {
    return server_->cmd({"ZCARD", key(suffix)}).integer;
  }
  bool in_act(DeliveryId id) {
    return server_->cmd({"ZSCORE", key("act"), be64s(id)}).type == SyncReply::Type::kString;
  }
  // One event with n new deliveries (created, pending), as intake writes them.
  std::vector<Delivery> create(RedisStore& s, uint64_t event_seq, uint64_t n) {
    auto [m, ds] = created_batch(tenant_, event_seq, n, make_id(p_, 1));
    write_durable(s, m);
    return ds;
  }
  void put(RedisStore& s, std::vector<Delivery>& ds, size_t from, size_t to, DeliveryStatus st,
           uint16_t attempts) {
    Mutations m;
    for (size_t i = from; i < to; ++i) {
      ds[i].status = st;
      ds[i].attempts = ds[i].fast_attempts = static_cast<uint8_t>(attempts);
      m.deliveries.push_back(put_update(ds[i]));
      if (st != DeliveryStatus::kInFlight)
        m.attempts.push_back(make_attempt(
            ds[i].id, attempts, is_terminal(st) ? Outcome::kSuccess : Outcome::kRetryable));
    }
    write_durable(s, m);
  }
  std::set<DeliveryId> recover_ids(RedisStore& s, uint64_t* leases = nullptr) {
    return recovered_ids(s, p_, leases);
  }

  TempDir dir_{"ringcast-redis-created"};
  std::unique_ptr<RedisServer> server_;
  const std::string tenant_ = "acme";
  const Partition p_ = partition_of("acme");
};

TEST_F(RedisCreatedTest, AFirstAttemptThatEndsADeliveryNeverTouchesTheActiveSet) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  std::vector<Delivery> ds = create(*s, 100, 4);
  EXPECT_EQ(zcard("act"), 0) << "created deliveries are not T act members";
  EXPECT_EQ(zcard("cr"), 1) << "one member for the batch's four";
  put(*s, ds, 0, 4, DeliveryStatus::kInFlight, 1);  // leased: still only created
  EXPECT_EQ(zcard("act"), 0);
  put(*s, ds, 0, 3, DeliveryStatus::kDelivered, 1);
  EXPECT_EQ(zcard("cr"), 1) << "one of its ids is still only created";
  put(*s, ds, 3, 4, DeliveryStatus::kPending, 1);  // its first attempt failed: a retry's wait
  EXPECT_TRUE(in_act(ds[3].id));
  EXPECT_EQ(zcard("cr"), 0) << "no id of the member is only created any more";
  put(*s, ds, 3, 4, DeliveryStatus::kDelivered, 2);
  EXPECT_EQ(zcard("act"), 0);
  auto det = s->get_delivery(ds[1].id);
  ASSERT_TRUE(det.ok() && det->has_value());
  EXPECT_EQ((*det)->delivery.status, DeliveryStatus::kDelivered);
}

TEST_F(RedisCreatedTest, ANewOwnerFindsTheCreatedOnesTurnsBackTheirLeasesAndDropsDeadMembers) {
  std::set<DeliveryId> expected;
  DeliveryId leased = 0;
  {
    auto s = open();
    ASSERT_NE(s, nullptr);
    std::vector<Delivery> a = create(*s, 100, 5);  // two end, one waits for a retry, two created
    put(*s, a, 0, 2, DeliveryStatus::kDelivered, 1);
    put(*s, a, 2, 3, DeliveryStatus::kPending, 1);
    std::vector<Delivery> b = create(*s, 200, 3);  // all end: its member goes
    put(*s, b, 0, 3, DeliveryStatus::kDelivered, 1);
    std::vector<Delivery> c = create(*s, 300, 2);  // one in flight at the "crash"
    put(*s, c, 0, 1, DeliveryStatus::kInFlight, 1);
    leased = c[0].id;
    for (size_t i = 2; i < 5; ++i) expected.insert(a[i].id);
    for (const Delivery& d : c) expected.insert(d.id);
    EXPECT_EQ(zcard("cr"), 2);
    EXPECT_EQ(zcard("act"), 1);
    // A member left behind whose ids all ended (as a writer that died between the end and the
    // member's removal would leave it): recovery drops it.
    std::vector<Delivery> d = create(*s, 400, 1);
    put(*s, d, 0, 1, DeliveryStatus::kDelivered, 1);
    ASSERT_FALSE(server_->cmd({"ZADD", key("cr"), "0", be64s(d[0].id)}).is_error());
  }
  auto s = open();  // another store: what a new owner of the partition starts with
  ASSERT_NE(s, nullptr);
  uint64_t leases = 0;
  EXPECT_EQ(recover_ids(*s, &leases), expected);
  EXPECT_EQ(leases, 1u);
  EXPECT_TRUE(in_act(leased)) << "its lease turned back: a retry's wait";
  EXPECT_EQ(zcard("cr"), 2) << "the member nothing was left in is gone";
  auto det = s->get_delivery(leased);
  ASSERT_TRUE(det.ok() && det->has_value());
  ASSERT_FALSE((*det)->attempts.empty());
  EXPECT_EQ((*det)->attempts.back().code.kind, ErrorCode::Kind::kLeaseExpired);
  // What the new owner writes next keeps the same rule: an end of a created one leaves T act
  // alone and empties its member.
  std::vector<Delivery> rest;
  for (DeliveryId id : expected) {
    if (id == leased || in_act(id)) continue;
    auto got = s->get_delivery(id);
    ASSERT_TRUE(got.ok() && got->has_value());
    rest.push_back((*got)->delivery);
  }
  ASSERT_EQ(rest.size(), 3u);
  const long long act = zcard("act");
  put(*s, rest, 0, rest.size(), DeliveryStatus::kDelivered, 1);
  EXPECT_EQ(zcard("act"), act);
  EXPECT_EQ(zcard("cr"), 0);
  auto again = open();
  EXPECT_EQ(recover_ids(*again).size(), 2u) << "the two in T act";
}

}  // namespace
}  // namespace ringcast::storage::test
