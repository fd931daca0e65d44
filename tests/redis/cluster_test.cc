// redis::ClusterClient and key slots against a real 3-primary Redis Cluster on loopback:
// CRC16 slots against CLUSTER KEYSLOT, keys spread over all primaries, MOVED after a slot
// migration (re-routed, map refreshed), ASK during a migration, TRYAGAIN on a split multi-key
// command, CLUSTERDOWN on an unserved slot, EVALSHA routed by its key.
#include "redis/cluster.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "redis/script.h"
#include "redis/slot.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace ringcast::redis {
namespace {

using test::RedisCluster;
using test::RedisServer;
using test::TempDir;
using testing::call;
using testing::run_until;
using testing::show;

TEST(RedisSlotTest, Crc16AndHashTags) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // the XMODEM check value the Redis spec quotes
  EXPECT_EQ(crc16(""), 0);
  EXPECT_EQ(hash_tag("{user1000}.following"), "user1000");
  EXPECT_EQ(hash_tag("foo{}{bar}"), "foo{}{bar}");  // empty first tag: the whole key
  EXPECT_EQ(hash_tag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(hash_tag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(hash_tag("{}"), "{}");
  EXPECT_EQ(hash_tag("no-tag}{"), "no-tag}{");
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_LT(key_slot("anything"), kSlots);
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RedisServer::available()) return;
    dir_ = new TempDir("ringcast-redis-cluster");
    cluster_ = RedisCluster::start(dir_->path(), 3).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << "redis-server is not installed (bash tools/install-deps.sh)";
    loop_ = testing::make_loop();
  }
  std::unique_ptr<ClusterClient> client(ClusterOptions o = {}) {
    o.seeds = {cluster_->node(1).address()};  // not node 0: the map must come from a seed
    o.connection.default_timeout = seconds(5);
    auto c = ClusterClient::create(*loop_, o);
    EXPECT_TRUE(c.ok());
    auto out = std::move(c).value();
    EXPECT_TRUE(run_until(*loop_, [&] { return out->map_complete(); }));
    return out;
  }
  // A key of `prefix` whose slot node `owner` serves and no earlier test used.
  static std::string key_on(size_t owner, const std::string& prefix) {
    for (int i = 0; i < 100000; ++i) {
      std::string k = prefix + std::to_string(i);
      if (cluster_->owner_of(key_slot(k)) == static_cast<int>(owner)) return k;
    }
    return {};
  }

  static TempDir* dir_;
  static RedisCluster* cluster_;
  std::unique_ptr<net::Loop> loop_;
};

TempDir* ClusterTest::dir_ = nullptr;
RedisCluster* ClusterTest::cluster_ = nullptr;

TEST_F(ClusterTest, KeySlotMatchesTheServer) {
  const std::vector<std::string> keys = {"foo",
                                         "bar",
                                         "{user1000}.following",
                                         "{user1000}.followers",
                                         "foo{}{bar}",
                                         "foo{{bar}}",
                                         "{}",
                                         "{",
                                         "}",
                                         "a{b}c{d}",
                                         "",
                                         "12345",
                                         std::string("bin\0ary", 7),
                                         "\xff\xfe",
                                         "{rc:17}:ev"};
  for (const auto& k : keys) {
    EXPECT_EQ(static_cast<int>(key_slot(k)), cluster_->key_slot(k)) << "key " << k;
  }
}

TEST_F(ClusterTest, KeysSpreadOverAllPrimariesAreSetAndRead) {
  auto c = client();
  constexpr int kKeys = 300;
  int done = 0, bad = 0;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back("spread:" + std::to_string(i));
  for (const auto& k : keys) {
    c->command({"SET", k, "v-" + k}, [&](Result<Reply> r) {
      done++;
      if (!r.ok() || !r->is_status()) bad++;
    });
  }
  ASSERT_TRUE(run_until(*loop_, [&] { return done == kKeys; }));
  EXPECT_EQ(bad, 0);
  std::map<std::string, std::string> read;
  done = 0;
  for (const auto& k : keys) {
    c->command({"GET", k}, [&, k](Result<Reply> r) {
      done++;
      if (r.ok() && r->is_string()) read[k] = r->str();
    });
  }
  ASSERT_TRUE(run_until(*loop_, [&] { return done == kKeys; }));
  for (const auto& k : keys) EXPECT_EQ(read[k], "v-" + k);
  // Each primary holds some of them (the oracle asks the owner), none was redirected.
  std::vector<int> per_node(cluster_->size(), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const int owner = cluster_->owner_of(key_slot(keys[i]));
    ASSERT_GE(owner, 0);
    per_node[static_cast<size_t>(owner)]++;
    if (i < 20) {
      EXPECT_EQ(cluster_->node(static_cast<size_t>(owner)).cmd({"GET", keys[i]}).str,
                "v-" + keys[i]);
    }
  }
  for (size_t i = 0; i < cluster_->size(); ++i) EXPECT_GT(per_node[i], 0) << "node " << i;
  EXPECT_EQ(c->stats().moved, 0u);
  EXPECT_EQ(c->stats().nodes, 3u);
  // Keyless commands go to some node.
  auto ping = call(*c, {"PING"});
  ASSERT_TRUE(ping.ok()) << show(ping);
  EXPECT_EQ(*ping, Reply::status("PONG"));
}

