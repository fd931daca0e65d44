// RedisSource against a real redis-server (tests/support/redis_server.h) and an engine fake
// that can hold its durable answers: XACK only after durable, dead letters with their reason,
// transient refusals retried (never dead-lettered), own pending entries re-read after a restart,
// a dead consumer's entries claimed, the max_unacked cap, and a Redis restart (AOF) survived.
#include "intake/redis_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/intake/fake_engine.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace ringcast::intake {
namespace {

// "prefix<i>", appended piece by piece: `"literal" + std::to_string(i)` trips GCC 12's false
// -Wrestrict at -O3 (the Release stage).
std::string numbered(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

using namespace std::chrono_literals;
using test::IntakeFakeEngine;
using test::RedisServer;
using test::RedisServerOptions;
using test::SyncReply;
using test::TempDir;

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = 15s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

class RedisSourceTest : public ::testing::Test {
 protected:
  void SetUp() override { start_server({}); }
  void start_server(const RedisServerOptions& o) { server_ = RedisServer::start(dir_.path(), o); }

  RedisSourceOptions options(const std::string& consumer = "node-a") {
    RedisSourceOptions o;
    o.name = "orders";
    o.servers = {server_->address()};
    o.streams = {"events"};
    o.consumer = consumer;
    o.dead_letter_stream = "events:dead";
    o.block = 100ms;
    o.retry_delay = 50ms;
    o.status_interval = 50ms;
    o.claim_interval = 100ms;
    o.claim_idle = 60s;  // no claims unless a test asks
    return o;
  }

  void xadd(const std::string& tenant, const std::string& id, const std::string& payload,
            const std::string& stream = "events") {
    auto r = server_->cmd({"XADD", stream, "*", "tenant", tenant, "id", id, "type", "order.paid",
                           "payload", payload});
    ASSERT_FALSE(r.is_error()) << r.str;
  }
  // The group's pending count (XPENDING summary).
  long long pending(const std::string& stream = "events") {
    auto r = server_->cmd({"XPENDING", stream, "ringcast"});
    if (r.is_error() || r.elements.empty()) return -1;
    return r.elements[0].integer;
  }
  std::vector<std::map<std::string, std::string>> dead_letters() {
    std::vector<std::map<std::string, std::string>> out;
    auto r = server_->cmd({"XRANGE", "events:dead", "-", "+"});
    for (const auto& e : r.elements) {
      std::map<std::string, std::string> f;
      for (size_t i = 0; i + 1 < e.elements[1].elements.size(); i += 2)
        f[e.elements[1].elements[i].str] = e.elements[1].elements[i + 1].str;
      out.push_back(std::move(f));
    }
    return out;
  }

  TempDir dir_{"ringcast-intake"};
  std::unique_ptr<RedisServer> server_;
  IntakeFakeEngine engine_;
};

TEST_F(RedisSourceTest, AcksOnlyOnceTheEngineAnsweredDurable) {
  engine_.add_tenant("acme");
  engine_.hold(true);
  for (int i = 0; i < 100; ++i) xadd("acme", numbered("e", i), numbered("{\"n\":", i) + "}");
  auto src = RedisSource::start(options(), engine_);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(wait_for([&] { return engine_.events_seen() == 100; })) << engine_.events_seen();
  // Taken but not durable: nothing is acked.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(pending(), 100);
  EXPECT_EQ((*src)->counters().acked.load(), 0u);
  engine_.hold(false);
  ASSERT_TRUE(wait_for([&] { return pending() == 0; })) << pending();
  EXPECT_EQ((*src)->counters().accepted.load(), 100u);
  EXPECT_EQ((*src)->counters().read.load(), 100u);
  EXPECT_EQ((*src)->counters().dead_lettered.load(), 0u);
  EXPECT_EQ(engine_.accepted(), 100u);
  // Lag and pending come from XINFO GROUPS.
  EXPECT_TRUE(wait_for([&] { return (*src)->counters().lag.load() == 0; }));
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, BadEntriesGoToTheDeadLetterStreamWithTheirReason) {
  engine_.add_tenant("acme");
  xadd("acme", "ok-1", "{\"a\":1}");
  xadd("acme", "bad-json", "{not json");
  xadd("nobody", "who", "{}");  // unknown tenant
  ASSERT_FALSE(server_
                   ->cmd({"XADD", "events", "*", "tenant", "acme", "id", "no-payload", "type", "t",
                          "extra", "kept"})
                   .is_error());
  // SPEC R13.1: an ordering key with a control character.
  ASSERT_FALSE(server_
                   ->cmd({"XADD", "events", "*", "tenant", "acme", "id", "bad-key", "type", "t",
                          "payload", "{}", "ordering_key", "order\x01"})
                   .is_error());
  xadd("acme", "ok-1", "{\"a\":1}");  // duplicate: acked, not dead-lettered
  xadd("acme", "ok-1", "{\"a\":2}");  // conflict
  auto src = RedisSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return (*src)->counters().acked.load() == 7; }))
      << (*src)->counters().acked.load();
  EXPECT_EQ(pending(), 0);
  const auto& c = (*src)->counters();
  EXPECT_EQ(c.accepted.load(), 1u);
  EXPECT_EQ(c.duplicate.load(), 1u);
  EXPECT_EQ(c.dead_lettered.load(), 5u);
  auto dead = dead_letters();
  ASSERT_EQ(dead.size(), 5u);
  std::map<std::string, std::string> code_by_id;
  for (auto& d : dead) {
    code_by_id[d["id"]] = d["error_code"];
    EXPECT_FALSE(d["error_message"].empty());
    EXPECT_EQ(d["source_stream"], "events");
    EXPECT_FALSE(d["source_id"].empty());
  }
  EXPECT_EQ(code_by_id["bad-json"], "invalid_json");
  EXPECT_EQ(code_by_id["who"], "unknown_tenant");
  EXPECT_EQ(code_by_id["no-payload"], "missing_field");
  EXPECT_EQ(code_by_id["bad-key"], "invalid_value");
  EXPECT_EQ(code_by_id["ok-1"], "conflict");
  // The original fields are kept (the extra one too), and the payloads of the entries the
  // engine refused (their payload moved into the submission: read back from the stream).
  for (auto& d : dead) {
    if (d["id"] == "no-payload") {
      EXPECT_EQ(d["extra"], "kept");
    }
    if (d["id"] == "bad-key") {
      EXPECT_EQ(d["ordering_key"], "order\x01");
      EXPECT_NE(d["error_message"].find("ordering_key"), std::string::npos);
    }
    if (d["id"] == "who") {
      EXPECT_EQ(d["payload"], "{}");
      EXPECT_EQ(d["tenant"], "nobody");
    }
    if (d["id"] == "ok-1") {
      EXPECT_EQ(d["payload"], "{\"a\":2}");
      EXPECT_EQ(d["type"], "order.paid");
    }
  }
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, TransientRefusalsAreRetriedNotDeadLettered) {
  engine_.add_tenant("acme");
  engine_.refuse_next_batches(2);
  for (int i = 0; i < 20; ++i) xadd("acme", numbered("t", i), numbered("[", i) + "]");
  auto src = RedisSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 20 && pending() == 0; }))
      << engine_.accepted() << " " << pending();
  // Submitted again with their own payloads (read back from the stream: the first submission
  // took them).
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(engine_.payload_of("acme", numbered("t", i)), numbered("[", i) + "]");
  EXPECT_GT((*src)->counters().retried.load(), 0u);
  EXPECT_EQ((*src)->counters().dead_lettered.load(), 0u);
  EXPECT_TRUE(dead_letters().empty());
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, ARestartedConsumerReadsItsOwnPendingEntriesFirst) {
  engine_.add_tenant("acme");
  engine_.hold(true);
  for (int i = 0; i < 30; ++i) xadd("acme", numbered("p", i), "{}");
  {
    auto src = RedisSource::start(options("node-a"), engine_);
    ASSERT_TRUE(src.ok());
    ASSERT_TRUE(wait_for([&] { return engine_.events_seen() == 30; }));
    (*src)->stop(0s);  // a crash, as far as Redis knows: 30 entries pending for node-a
  }
  EXPECT_EQ(pending(), 30);
  engine_.hold(false);
  auto again = RedisSource::start(options("node-a"), engine_);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(wait_for([&] { return pending() == 0; })) << pending();
  // The first submissions became durable too: the replays are duplicates.
  EXPECT_EQ((*again)->counters().read.load(), 30u);
  EXPECT_EQ((*again)->counters().duplicate.load(), 30u);
  EXPECT_EQ(engine_.accepted(), 30u);
  (*again)->stop(1s);
}

