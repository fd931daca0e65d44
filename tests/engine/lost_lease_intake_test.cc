// Cluster mode's intake when a partition's ownership is lost in the middle of a turn
// (engine/shard.cc, forget_partitions): an event taken in at epoch e is answered only once its
// write is durable and not fenced — the shard asks the store fenced(p, e). RedisStore writes a
// partition's part at the epoch set for it when write() is called and records the fence under
// that epoch; a loss that set the store's epoch to 0 between the take-in and the turn's commit
// made the write go out at epoch 0 (refused without a round trip, recorded as fenced at 0), so
// fenced(p, e) said no and the event was acknowledged without being written (SPEC R12.5: an
// accepted event is never lost). An inbox drain then removed the queued entry: the cluster run
// showed it as acknowledged events missing after a node's pause. Here a store plays RedisStore's
// fencing rule and the test plays the lease manager.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/build.h"
#include "engine/config.h"
#include "engine/engine_impl.h"
#include "engine/shard.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/locked_store.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ringcast {
namespace {

using test::await;
using BatchResults = std::vector<Result<SubmitResult>>;
using namespace std::chrono_literals;

// RedisStore's fencing rule for the test's one partition: a write goes out at the epoch set
// for the partition when write() is called; it is refused (nothing written, recorded as fenced
// at that epoch) when that epoch is 0 or the lease in the shared store is not held at it.
class LeaseFencedStore final : public test::LockedStore {
 public:
  void set_epoch(uint64_t e) {
    std::lock_guard lock(mu_);
    set_ = e;
  }
  void hold_lease(uint64_t e) {
    std::lock_guard lock(mu_);
    lease_ = e;
  }
  bool fenced(uint64_t e) const {
    std::lock_guard lock(mu_);
    return fenced_.count(e) > 0;
  }
  Result<uint64_t> write(const Mutations& m) override {
    {
      std::lock_guard lock(mu_);
      if (set_ == 0 || set_ != lease_) {
        fenced_.insert(set_);
        return LockedStore::write(Mutations{});  // durable like any batch: nothing of it
      }
    }
    return LockedStore::write(m);
  }

 private:
  mutable std::mutex mu_;
  uint64_t set_ = 0, lease_ = 0;
  std::set<uint64_t> fenced_;
};

TEST(EngineLostLease, AnEventTakenInJustBeforeItsPartitionIsLostIsNeverAcknowledgedUnwritten) {
  test::TempDir dir("ringcast-lost-lease");
  test::SinkProcess sink = test::SinkProcess::start({}, dir.path());
  LeaseFencedStore store;
  const std::string tenant = "acme";
  const Partition part = partition_of(tenant);
  std::atomic<uint64_t> held{0};  // the epoch this node's lease manager holds `part` at

  engine::PartitionOwnership ownership;
  ownership.valid = [&](Partition p, uint64_t e, MonoTime) { return p == part && e == held; };
  ownership.set_epoch = [&](Partition p, uint64_t e) {
    if (p == part) store.set_epoch(e);
  };
  ownership.fenced = [&](Partition p, uint64_t e) { return p == part && store.fenced(e); };
  auto started = engine::EngineImpl::start(test::owned_engine_options(ownership), store);
  ASSERT_TRUE(started.ok()) << started.error().message;
  std::unique_ptr<engine::EngineImpl> eng = std::move(*started);

  held = 1;
  store.hold_lease(1);
  eng->acquire_partition(part, 1);
  EndpointSpec spec;
  spec.url = sink.base_url() + "/hooks";
  spec.policy = "fast";
  Result<Endpoint> ep = test::create_endpoint_once_loaded(*eng, tenant, spec);
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  auto before = await<BatchResults>([&](auto done) {
    eng->submit_batch({{tenant, "evt-before", "t", "{\"n\":0}"}},
                      [done](BatchResults r) { done(r); });
  });
  ASSERT_TRUE(before.ok() && (*before)[0].ok()) << "the partition does not take events";

  // The lease expires in the shared store (nobody holds it now) while the node is busy; the
  // lease manager's loss reaches the shard in the turn that takes the next event in: after the
  // take-in, before the turn's commit.
  store.hold_lease(0);
  held = 0;
  auto answer = await<BatchResults>([&](auto done) {
    eng->shard_for(tenant).post([&, done](engine::Shard& sh) {
      sh.submit_batch({{tenant, "evt-lost-lease", "t", "{\"n\":1}"}},
                      [done](BatchResults r) { done(r); });
      sh.lose_partition(part, 1);
    });
  });
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  ASSERT_EQ(answer->size(), 1u);
  auto stored = store.find_event_key(tenant, "evt-lost-lease");
  ASSERT_TRUE(stored.ok());
  if ((*answer)[0].ok()) {
    EXPECT_TRUE(stored->has_value())
        << "acknowledged, but its write was refused: the event is lost";
  } else {
    EXPECT_EQ((*answer)[0].error().code, Errc::kUnavailable) << (*answer)[0].error().message;
    EXPECT_STREQ((*answer)[0].error().reason_or_code(), "not_owner");
    EXPECT_FALSE(stored->has_value());
  }
  EXPECT_TRUE(store.fenced(1)) << "the write went out at another epoch than its take-in's";
  EXPECT_FALSE(store.fenced(0)) << "the write went out at epoch 0";
  eng.reset();  // the engine stops before the store goes
}

}  // namespace
}  // namespace ringcast
