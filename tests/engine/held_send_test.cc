// Cluster mode's held sends (engine/shard.cc, release_held_sends): on a store that confirms
// writes later (durable_on_write() false, like Redis), a turn's requests wait until its batch is
// durable. A send held that long may belong to a lease its partition no longer has: the
// partition was lost and taken again meanwhile, at a new epoch, and the new owner re-read the
// delivery and leased it anew. The held send must then come back unsent — sent, it would be a
// second request for one delivery (and, after a failover, under a webhook id nobody stored:
// E2eCluster.RedisPrimaryKill…). Here the store holds its durable sequence back on demand and
// the test plays the lease manager.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/build.h"
#include "engine/config.h"
#include "engine/engine_impl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/locked_store.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ringcast {
namespace {

using test::await;
using BatchResults = std::vector<Result<SubmitResult>>;
using namespace std::chrono_literals;

// A store that confirms later, and whose confirmations the test can stop: while gated,
// durable_seq() stays where it was when the gate closed.
class GatedStore final : public test::LockedStore {
 public:
  uint64_t durable_seq() const override {
    const uint64_t real = LockedStore::durable_seq();
    const uint64_t gate = gate_.load();
    return gate == kOpen ? real : std::min(real, gate);
  }
  bool durable_on_write() const override { return false; }
  void close_gate() { gate_ = LockedStore::durable_seq(); }
  void open_gate() { gate_ = kOpen; }

 private:
  static constexpr uint64_t kOpen = ~uint64_t{0};
  std::atomic<uint64_t> gate_{kOpen};
};

TEST(EngineHeldSends, ASendHeldAcrossALossAndRetakeOfItsPartitionComesBackUnsent) {
  test::TempDir dir("ringcast-held-send");
  test::SinkProcess sink =
      test::SinkProcess::start({"--fault", "status=503:1;limit=1"}, dir.path());
  GatedStore store;
  const std::string tenant = "acme";
  const Partition part = partition_of(tenant);
  std::atomic<uint64_t> epoch{0};  // the epoch this node holds `part` at (0: none)

  engine::PartitionOwnership ownership;
  ownership.valid = [&](Partition p, uint64_t e, MonoTime) { return p == part && e == epoch; };
  ownership.set_epoch = [](Partition, uint64_t) {};
  ownership.fenced = [](Partition, uint64_t) { return false; };
  auto started = engine::EngineImpl::start(test::owned_engine_options(ownership), store);
  ASSERT_TRUE(started.ok()) << started.error().message;
  std::unique_ptr<engine::EngineImpl> eng = std::move(*started);

  epoch = 1;
  eng->acquire_partition(part, 1);
  EndpointSpec spec;
  spec.url = sink.base_url() + "/hooks";
  spec.policy = "fast";
  Result<Endpoint> ep = test::create_endpoint_once_loaded(*eng, tenant, spec);
  ASSERT_TRUE(ep.ok()) << ep.error().message;

  // The first attempt gets a 503; the store stops confirming; the retry (500 ms later) is
  // leased at epoch 1 and its request waits for that lease's batch.
  auto accepted = await<BatchResults>([&](auto done) {
    eng->submit_batch({{tenant, "evt-held", "t", "{\"n\":1}"}},
                      [done](BatchResults r) { done(r); });
  });
  ASSERT_TRUE(accepted.ok() && (*accepted)[0].ok());
  ASSERT_TRUE(test::wait_until([&] { return sink.stats_value("requests") == 1; }));
  store.close_gate();
  auto delivery = [&]() -> std::optional<DeliveryDetail> {
    auto page = eng->list_deliveries(tenant, std::nullopt, std::nullopt, 10, "");
    if (!page.ok() || page->items.size() != 1) return std::nullopt;
    auto d = eng->get_delivery(tenant, page->items[0].id);
    if (!d.ok() || !d->has_value()) return std::nullopt;
    return **d;
  };
  auto leased_after = [&](size_t attempts) {
    return test::wait_until([&] {
      auto d = delivery();
      return d && d->attempts.size() == attempts && d->delivery.status == DeliveryStatus::kInFlight;
    });
  };
  ASSERT_TRUE(leased_after(1)) << "the retry was never leased";
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(sink.stats_value("requests"), 1) << "sent before its lease was durable";

  // Lost and taken again at epoch 2: the partition is read again, the lease found open (a
  // lease_expired attempt, number 2) and the delivery leased anew for attempt 3, whose
  // request waits for the gate as well.
  const int64_t withheld_before = test::metric(*eng, "ringcast_sends_withheld_total");
  epoch = 2;
  eng->acquire_partition(part, 2);
  ASSERT_TRUE(leased_after(2)) << "the retaken partition did not lease its delivery again";

  store.open_gate();
  ASSERT_TRUE(test::wait_until([&] { return sink.stats_value("requests") >= 2; }));
  ASSERT_TRUE(test::wait_until([&] {
    return test::metric(*eng, "ringcast_sends_withheld_total") > withheld_before;
  })) << "the send leased at epoch 1 was not withheld";
  std::this_thread::sleep_for(500ms);  // what a third request would need to show up
  EXPECT_EQ(sink.stats_value("requests"), 2) << "the send leased at epoch 1 went out too";
  const auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1].id, ids[0].id) << "one delivery, one webhook id";
  EXPECT_EQ(ids[1].status, "200");
  ASSERT_TRUE(test::wait_until(
      [&] { return test::metric(*eng, "ringcast_deliveries_delivered_total") == 1; }));
  auto d = delivery();
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->delivery.status, DeliveryStatus::kDelivered);
  ASSERT_EQ(d->attempts.size(), 3u) << "503, lease_expired, 200: nothing for the withheld send";
  EXPECT_EQ(d->attempts[0].http_status, 503);
  EXPECT_EQ(d->attempts[1].code.kind, ErrorCode::Kind::kLeaseExpired);
  EXPECT_EQ(d->attempts[2].http_status, 200);
  eng.reset();  // the engine stops before the store goes
}

}  // namespace
}  // namespace ringcast