TEST_F(RedisSourceTest, ClaimsTheEntriesOfADeadConsumer) {
  engine_.add_tenant("acme");
  for (int i = 0; i < 25; ++i) xadd("acme", numbered("c", i), "{}");
  ASSERT_FALSE(server_->cmd({"XGROUP", "CREATE", "events", "ringcast", "0"}).is_error());
  // "node-dead" reads everything and never acks.
  auto r = server_->cmd(
      {"XREADGROUP", "GROUP", "ringcast", "node-dead", "COUNT", "100", "STREAMS", "events", ">"});
  ASSERT_FALSE(r.is_error());
  ASSERT_EQ(pending(), 25);
  auto o = options("node-b");
  o.claim_idle = 200ms;
  auto src = RedisSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return pending() == 0; })) << pending();
  EXPECT_EQ((*src)->counters().claimed.load(), 25u);
  EXPECT_EQ(engine_.accepted(), 25u);
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, ReadingPausesAtMaxUnacked) {
  engine_.add_tenant("acme");
  engine_.hold(true);
  for (int i = 0; i < 200; ++i) xadd("acme", numbered("m", i), "{}");
  auto o = options();
  o.max_unacked = 16;
  o.batch = 10;
  auto src = RedisSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return engine_.events_seen() == 16; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(engine_.events_seen(), 16u);  // no more read while nothing is durable
  EXPECT_EQ((*src)->state(), SourceState::kPaused);
  EXPECT_LE((*src)->counters().unacked.load(), 16);
  engine_.hold(false);
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 200 && pending() == 0; }))
      << engine_.accepted();
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, ResumesByItselfAfterARedisRestartWithAof) {
  server_.reset();
  TempDir aof_dir("ringcast-intake-aof");
  RedisServerOptions ro;
  ro.appendonly = true;
  server_ = RedisServer::start(aof_dir.path(), ro);
  engine_.add_tenant("acme");
  for (int i = 0; i < 50; ++i) xadd("acme", numbered("r", i), "{}");
  auto src = RedisSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 50 && pending() == 0; }));
  server_->restart();
  for (int i = 50; i < 100; ++i) xadd("acme", numbered("r", i), "{}");
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 100 && pending() == 0; }, 20s))
      << engine_.accepted() << " " << pending();
  EXPECT_GE((*src)->counters().reconnects.load(), 1u);
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, RecreatesAGroupLostWithAnUnpersistedRestart) {
  engine_.add_tenant("acme");
  auto src = RedisSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  xadd("acme", "g1", "{}");
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 1; }));
  server_->restart();  // no persistence: the stream and the group are gone (svix#1844)
  xadd("acme", "g2", "{}");
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 2 && pending() == 0; }, 20s))
      << engine_.accepted();
  (*src)->stop(1s);
}

