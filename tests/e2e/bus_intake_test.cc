// End to end: intake from a Redis Stream (ISSUE 15) with real processes — redis-server, the
// daemon(s) and a verifying ringcast-sink. Entries XADDed to the stream are delivered once and
// correctly signed; bad entries land in the dead-letter stream with their reason; a daemon
// SIGKILLed mid-stream loses nothing and leaves nothing pending once restarted; two daemons on
// one consumer group split the entries, and when one is killed the other claims what it left.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/redis_server.h"

namespace ringcast::e2e {
namespace {

using test::RedisServer;
using test::SinkProcess;
using test::TempDir;

constexpr const char* kSecret = "whsec_ZTJlLWJ1cy1pbnRha2Utc2VjcmV0LWtleS0wMQ==";
constexpr const char* kTenant = "bus-tenant";

std::string intake_toml(const RedisServer& r, const std::string& extra = "") {
  return "[[intake.redis]]\nname = \"bus\"\nservers = [\"" + r.address() +
         "\"]\nstreams = [\"events\"]\ndead_letter_stream = \"events:dead\"\nblock = \"200ms\"\n"
         "batch = 256\n" +
         extra;
}

SinkProcess verifying_sink(const TempDir& dir) {
  return SinkProcess::start(
      {"--verify", "standard", "--secret", kSecret, "--ids-file", dir.file("ids.txt"), "--quiet"},
      dir.path());
}

void make_endpoint(const Daemon& d, const SinkProcess& sink) {
  Reply r = create_endpoint(
      d, kTenant,
      "{\"url\":" + quote(sink.base_url() + "/hooks") +
          ",\"policy\":\"fast\",\"signature\":\"standard\",\"secret\":" + quote(kSecret) + "}");
  ASSERT_EQ(r.status, 201) << r.describe();
}

std::string event_id(int i) {
  return "bus-e" + std::to_string(i);
}

// XADDs events [from, to) in pipelined groups of 100 on one connection each.
void xadd_events(const RedisServer& r, int from, int to) {
  for (int i = from; i < to; i += 100) {
    std::vector<std::vector<std::string>> cmds;
    for (int k = i; k < std::min(to, i + 100); ++k)
      cmds.push_back({"XADD", "events", "*", "tenant", kTenant, "id", event_id(k), "type",
                      "order.paid", "payload", "{\"n\": " + std::to_string(k) + "}"});
    for (const auto& rep : r.cmds(cmds)) ASSERT_FALSE(rep.is_error()) << rep.str;
  }
}

long long pending(const RedisServer& r) {
  auto rep = r.cmd({"XPENDING", "events", "ringcast"});
  if (rep.is_error() || rep.elements.empty()) return -1;
  return rep.elements[0].integer;
}

std::vector<std::string> ids(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(event_id(i));
  return out;
}

TEST(E2eBusIntake, XaddedEventsAreDeliveredOnceSignedAndBadOnesDeadLettered) {
  TempDir dir("e2e-bus");
  TempDir redis_dir("e2e-bus-redis");
  auto redis = RedisServer::start(redis_dir.path());
  SinkProcess sink = verifying_sink(dir);
  DaemonOptions o;
  o.extra_toml = intake_toml(*redis);
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  make_endpoint(d, sink);

  constexpr int kEvents = 300;
  xadd_events(*redis, 0, kEvents);
  // Bad entries: invalid JSON, a missing field, an unknown tenant, a conflict.
  ASSERT_FALSE(redis
                   ->cmd({"XADD", "events", "*", "tenant", kTenant, "id", "bad-json", "type", "t",
                          "payload", "{nope"})
                   .is_error());
  ASSERT_FALSE(
      redis->cmd({"XADD", "events", "*", "tenant", kTenant, "id", "no-type", "payload", "{}"})
          .is_error());
  ASSERT_FALSE(redis
                   ->cmd({"XADD", "events", "*", "tenant", "nobody", "id", "x", "type", "t",
                          "payload", "{}"})
                   .is_error());
  ASSERT_FALSE(redis
                   ->cmd({"XADD", "events", "*", "tenant", kTenant, "id", event_id(0), "type",
                          "order.paid", "payload", "{\"other\": true}"})
                   .is_error());
  // A repeat of an event already taken: a duplicate, acked, not delivered again.
  xadd_events(*redis, 0, 1);

  std::vector<std::string> msg_ids;
  ASSERT_TRUE(wait_until(
      [&] {
        msg_ids = message_ids_of(d, kTenant, ids(kEvents));
        return std::count(msg_ids.begin(), msg_ids.end(), "") == 0;
      },
      scaled(20s)))
      << d.output();
  ASSERT_TRUE(wait_until([&] { return missing_ids(sink, msg_ids).empty(); }, scaled(20s)))
      << sink.stats_json() << "\nmissing: " << sample(missing_ids(sink, msg_ids));
  ASSERT_TRUE(wait_until([&] { return pending(*redis) == 0; }, scaled(10s))) << pending(*redis);
  std::this_thread::sleep_for(300ms);  // room for a second delivery, if there were one
  for (const auto& m : msg_ids) EXPECT_EQ(sink_lines_for(sink, m), 1u) << m;
  EXPECT_EQ(sink.stats_value("bad_signatures"), 0) << sink.stats_json();

  // The dead-letter stream: each bad entry with its fields and reason.
  auto dead = redis->cmd({"XRANGE", "events:dead", "-", "+"});
  std::map<std::string, std::string> code_by_id;
  for (const auto& e : dead.elements) {
    std::map<std::string, std::string> f;
    for (size_t i = 0; i + 1 < e.elements[1].elements.size(); i += 2)
      f[e.elements[1].elements[i].str] = e.elements[1].elements[i + 1].str;
    EXPECT_FALSE(f["error_message"].empty());
    code_by_id[f["id"]] = f["error_code"];
  }
  EXPECT_EQ(code_by_id.size(), 4u);
  EXPECT_EQ(code_by_id["bad-json"], "invalid_json");
  EXPECT_EQ(code_by_id["no-type"], "missing_field");
  EXPECT_EQ(code_by_id["x"], "unknown_tenant");
  EXPECT_EQ(code_by_id[event_id(0)], "conflict");

  Metrics m = scrape_metrics(d);
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"accepted\"}"),
            kEvents);
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"duplicate\"}"), 1);
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"dead_lettered\"}"), 4);
  Reply st = d.call("GET", "/v1/intake");
  ASSERT_EQ(st.status, 200) << st.describe();
  Json sj = st.json();
  ASSERT_EQ(sj["sources"].size(), 1u) << st.body;
  EXPECT_EQ(sj["sources"][0]["name"].str(), "bus");
  EXPECT_EQ(sj["sources"][0]["state"].str(), "reading") << st.body;
  auto t = d.terminate();
  EXPECT_TRUE(t.ok()) << t.str() << "\n" << d.output();
}

