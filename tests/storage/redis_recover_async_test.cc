// RedisStore::recover_async (the Store contract fits a networked store; a shard taking a partition
// over is never blocked on the network) on a real redis-server: the call returns at once even while
// Redis does not answer (SIGSTOP), the answer comes through the caller's Poster once Redis is back,
// with what recover() would have visited (endpoints, tenants, non-terminal deliveries, an in-flight
// one turned back to pending after its lease_expired attempt); after cancel_recovers() nothing is
// posted any more; a store destroyed with loads queued ends.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "storage/redis_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::storage::test {
namespace {

// Collects posted work; the test thread runs it (the shard's loop in miniature).
class QueuePoster final : public Poster {
 public:
  void post(std::function<void()> fn) override {
    std::lock_guard lk(mu_);
    q_.push_back(std::move(fn));
    cv_.notify_all();
  }
  // Runs what was posted; waits up to `wait` for at least one item. How many ran.
  size_t run(std::chrono::milliseconds wait) {
    std::deque<std::function<void()>> got;
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, wait, [&] { return !q_.empty(); });
      got.swap(q_);
    }
    for (auto& f : got) f();
    return got.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
};

class RedisRecoverAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ringcast::test::RedisServer::available())
      RINGCAST_SKIP_MISSING() << "redis-server is not installed (bash tools/install-deps.sh)";
    server_ = ringcast::test::RedisServer::start(dir_.path());
    RedisStoreOptions o;
    o.servers = {server_->address()};
    o.command_timeout = seconds(5);
    auto s = RedisStore::open(o);
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
    // One endpoint, its tenant, three deliveries: pending, in flight (its lease turns back),
    // delivered (terminal: not recovered).
    Mutations m;
    ev_ = make_event(tenant_, "e1", 1, R"({"x":1})");
    m.events.push_back(ev_);
    m.endpoints.push_back(make_endpoint(tenant_, 2));
    Tenant t;
    t.name = tenant_;
    t.updated_at = kT0;
    m.tenants.push_back(t);
    Delivery a = make_delivery(ev_, m.endpoints[0].id, 3);
    Delivery b = make_delivery(ev_, m.endpoints[0].id, 4, DeliveryStatus::kInFlight);
    Delivery c = make_delivery(ev_, m.endpoints[0].id, 5, DeliveryStatus::kDelivered);
    for (const Delivery& d : {a, b, c}) m.deliveries.push_back(put_new(d, tenant_));
    inflight_ = b.id;
    auto seq = store_->write(m);
    ASSERT_TRUE(seq.ok());
    ASSERT_TRUE(store_->wait_durable(*seq, seconds(5)));
  }

  ringcast::test::TempDir dir_{"ringcast-redis-recover-async"};
  std::unique_ptr<ringcast::test::RedisServer> server_;
  std::unique_ptr<RedisStore> store_;
  std::string tenant_ = "acme";
  Event ev_;
  DeliveryId inflight_ = 0;
};

TEST_F(RedisRecoverAsyncTest, ReturnsAtOnceWhileRedisIsStoppedAndAnswersOnceItIsBack) {
  QueuePoster poster;
  std::optional<Result<RecoveredPartition>> got;
  server_->pause();  // Redis answers nothing now
  const auto t0 = std::chrono::steady_clock::now();
  store_->recover_async(partition_of(tenant_), kT0 + hours(1), poster,
                        [&](Result<RecoveredPartition> r) { got = std::move(r); });
  const auto took = std::chrono::steady_clock::now() - t0;
  // The caller is not held while the load waits on Redis (5 s command timeout).
  EXPECT_LT(took, std::chrono::seconds(1));
  EXPECT_EQ(poster.run(std::chrono::milliseconds(300)), 0u) << "answered while Redis is stopped";
  EXPECT_FALSE(got.has_value());
  server_->resume();
  for (int i = 0; i < 50 && !got; ++i) poster.run(std::chrono::milliseconds(100));
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->error().message;
  const RecoveredPartition& r = **got;
  ASSERT_EQ(r.endpoints.size(), 1u);
  EXPECT_EQ(r.endpoints[0].tenant, tenant_);
  ASSERT_EQ(r.tenants.size(), 1u);
  EXPECT_EQ(r.tenants[0].name, tenant_);
  ASSERT_EQ(r.deliveries.size(), 2u);  // the delivered one is terminal
  for (const Delivery& d : r.deliveries) EXPECT_EQ(d.status, DeliveryStatus::kPending);
  EXPECT_EQ(r.stats.endpoints, 1u);
  EXPECT_EQ(r.stats.leases_expired, 1u);
  EXPECT_GT(r.stats.next_sequence, 5u);
  // The in-flight delivery's lease_expired attempt is stored (numbered after its 2 attempts).
  auto detail = store_->get_delivery(inflight_);
  ASSERT_TRUE(detail.ok() && detail->has_value());
  ASSERT_FALSE((*detail)->attempts.empty());
  EXPECT_EQ((*detail)->attempts.back().code.kind, ErrorCode::Kind::kLeaseExpired);
}

TEST_F(RedisRecoverAsyncTest, AfterCancelNothingIsPostedAndTheStoreClosesWithLoadsQueued) {
  QueuePoster poster;
  int answers = 0;
  server_->pause();
  for (int i = 0; i < 3; ++i)
    store_->recover_async(partition_of(tenant_), kT0, poster,
                          [&](Result<RecoveredPartition>) { ++answers; });
  store_->cancel_recovers();
  // Asked after the cancel: dropped too.
  store_->recover_async(partition_of(tenant_), kT0, poster,
                        [&](Result<RecoveredPartition>) { ++answers; });
  server_->resume();
  poster.run(std::chrono::milliseconds(1500));
  EXPECT_EQ(answers, 0);
  store_.reset();  // joins the loader (its running load ends on its own)
  EXPECT_EQ(poster.run(std::chrono::milliseconds(100)), 0u);
}

// The active set is read a page at a time (1024): a partition with more pending deliveries than
// a page recovers every one of them, once, in id order.
TEST_F(RedisRecoverAsyncTest, RecoversMorePendingDeliveriesThanAPageHoldsInIdOrder) {
  constexpr uint64_t kMore = 2500;
  for (uint64_t from = 0; from < kMore; from += 500) {
    Mutations m;
    for (uint64_t i = from; i < from + 500; ++i)
      m.deliveries.push_back(
          put_new(make_delivery(ev_, make_id(partition_of(tenant_), 2), 100 + i), tenant_));
    auto w = store_->write(m);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(store_->wait_durable(*w, seconds(10)));
  }
  QueuePoster poster;
  std::optional<Result<RecoveredPartition>> got;
  store_->recover_async(partition_of(tenant_), kT0 + hours(1), poster,
                        [&](Result<RecoveredPartition> r) { got = std::move(r); });
  for (int i = 0; i < 100 && !got; ++i) poster.run(std::chrono::milliseconds(100));
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->error().message;
  const auto& ds = (*got)->deliveries;
  EXPECT_EQ(ds.size(), kMore + 2);  // and the two of SetUp that are not terminal
  EXPECT_EQ((*got)->stats.pending, kMore + 2);
  for (size_t i = 1; i < ds.size(); ++i) EXPECT_LT(ds[i - 1].id, ds[i].id) << i;
}

}  // namespace
}  // namespace ringcast::storage::test