// Entries can sit in this consumer's pending list without the source knowing them: acks sent
// just before a Redis restart are lost when AOF had not fsynced them yet. The test puts one
// there (a read under the source's own consumer name, inside MULTI so the source's blocked
// read cannot take it) and cuts only the source's command connection: after that reconnect the
// source reads its own pending list again. Without that, the entry would wait for XAUTOCLAIM
// (claim_idle is 60 s here).
TEST_F(RedisSourceTest, ReadsItsOwnPendingListAgainAfterAReconnect) {
  engine_.add_tenant("acme");
  auto src = RedisSource::start(options("node-a"), engine_);
  ASSERT_TRUE(src.ok());
  xadd("acme", "first", "{}");
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 1 && pending() == 0; }));
  auto tx = server_->cmds(
      {{"MULTI"},
       {"XADD", "events", "*", "tenant", "acme", "id", "hidden", "type", "t", "payload", "{}"},
       {"XREADGROUP", "GROUP", "ringcast", "node-a", "COUNT", "1", "STREAMS", "events", ">"},
       {"EXEC"}});
  ASSERT_FALSE(tx.back().is_error()) << tx.back().str;
  ASSERT_EQ(pending(), 1);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(engine_.accepted(), 1u);  // the source does not know it yet
  // Kill the source's non-blocked connection (the other one sits in XREADGROUP BLOCK).
  auto list = server_->cmd({"CLIENT", "LIST"});
  ASSERT_FALSE(list.is_error());
  int killed = 0;
  size_t at = 0;
  const std::string& text = list.str;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.find("cmd=xreadgroup") != std::string::npos ||
        line.find("cmd=client") != std::string::npos || line.find("id=") != 0)
      continue;
    const std::string id = line.substr(3, line.find(' ') - 3);
    auto k = server_->cmd({"CLIENT", "KILL", "ID", id});
    if (!k.is_error() && k.integer == 1) ++killed;
  }
  ASSERT_EQ(killed, 1) << text;
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 2 && pending() == 0; }, 10s))
      << engine_.accepted() << " pending " << pending();
  EXPECT_GE((*src)->counters().reconnects.load(), 1u);
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, TrimsTheDeadLetterStreamOnlyWhenAsked) {
  engine_.add_tenant("acme");
  auto o = options();
  o.dead_letter_max_len = 10;
  auto src = RedisSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  for (int i = 0; i < 600; ++i) xadd("acme", numbered("bad", i), "{nope");
  ASSERT_TRUE(wait_for([&] { return (*src)->counters().dead_lettered.load() == 600; }))
      << (*src)->counters().dead_lettered.load();
  ASSERT_TRUE(wait_for([&] { return pending() == 0; }));
  const long long kept = server_->cmd({"XLEN", "events:dead"}).integer;
  // MAXLEN ~ trims whole radix-tree nodes (100 entries each by default): about 10, never 600.
  EXPECT_GE(kept, 10);
  EXPECT_LE(kept, 250);
  // The newest dead letter is the last entry refused.
  auto last = server_->cmd({"XREVRANGE", "events:dead", "+", "-", "COUNT", "1"});
  ASSERT_EQ(last.elements.size(), 1u);
  const auto& f = last.elements[0].elements[1].elements;
  bool found = false;
  for (size_t i = 0; i + 1 < f.size(); i += 2)
    if (f[i].str == "id") found = f[i + 1].str == "bad599";
  EXPECT_TRUE(found);
  (*src)->stop(1s);
}