TEST_F(ClusterTest, MovedAfterASlotMigrationIsReroutedAndRefreshesTheMap) {
  auto c = client();
  const std::string key = key_on(0, "moved:");
  ASSERT_FALSE(key.empty());
  const int slot = key_slot(key);
  ASSERT_TRUE(call(*c, {"SET", key, "here"}).ok());
  ASSERT_EQ(c->node_for_slot(slot), cluster_->node(0).address());
  // Move the slot 0 -> 2 behind the client's back.
  cluster_->begin_migration(slot, 0, 2);
  cluster_->migrate_keys(slot, 0, 2, {key});
  cluster_->finish_migration(slot, 2);
  const uint64_t refreshes = c->stats().refreshes;
  auto r = call(*c, {"GET", key});
  ASSERT_TRUE(r.ok()) << show(r);
  EXPECT_EQ(*r, Reply::string("here"));
  EXPECT_EQ(c->stats().moved, 1u);
  EXPECT_EQ(c->node_for_slot(slot), cluster_->node(2).address());
  ASSERT_TRUE(run_until(*loop_, [&] { return c->stats().refreshes > refreshes; }))
      << "MOVED triggers a full map refresh";
  EXPECT_EQ(c->node_for_slot(slot), cluster_->node(2).address());
  auto again = call(*c, {"GET", key});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(c->stats().moved, 1u) << "the second command went straight to the new owner";
}

TEST_F(ClusterTest, AskDuringMigrationTryagainOnSplitKeysThenMoved) {
  auto c = client();
  // Two keys in one slot (hash tag), owned by node 1.
  std::string tag;
  for (int i = 0; i < 100000 && tag.empty(); ++i) {
    std::string t = "{ask" + std::to_string(i) + "}";
    if (cluster_->owner_of(key_slot(t)) == 1) tag = t;
  }
  ASSERT_FALSE(tag.empty());
  const std::string k1 = tag + "a", k2 = tag + "b";
  const int slot = key_slot(k1);
  ASSERT_TRUE(call(*c, {"MSET", k1, "one", k2, "two"}).ok());
  cluster_->begin_migration(slot, 1, 0);
  cluster_->migrate_keys(slot, 1, 0, {k1});  // k1 on the target, k2 still on the source

  auto moved_key = call(*c, {"GET", k1});
  ASSERT_TRUE(moved_key.ok()) << show(moved_key);
  EXPECT_EQ(*moved_key, Reply::string("one"));
  EXPECT_EQ(c->stats().ask, 1u);
  EXPECT_EQ(c->node_for_slot(slot), cluster_->node(1).address()) << "ASK leaves the map alone";
  auto stayed = call(*c, {"GET", k2});
  ASSERT_TRUE(stayed.ok());
  EXPECT_EQ(*stayed, Reply::string("two"));
  EXPECT_EQ(c->stats().ask, 1u);

  // A multi-key command over the split slot gets TRYAGAIN until the migration ends.
  std::optional<Result<Reply>> got;
  CommandOptions o;
  o.timeout = seconds(8);
  c->command(
      {"MGET", k1, k2}, [&](Result<Reply> r) { got.emplace(std::move(r)); }, o);
  ASSERT_TRUE(run_until(*loop_, [&] { return c->stats().tryagain >= 2; }));
  EXPECT_FALSE(got.has_value());
  cluster_->migrate_keys(slot, 1, 0, {k2});
  cluster_->finish_migration(slot, 0);
  ASSERT_TRUE(run_until(*loop_, [&] { return got.has_value(); }));
  ASSERT_TRUE(got->ok()) << show(*got);
  EXPECT_EQ(**got, Reply::array({Reply::string("one"), Reply::string("two")}));
  EXPECT_GE(c->stats().moved, 1u) << "after the migration the source answers MOVED";
  EXPECT_EQ(c->node_for_slot(slot), cluster_->node(0).address());
}

