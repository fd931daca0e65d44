// The fence (cluster/fence.h) and the lease manager against one real redis-server (the
// standalone redis::Connection path): a fenced example write runs only for the exact
// (node, epoch) the lease holds; option checks; a single manager takes every partition, and
// after a crash its leases expire while the epoch counters survive, so the next owner's
// epochs are greater (an expired lease must not reset the epoch to 1).
#include "cluster/fence.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cluster/keys.h"
#include "cluster/lease.h"
#include "redis/connection.h"
#include "tests/cluster/cluster_test_util.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace ringcast::cluster {
namespace {

using redis::testing::make_loop;
using redis::testing::run_until;
using test::RedisServer;
using test::TempDir;
using namespace testing;  // NOLINT: the cluster test helpers

class StandaloneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RedisServer::available()) return;
    dir_ = new TempDir("ringcast-cluster-standalone");
    server_ = RedisServer::start(dir_->path()).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "redis-server is not installed (bash tools/install-deps.sh)";
  }
  LeaseOptions options(const std::string& id, const std::string& ns) {
    LeaseOptions o = test_options(id, ns);
    o.servers = {server_->address()};
    return o;
  }

  static TempDir* dir_;
  static RedisServer* server_;
};

TempDir* StandaloneTest::dir_ = nullptr;
RedisServer* StandaloneTest::server_ = nullptr;

// The example write: SET {ns:p}:x ARGV[3], only if not fenced.
constexpr const char* kSetBody = "return redis.call('SET', KEYS[2], ARGV[3])\n";

TEST_F(StandaloneTest, FencedWriteRunsOnlyForTheLeaseHolder) {
  auto loop = make_loop();
  redis::ConnectionOptions co;
  co.port = server_->port();
  auto conn = redis::Connection::create(*loop, co);
  ASSERT_TRUE(conn.ok());
  const redis::Script script(fenced_source(kSetBody));
  const std::string ns = "fence";
  const Partition p = 17;
  const std::string x = partition_key(ns, p, "x");
  EXPECT_EQ(x, "{fence:17}:x");
  EXPECT_EQ(own_key(ns, p), "{fence:17}:own");

  auto write = [&](const std::string& node, uint64_t epoch, const std::string& value) {
    std::optional<Result<redis::Reply>> got;
    const std::vector<std::string> keys = {x}, args = {value};
    evalsha_fenced(**conn, script, ns, p, node, epoch, keys, args,
                   [&](Result<redis::Reply> r) { got.emplace(std::move(r)); });
    EXPECT_TRUE(run_until(*loop, [&] { return got.has_value(); }));
    EXPECT_TRUE(got->ok());
    return got->value();
  };

  // No lease at all: fenced (the first call also exercises the NOSCRIPT fallback).
  redis::Reply r = write("n1", 5, "v0");
  EXPECT_TRUE(is_fenced(r)) << r.debug_string();
  EXPECT_EQ(server_->cmd({"EXISTS", x}).integer, 0);

  server_->cmd({"HSET", own_key(ns, p), "node", "n1", "epoch", "5"});
  r = write("n1", 5, "v1");
  EXPECT_FALSE(r.is_error()) << r.debug_string();
  EXPECT_EQ(server_->cmd({"GET", x}).str, "v1");

  for (const auto& [node, epoch] :
       std::vector<std::pair<std::string, uint64_t>>{{"n1", 4}, {"n1", 6}, {"n2", 5}}) {
    r = write(node, epoch, "stale");
    EXPECT_TRUE(is_fenced(r)) << node << "@" << epoch << ": " << r.debug_string();
    EXPECT_EQ(r.str().rfind("FENCED {fence:17}:own is held by n1 at epoch 5", 0), 0u) << r.str();
  }
  EXPECT_EQ(server_->cmd({"GET", x}).str, "v1");  // no fenced write got through

  server_->cmd({"DEL", own_key(ns, p)});  // expired or released
  r = write("n1", 5, "late");
  EXPECT_TRUE(is_fenced(r));
  EXPECT_EQ(server_->cmd({"GET", x}).str, "v1");

  const FencedCall c =
      fenced_call(ns, p, "n1", 9, std::vector<std::string>{x}, std::vector<std::string>{"a", "b"});
  EXPECT_EQ(c.keys, (std::vector<std::string>{"{fence:17}:own", x}));
  EXPECT_EQ(c.args, (std::vector<std::string>{"n1", "9", "a", "b"}));
}