// cluster = true: each stream is read with its own XREADGROUP on the node that owns its slot
// (the streams here are on three different primaries), the dead letters go to a fourth key.
TEST(RedisSourceCluster, ReadsStreamsOnEveryPrimaryOfACluster) {
  TempDir dir("ringcast-intake-cluster");
  auto cluster = test::RedisCluster::start(dir.path(), 3);
  std::vector<std::string> streams;
  std::vector<int> owners;
  for (int i = 0; streams.size() < 3 && i < 200; ++i) {
    std::string key = numbered("in:", i);
    const int owner = cluster->owner_of(cluster->key_slot(key));
    if (owner < 0 || std::find(owners.begin(), owners.end(), owner) != owners.end()) continue;
    owners.push_back(owner);
    streams.push_back(key);
  }
  ASSERT_EQ(streams.size(), 3u);
  IntakeFakeEngine engine;
  engine.add_tenant("acme");
  RedisSourceOptions o;
  o.name = "cluster";
  o.cluster = true;
  o.servers = {cluster->addresses().front()};  // one seed: the rest from CLUSTER SLOTS
  o.streams = streams;
  o.consumer = "node-a";
  o.dead_letter_stream = "dead";
  o.block = 100ms;
  o.retry_delay = 50ms;
  o.status_interval = 50ms;
  auto src = RedisSource::start(o, engine);
  ASSERT_TRUE(src.ok()) << (src.ok() ? "" : src.error().reason_or_code());
  constexpr int kPer = 100;
  for (size_t s = 0; s < streams.size(); ++s) {
    auto& node = cluster->node(static_cast<size_t>(owners[s]));
    for (int i = 0; i < kPer; ++i) {
      auto r = node.cmd({"XADD", streams[s], "*", "tenant", "acme", "id",
                         numbered(streams[s].c_str(), i), "type", "t", "payload", "{}"});
      ASSERT_FALSE(r.is_error()) << r.str;
    }
  }
  auto& dead_owner =
      cluster->node(static_cast<size_t>(cluster->owner_of(cluster->key_slot("dead"))));
  auto& first = cluster->node(static_cast<size_t>(owners[0]));
  ASSERT_FALSE(first
                   .cmd({"XADD", streams[0], "*", "tenant", "nobody", "id", "x", "type", "t",
                         "payload", "{}"})
                   .is_error());
  auto group_pending = [&](size_t s) {
    auto r =
        cluster->node(static_cast<size_t>(owners[s])).cmd({"XPENDING", streams[s], "ringcast"});
    return r.is_error() || r.elements.empty() ? -1 : r.elements[0].integer;
  };
  ASSERT_TRUE(wait_for([&] {
    return engine.accepted() == 3 * kPer && group_pending(0) == 0 && group_pending(1) == 0 &&
           group_pending(2) == 0;
  })) << engine.accepted();
  EXPECT_EQ((*src)->counters().dead_lettered.load(), 1u);
  EXPECT_EQ(dead_owner.cmd({"XLEN", "dead"}).integer, 1);
  EXPECT_TRUE(wait_for([&] { return (*src)->state() == SourceState::kReading; }));
  (*src)->stop(1s);
}