TEST_F(ClusterTest, ClusterdownIsRetriedWithinTheDeadline) {
  auto c = client();
  const std::string key = key_on(2, "down:");
  ASSERT_FALSE(key.empty());
  const std::string slot = std::to_string(key_slot(key));
  ASSERT_TRUE(call(*c, {"SET", key, "x"}).ok());
  // Nobody serves the slot for a moment (cluster-require-full-coverage no: only it is down).
  for (size_t i = 0; i < cluster_->size(); ++i) {
    ASSERT_FALSE(cluster_->node(i).cmd({"CLUSTER", "DELSLOTS", slot}).is_error());
  }
  std::optional<Result<Reply>> got;
  CommandOptions o;
  o.timeout = seconds(8);
  c->command(
      {"GET", key}, [&](Result<Reply> r) { got.emplace(std::move(r)); }, o);
  ASSERT_TRUE(run_until(*loop_, [&] { return c->stats().clusterdown >= 1; }));
  ASSERT_FALSE(cluster_->node(2).cmd({"CLUSTER", "ADDSLOTS", slot}).is_error());
  ASSERT_TRUE(run_until(*loop_, [&] { return got.has_value(); }));
  ASSERT_TRUE(got->ok()) << show(*got);
  EXPECT_EQ(**got, Reply::string("x"));
  ASSERT_TRUE(cluster_->wait_consistent(std::chrono::seconds(10)));

  // With a short deadline the server's last answer comes back.
  for (size_t i = 0; i < cluster_->size(); ++i) {
    ASSERT_FALSE(cluster_->node(i).cmd({"CLUSTER", "DELSLOTS", slot}).is_error());
  }
  CommandOptions quick;
  quick.timeout = milliseconds(400);
  auto r = call(*c, {"GET", key}, quick);
  ASSERT_TRUE(r.ok()) << show(r);
  EXPECT_TRUE(r->error_is("CLUSTERDOWN")) << r->debug_string();
  ASSERT_FALSE(cluster_->node(2).cmd({"CLUSTER", "ADDSLOTS", slot}).is_error());
  ASSERT_TRUE(cluster_->wait_consistent(std::chrono::seconds(10)));
}

TEST_F(ClusterTest, EvalshaIsRoutedByItsFirstKey) {
  auto c = client();
  const Script set_get("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])");
  for (size_t owner = 0; owner < cluster_->size(); ++owner) {
    const std::string key = key_on(owner, "script:");
    const std::string_view keys[] = {key};
    const std::string_view args[] = {"val"};
    std::optional<Result<Reply>> got;
    evalsha(*c, set_get, keys, args, [&](Result<Reply> r) { got.emplace(std::move(r)); });
    ASSERT_TRUE(run_until(*loop_, [&] { return got.has_value(); }));
    ASSERT_TRUE(got->ok()) << show(*got);
    EXPECT_EQ(**got, Reply::string("val"));
    EXPECT_EQ(cluster_->node(owner).cmd({"GET", key}).str, "val");
  }
  EXPECT_EQ(c->stats().moved, 0u);
}

TEST_F(ClusterTest, NoRouteBeforeTheDeadlineWhenNoSeedAnswers) {
  ClusterOptions o;
  o.seeds = {"127.0.0.1:" + std::to_string(test::free_tcp_port())};
  auto c = ClusterClient::create(*loop_, o);
  ASSERT_TRUE(c.ok());
  CommandOptions quick;
  quick.timeout = milliseconds(200);
  auto r = call(**c, {"GET", "k"}, quick);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, kNoRoute);
  EXPECT_FALSE(may_have_executed(r.error()));
  EXPECT_FALSE((*c)->map_complete());
  // A command still waiting for a route when the client goes away completes, not sent.
  std::optional<Result<Reply>> got;
  CommandOptions slow;
  slow.timeout = seconds(30);
  (*c)->command(
      {"GET", "k"}, [&](Result<Reply> res) { got.emplace(std::move(res)); }, slow);
  testing::run_for(*loop_, milliseconds(50));
  EXPECT_FALSE(got.has_value());
  c->reset();
  ASSERT_TRUE(got.has_value());
  ASSERT_FALSE(got->ok());
  EXPECT_STREQ(got->error().reason, kClosed);
}

}  // namespace
}  // namespace ringcast::redis
