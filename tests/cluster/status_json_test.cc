// render_cluster_status_json (cluster/status_json.h), the body of GET /v1/cluster: parsed
// back with simdjson, every field is checked, node ids that need escaping survive the round
// trip, and an empty (not yet synced) view is valid JSON too.
#include "cluster/status_json.h"

#include <gtest/gtest.h>

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringcast::cluster {
namespace {

// The keys of an object, in order.
std::vector<std::string> keys_of(simdjson::dom::object o) {
  std::vector<std::string> out;
  for (auto kv : o) out.emplace_back(kv.key);
  return out;
}

std::string str(simdjson::dom::element el, std::string_view key) {
  std::string_view s;
  if (el[key].get(s)) return "<missing " + std::string(key) + ">";
  return std::string(s);
}

uint64_t num(simdjson::dom::element el, std::string_view key) {
  uint64_t v = 0;
  EXPECT_FALSE(el[key].get(v)) << "no unsigned " << key;
  return v;
}

TEST(ClusterStatusJson, EveryField) {
  ClusterStatus s;
  s.node_id = "node-b";
  s.members = {"node-a", "node-b", "node-c"};
  s.assigned = {86, 85, 85};
  s.owned = {{0, 3}, {1, 3}, {7, 1}, {255, 12}};
  s.releasing = 2;
  s.synced = true;
  LeaseCounters c;
  c.acquired = 11;
  c.released = 12;
  c.lost = 13;
  c.fenced = 14;
  c.acquire_refused = 15;
  c.renewals = 16;
  c.redis_errors = 17;
  const std::vector<std::string> redis = {"127.0.0.1:7000", "127.0.0.1:7001"};

  const std::string json = render_cluster_status_json(s, c, redis);
  simdjson::dom::parser p;
  simdjson::dom::element root;
  ASSERT_FALSE(p.parse(json).get(root)) << json;
  simdjson::dom::object obj;
  ASSERT_FALSE(root.get(obj)) << json;
  EXPECT_EQ(keys_of(obj),
            (std::vector<std::string>{"node_id", "synced", "members", "owned", "owned_count",
                                      "releasing", "redis_nodes", "counters"}))
      << json;

  EXPECT_EQ(str(root, "node_id"), "node-b");
  bool synced = false;
  ASSERT_FALSE(root["synced"].get(synced));
  EXPECT_TRUE(synced);

  simdjson::dom::array members;
  ASSERT_FALSE(root["members"].get(members)) << json;
  ASSERT_EQ(members.size(), 3u);
  const std::vector<std::pair<std::string, uint64_t>> want_members = {
      {"node-a", 86}, {"node-b", 85}, {"node-c", 85}};
  size_t i = 0;
  for (simdjson::dom::element m : members) {
    simdjson::dom::object mo;
    ASSERT_FALSE(m.get(mo));
    EXPECT_EQ(keys_of(mo), (std::vector<std::string>{"node_id", "assigned"}));
    EXPECT_EQ(str(m, "node_id"), want_members[i].first);
    EXPECT_EQ(num(m, "assigned"), want_members[i].second);
    ++i;
  }

  simdjson::dom::array owned;
  ASSERT_FALSE(root["owned"].get(owned)) << json;
  ASSERT_EQ(owned.size(), s.owned.size());
  i = 0;
  for (simdjson::dom::element o : owned) {
    simdjson::dom::object oo;
    ASSERT_FALSE(o.get(oo));
    EXPECT_EQ(keys_of(oo), (std::vector<std::string>{"partition", "epoch"}));
    EXPECT_EQ(num(o, "partition"), s.owned[i].partition);
    EXPECT_EQ(num(o, "epoch"), s.owned[i].epoch);
    ++i;
  }
  EXPECT_EQ(num(root, "owned_count"), 4u);
  EXPECT_EQ(num(root, "releasing"), 2u);

  simdjson::dom::array nodes;
  ASSERT_FALSE(root["redis_nodes"].get(nodes)) << json;
  std::vector<std::string> got_nodes;
  for (simdjson::dom::element n : nodes) {
    std::string_view v;
    ASSERT_FALSE(n.get(v));
    got_nodes.emplace_back(v);
  }
  EXPECT_EQ(got_nodes, redis);

  simdjson::dom::element counters = root["counters"];
  simdjson::dom::object co;
  ASSERT_FALSE(counters.get(co)) << json;
  EXPECT_EQ(keys_of(co), (std::vector<std::string>{"acquired", "released", "lost", "fenced",
                                                   "acquire_refused", "renewals", "redis_errors"}));
  EXPECT_EQ(num(counters, "acquired"), 11u);
  EXPECT_EQ(num(counters, "released"), 12u);
  EXPECT_EQ(num(counters, "lost"), 13u);
  EXPECT_EQ(num(counters, "fenced"), 14u);
  EXPECT_EQ(num(counters, "acquire_refused"), 15u);
  EXPECT_EQ(num(counters, "renewals"), 16u);
  EXPECT_EQ(num(counters, "redis_errors"), 17u);
}

TEST(ClusterStatusJson, StringsAreEscaped) {
  ClusterStatus s;
  s.node_id = std::string("a\"b\\c\n\x01\xc3\xa9");  // quote, backslash, control, é
  s.members = {s.node_id, "z</script>"};
  s.assigned = {200, 56};
  s.synced = true;
  LeaseCounters c;
  const std::vector<std::string> redis = {"host\"1:6379"};
  const std::string json = render_cluster_status_json(s, c, redis);
  simdjson::dom::parser p;
  simdjson::dom::element root;
  ASSERT_FALSE(p.parse(json).get(root)) << json;
  EXPECT_EQ(str(root, "node_id"), s.node_id);
  simdjson::dom::element m0, m1, n0;
  ASSERT_FALSE(root["members"].at(0).get(m0));
  ASSERT_FALSE(root["members"].at(1).get(m1));
  EXPECT_EQ(str(m0, "node_id"), s.node_id);
  EXPECT_EQ(str(m1, "node_id"), "z</script>");
  ASSERT_FALSE(root["redis_nodes"].at(0).get(n0));
  std::string_view v;
  ASSERT_FALSE(n0.get(v));
  EXPECT_EQ(v, "host\"1:6379");
  // Invalid UTF-8 in a node id still gives valid JSON (the writer repairs it).
  s.node_id = "bad\xff\xfe";
  ASSERT_FALSE(p.parse(render_cluster_status_json(s, c, redis)).get(root));
}

TEST(ClusterStatusJson, EmptyViewAndShortAssigned) {
  ClusterStatus s;
  s.node_id = "solo";
  LeaseCounters c;
  std::string json = render_cluster_status_json(s, c, {});
  EXPECT_EQ(json,
            R"({"node_id":"solo","synced":false,"members":[],"owned":[],"owned_count":0,)"
            R"("releasing":0,"redis_nodes":[],"counters":{"acquired":0,"released":0,"lost":0,)"
            R"("fenced":0,"acquire_refused":0,"renewals":0,"redis_errors":0}})");
  // `assigned` shorter than `members` (never from LeaseManager::status): the rest count 0.
  s.members = {"a", "b"};
  s.assigned = {256};
  json = render_cluster_status_json(s, c, {});
  simdjson::dom::parser p;
  simdjson::dom::element root, m1;
  ASSERT_FALSE(p.parse(json).get(root)) << json;
  ASSERT_FALSE(root["members"].at(1).get(m1)) << json;
  EXPECT_EQ(str(m1, "node_id"), "b");
  EXPECT_EQ(num(m1, "assigned"), 0u);
}

}  // namespace
}  // namespace ringcast::cluster