TEST(E2eBusIntake, SigkillMidStreamLosesNothingAndLeavesNothingPending) {
  TempDir dir("e2e-bus-kill");
  TempDir redis_dir("e2e-bus-redis");
  auto redis = RedisServer::start(redis_dir.path());
  SinkProcess sink = verifying_sink(dir);
  DaemonOptions o;
  // No claim can rescue the entries within the test: the restart must re-read its own.
  o.extra_toml = intake_toml(*redis, "claim_idle = \"120s\"\n");
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  make_endpoint(d, sink);

  constexpr int kEvents = 3000;
  std::thread producer([&] { xadd_events(*redis, 0, kEvents); });
  // Kill once part of the stream has been taken (some acked, some not).
  wait_until(
      [&] {
        return metric(scrape_metrics(d),
                      "ringcast_intake_entries_total{source=\"bus\",result=\"acked\"}") >= 300;
      },
      scaled(20s));
  d.kill9();
  producer.join();
  const long long left = pending(*redis);
  ASSERT_NO_THROW(d.start());  // same data dir: same consumer name; reads its pending first

  std::vector<std::string> msg_ids;
  ASSERT_TRUE(wait_until(
      [&] {
        msg_ids = message_ids_of(d, kTenant, ids(kEvents));
        return std::count(msg_ids.begin(), msg_ids.end(), "") == 0;
      },
      scaled(30s)))
      << d.output();
  ASSERT_TRUE(wait_until([&] { return missing_ids(sink, msg_ids).empty(); }, scaled(30s)))
      << sink.stats_json() << "\nmissing: " << sample(missing_ids(sink, msg_ids));
  EXPECT_TRUE(wait_until([&] { return pending(*redis) == 0; }, scaled(10s))) << pending(*redis);
  EXPECT_EQ(sink.stats_value("bad_signatures"), 0);
  std::cerr << "pending at the kill: " << left << "\n";
  auto t = d.terminate();
  EXPECT_TRUE(t.ok()) << t.str() << "\n" << d.output();
}