// A primary of the cluster SIGKILLed while the source reads a stream it holds: its replica is
// promoted, the source's client learns the new slot map by itself, and the entries added after
// the failover are read and acked on the new primary.
TEST(RedisSourceCluster, KeepsReadingAcrossAPrimaryFailover) {
  TempDir dir("ringcast-intake-failover");
  test::RedisClusterOptions co;
  co.primaries = 3;
  co.replicas_per_primary = 1;
  auto cluster = test::RedisCluster::start(dir.path(), co);
  std::string stream;
  for (int i = 0; stream.empty() && i < 200; ++i) {
    std::string key = numbered("fo:", i);
    if (cluster->owner_of(cluster->key_slot(key)) == 1) stream = key;
  }
  ASSERT_FALSE(stream.empty());
  const int slot = cluster->key_slot(stream);
  IntakeFakeEngine engine;
  engine.add_tenant("acme");
  RedisSourceOptions o;
  o.name = "failover";
  o.cluster = true;
  o.servers = {cluster->node(0).address(), cluster->node(1).address(), cluster->node(2).address()};
  o.streams = {stream};
  o.consumer = "node-a";
  o.dead_letter_stream = "dead";
  o.block = 100ms;
  o.retry_delay = 50ms;
  o.status_interval = 100ms;
  o.command_timeout = 500ms;
  auto src = RedisSource::start(o, engine);
  ASSERT_TRUE(src.ok());
  auto add = [&](int from, int to) {
    auto& node = cluster->node(static_cast<size_t>(cluster->owner_of(slot)));
    for (int i = from; i < to; ++i) {
      auto r = node.cmd({"XADD", stream, "*", "tenant", "acme", "id", numbered("f", i), "type", "t",
                         "payload", "{}"});
      ASSERT_FALSE(r.is_error()) << r.str;
    }
  };
  add(0, 100);
  ASSERT_TRUE(wait_for([&] { return engine.accepted() == 100; })) << engine.accepted();
  cluster->node(1).kill();
  ASSERT_TRUE(cluster->wait_failover(1, 15s));
  ASSERT_NE(cluster->owner_of(slot), 1);
  add(100, 200);
  ASSERT_TRUE(wait_for([&] { return engine.accepted() == 200; }, 20s)) << engine.accepted();
  auto pending_now = [&] {
    auto r = cluster->node(static_cast<size_t>(cluster->owner_of(slot)))
                 .cmd({"XPENDING", stream, "ringcast"});
    return r.is_error() || r.elements.empty() ? -1 : r.elements[0].integer;
  };
  EXPECT_TRUE(wait_for([&] { return pending_now() == 0; }, 10s)) << pending_now();
  (*src)->stop(1s);
}

TEST_F(RedisSourceTest, RefusesOptionsItCannotRun) {
  auto o = options();
  o.streams.clear();
  EXPECT_FALSE(RedisSource::start(o, engine_).ok());
  o = options();
  o.dead_letter_stream.clear();
  EXPECT_FALSE(RedisSource::start(o, engine_).ok());
  o = options();
  o.servers = {"127.0.0.1:1", "127.0.0.1:2"};
  EXPECT_FALSE(RedisSource::start(o, engine_).ok());
}

TEST(RedisSourceRender, MetricsAndStatusNameTheSourceNotTenants) {
  IntakeFakeEngine engine;
  EXPECT_EQ(render_metrics({}), "");
  EXPECT_EQ(render_status_json({}), "{\"sources\":[]}");
  EXPECT_EQ(default_consumer_name("/tmp/a"), default_consumer_name("/tmp/a"));
  EXPECT_NE(default_consumer_name("/tmp/a"), default_consumer_name("/tmp/b"));
}

}  // namespace
}  // namespace ringcast::intake
