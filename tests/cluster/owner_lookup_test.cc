// The API addresses that nodes publish with their heartbeat ({ns}:addr, cluster/membership.h)
// and LeaseManager::find_owner(), which the REST layer uses to forward a call to a partition's
// owner (api/forward.h), against one real redis-server: each node's address is published
// (also one set after the start, as `ringcast serve` does once its port is bound), the lookup
// names the lease holder and its address, a node that leaves takes its address along, a
// crashed one loses it when it is pruned, and a stopped manager answers the lookup with an
// error instead of never.
#include <gtest/gtest.h>

#include <future>
#include <string>

#include "cluster/keys.h"
#include "cluster/lease.h"
#include "tests/cluster/cluster_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::cluster {
namespace {

using test::RedisServer;
using test::TempDir;
using namespace testing;  // NOLINT: the cluster test helpers

class OwnerLookupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RedisServer::available()) return;
    dir_ = new TempDir("ringcast-owner-lookup");
    server_ = RedisServer::start(dir_->path()).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (server_ == nullptr) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  }
  LeaseOptions options(const std::string& id, const std::string& ns) {
    LeaseOptions o = test_options(id, ns);
    o.servers = {server_->address()};
    return o;
  }
  // find_owner() waited for (bounded).
  static Result<OwnerInfo> lookup(LeaseManager& m, Partition p) {
    auto answer = std::make_shared<std::promise<Result<OwnerInfo>>>();
    auto got = answer->get_future();
    m.find_owner(p, [answer](Result<OwnerInfo> r) { answer->set_value(r); });
    if (got.wait_for(std::chrono::seconds(3)) != std::future_status::ready)
      return make_error(Errc::kInternal, "find_owner never answered");
    return got.get();
  }
  std::string addr_of(const std::string& ns, const std::string& node) {
    auto r = server_->cmd({"HGET", addr_key(ns), node});
    return r.type == test::SyncReply::Type::kNil ? "<none>" : r.str;
  }

  static TempDir* dir_;
  static RedisServer* server_;
};

TempDir* OwnerLookupTest::dir_ = nullptr;
RedisServer* OwnerLookupTest::server_ = nullptr;

TEST_F(OwnerLookupTest, TheLeaseHolderAndItsPublishedAddress) {
  const std::string ns = "lookup";
  LeaseOptions oa = options("node-a", ns);
  oa.advertise_url = "http://127.0.0.1:1111";
  oa.forget_after = seconds(1);
  auto a = start_node(oa);
  LeaseOptions ob = options("node-b", ns);
  ob.forget_after = seconds(1);
  auto b = start_node(ob);  // no address yet: its port is not bound yet
  ASSERT_TRUE(wait_until(
      [&] {
        return a->owned().size() + b->owned().size() == kPartitions && !a->owned().empty() &&
               !b->owned().empty();
      },
      seconds(5)));
  EXPECT_EQ(addr_of(ns, "node-a"), "http://127.0.0.1:1111");
  EXPECT_EQ(addr_of(ns, "node-b"), "<none>");
  const Partition pa = a->owned().begin()->first;
  Partition pb = b->owned().begin()->first;
  auto none = lookup(*a->m, pb);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->node_id, "node-b");
  EXPECT_EQ(none->url, "");  // an owner without an address: the forward answers 503

  b->m->set_advertise_url("http://127.0.0.1:2222");
  ASSERT_TRUE(
      wait_until([&] { return addr_of(ns, "node-b") == "http://127.0.0.1:2222"; }, seconds(3)));
  // From a's side (the address from its view after a beat, or from the hash) and b's own. Each
  // try asks about a partition b holds at that moment: under CPU starvation (two cores, ctest
  // -j2 beside the cluster suites) a 1 s lease can lapse and move to a — the lookups then
  // rightly answered "nobody", then node-a, for the partition picked first.
  std::string seen;  // what the lookups answered, for the failure message
  ASSERT_TRUE(wait_until(
      [&] {
        const auto held = b->owned();
        if (held.empty()) return false;
        const Partition p = held.begin()->first;
        auto r = lookup(*a->m, p);
        seen += '[';
        seen += r.ok() ? r->node_id + " " + r->url : std::string(r.error().message);
        seen += ']';
        if (!r.ok() || r->node_id != "node-b" || r->url != "http://127.0.0.1:2222") return false;
        pb = p;
        return true;
      },
      seconds(10)))
      << seen;
  auto own = lookup(*b->m, pb);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->node_id, "node-b");
  auto other = lookup(*b->m, pa);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->node_id, "node-a");
  EXPECT_EQ(other->url, "http://127.0.0.1:1111");

  // A node that leaves takes its address along; the next holder is named.
  b->m->stop(seconds(2));
  EXPECT_EQ(addr_of(ns, "node-b"), "<none>");
  EXPECT_EQ(server_->cmd({"ZSCORE", members_key(ns), "node-b"}).type, test::SyncReply::Type::kNil);
  ASSERT_TRUE(wait_until([&] { return a->owned().size() == kPartitions; }, seconds(5)));
  auto moved = lookup(*a->m, pb);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->node_id, "node-a");
  // A stopped manager answers (an error), never leaves the caller waiting.
  auto stopped = lookup(*b->m, pb);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().code, Errc::kUnavailable);

  // A crashed node (no leave) keeps its address until it is pruned with its membership.
  LeaseOptions oc = options("node-c", ns);
  oc.advertise_url = "http://127.0.0.1:3333";
  oc.forget_after = seconds(1);
  auto c = start_node(oc);
  ASSERT_TRUE(
      wait_until([&] { return addr_of(ns, "node-c") == "http://127.0.0.1:3333"; }, seconds(3)));
  c->m.reset();
  ASSERT_TRUE(wait_until([&] { return addr_of(ns, "node-c") == "<none>"; }, seconds(5)));
  EXPECT_EQ(server_->cmd({"ZSCORE", members_key(ns), "node-c"}).type, test::SyncReply::Type::kNil);
  EXPECT_EQ(addr_of(ns, "node-a"), "http://127.0.0.1:1111");
  a->m->stop(seconds(2));
}

TEST_F(OwnerLookupTest, NobodyHoldsAnExpiredLease) {
  const std::string ns = "lookup-expired";
  auto a = start_node(options("node-a", ns));
  ASSERT_TRUE(wait_until([&] { return a->owned().size() == kPartitions; }, seconds(5)));
  auto held = lookup(*a->m, 5);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->node_id, "node-a");
  // Paused, it neither renews nor takes anything: the leases expire in Redis.
  a->m->pause_io(true);
  ASSERT_TRUE(wait_until(
      [&] {
        return server_->cmd({"EXISTS", own_key(ns, 5)}).integer == 0;
      },
      seconds(3)));
  auto nobody = lookup(*a->m, 5);
  ASSERT_TRUE(nobody.ok()) << nobody.error().message;
  EXPECT_EQ(nobody->node_id, "");  // the forward answers 503 not_owner: between owners
  a->m->pause_io(false);
  a->m->stop(seconds(2));
}

}  // namespace
}  // namespace ringcast::cluster