TEST(E2eBusIntake, TwoConsumersSplitTheStreamAndTheSurvivorClaimsTheDeadOnesEntries) {
  TempDir dir("e2e-bus-two");
  TempDir redis_dir("e2e-bus-redis");
  auto redis = RedisServer::start(redis_dir.path());
  SinkProcess sink = verifying_sink(dir);
  DaemonOptions o;
  o.extra_toml = intake_toml(*redis, "claim_idle = \"1s\"\nclaim_interval = \"200ms\"\n");
  Daemon a(o);
  Daemon b(o);
  ASSERT_NO_THROW(a.start());
  ASSERT_NO_THROW(b.start());
  make_endpoint(a, sink);
  make_endpoint(b, sink);

  constexpr int kEvents = 2000;
  std::thread producer([&] { xadd_events(*redis, 0, kEvents); });
  auto read_by = [](const Daemon& d) {
    return metric(scrape_metrics(d),
                  "ringcast_intake_entries_total{source=\"bus\",result=\"read\"}");
  };
  // Both consumers take part before one dies.
  wait_until([&] { return read_by(a) >= 100 && read_by(b) >= 100; }, scaled(20s));
  EXPECT_GT(read_by(a), 0);
  EXPECT_GT(read_by(b), 0);
  const std::string consumer_a = a.call("GET", "/v1/intake").json()["sources"][0]["consumer"].str();
  const std::string consumer_b = b.call("GET", "/v1/intake").json()["sources"][0]["consumer"].str();
  ASSERT_FALSE(consumer_a.empty());
  ASSERT_NE(consumer_a, consumer_b);  // one per node (data dir), stable across restarts
  a.kill9();
  producer.join();
  // What the dead consumer holds: pending for it, to be claimed by b (XAUTOCLAIM, 1 s idle).
  long long left_by_a = 0;
  auto summary = redis->cmd({"XPENDING", "events", "ringcast"});
  if (summary.elements.size() == 4) {
    for (const auto& c : summary.elements[3].elements)
      if (c.elements.size() == 2 && c.elements[0].str == consumer_a)
        left_by_a = std::stoll(c.elements[1].str);
  }
  std::cerr << "entries pending for the killed consumer: " << left_by_a << "\n";

  EXPECT_TRUE(wait_until([&] { return pending(*redis) == 0; }, scaled(30s)))
      << pending(*redis) << "\n"
      << b.output();
  const double claimed_b =
      metric(scrape_metrics(b), "ringcast_intake_entries_total{source=\"bus\",result=\"claimed\"}");
  EXPECT_GE(claimed_b, static_cast<double>(left_by_a));

  // Restart `a` on its data dir: what it accepted before dying is delivered from its own store.
  // Every event is in at least one store and was delivered from one that holds it.
  ASSERT_NO_THROW(a.start());
  std::string lost;
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& id : ids(kEvents)) {
          std::string ma = message_id_of(a, kTenant, id);
          std::string mb = message_id_of(b, kTenant, id);
          if (!ma.empty() && missing_ids(sink, {ma}).empty()) continue;
          if (!mb.empty() && missing_ids(sink, {mb}).empty()) continue;
          lost = id + (ma.empty() && mb.empty() ? " (in neither store)" : " (not delivered)");
          return false;
        }
        return true;
      },
      scaled(40s)))
      << lost << "\n"
      << sink.stats_json() << "\n"
      << a.output() << "\n"
      << b.output();
  EXPECT_EQ(pending(*redis), 0);
  EXPECT_GT(read_by(b), 0);
  EXPECT_TRUE(b.terminate().ok()) << b.output();
  EXPECT_TRUE(a.terminate().ok()) << a.output();
}

}  // namespace
}  // namespace ringcast::e2e