TEST_F(StandaloneTest, OptionsAreChecked) {
  auto bad = [&](auto edit, const char* field) {
    LeaseOptions o = options("n", "opts");
    edit(o);
    auto m = LeaseManager::start(o, {});
    ASSERT_FALSE(m.ok()) << field;
    EXPECT_EQ(m.error().code, Errc::kInvalidArgument);
    EXPECT_STREQ(m.error().field, field);
  };
  bad([](LeaseOptions& o) { o.node_id.clear(); }, "node_id");
  bad([](LeaseOptions& o) { o.servers.clear(); }, "servers");
  bad([](LeaseOptions& o) { o.servers.push_back("127.0.0.1:1"); }, "servers");
  bad([](LeaseOptions& o) { o.ns = "a{b"; }, "ns");
  bad([](LeaseOptions& o) { o.safety_margin = milliseconds(400); }, "safety_margin");
  bad([](LeaseOptions& o) { o.member_ttl = o.heartbeat_interval; }, "member_ttl");
  bad([](LeaseOptions& o) { o.lease_ttl = milliseconds(50); }, "lease_ttl");
}

TEST_F(StandaloneTest, EpochsSurviveAnExpiredLease) {
  const std::string ns = "epochs";
  auto a = start_node(options("solo-a", ns));
  ASSERT_TRUE(wait_until([&] { return a->owned().size() == kPartitions; }, seconds(5)));
  const auto before = a->owned();
  EXPECT_EQ(server_->cmd({"HGET", own_key(ns, 3), "node"}).str, "solo-a");
  EXPECT_EQ(server_->cmd({"HGET", own_key(ns, 3), "epoch"}).str, std::to_string(before.at(3)));
  const long long pttl = server_->cmd({"PTTL", own_key(ns, 3)}).integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 1000);

  a->m.reset();                                               // a crash: nothing released
  EXPECT_EQ(a->rec->count(Event::Kind::kLose), kPartitions);  // it was told to stop anyway
  ASSERT_TRUE(wait_until(
      [&] {
        return server_->cmd({"EXISTS", own_key(ns, 3)}).integer == 0;
      },
      seconds(3)));
  EXPECT_EQ(server_->cmd({"GET", epoch_key(ns, 3)}).str, std::to_string(before.at(3)));

  auto b = start_node(options("solo-b", ns));
  ASSERT_TRUE(wait_until([&] { return b->owned().size() == kPartitions; }, seconds(5)));
  for (const auto& [p, e] : b->owned()) EXPECT_GT(e, before.at(p)) << "partition " << p;
  const auto st = b->m->status();
  EXPECT_EQ(st.node_id, "solo-b");
  EXPECT_TRUE(st.synced);
  ASSERT_EQ(st.members, std::vector<std::string>{"solo-b"});  // solo-a's beats are too old
  EXPECT_EQ(st.assigned, std::vector<uint32_t>{kPartitions});
  EXPECT_TRUE(b->m->valid(3, b->owned().at(3), mono_now()));
  EXPECT_FALSE(b->m->valid(3, b->owned().at(3) - 1, mono_now()));

  b->m->stop(seconds(2));
  EXPECT_EQ(b->rec->count(Event::Kind::kRelease), kPartitions);
  EXPECT_EQ(server_->cmd({"EXISTS", own_key(ns, 3)}).integer, 0);  // released, not expired
  EXPECT_EQ(server_->cmd({"ZSCORE", members_key(ns), "solo-b"}).type,
            test::SyncReply::Type::kNil);  // left the membership
}

}  // namespace
}  // namespace ringcast::cluster
