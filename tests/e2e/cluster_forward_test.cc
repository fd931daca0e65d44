// End to end, cluster mode (operations.md §8 "Any node, any call"): three `ringcast serve`
// nodes on a 3 + 3 Redis Cluster (tests/e2e/cluster_rig.h). For a tenant owned by each node,
// every tenant-scoped call but intake is made on a node that does not own it — the call is
// forwarded to the owner (api/forward.h) and answers what the owner answers; reads on a
// third node see what the second one changed. Then the owner of a tenant is SIGKILLed: a call
// for it answers 503 with Retry-After at once (never hangs), and works again once another node
// holds the partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "tests/e2e/cluster_rig.h"
#include "tests/e2e/daemon.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

// A header of a reply (the name in any case); "" when absent.
std::string header_of(const Reply& r, std::string name) {
  std::string raw = r.headers;
  for (char& c : raw) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t at = raw.find("\r\n" + name + ":");
  if (at == std::string::npos) return "";
  size_t from = at + 2 + name.size() + 1;
  while (from < r.headers.size() && r.headers[from] == ' ') ++from;
  const size_t end = r.headers.find("\r\n", from);
  return r.headers.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

std::string endpoint_body(const Rig& rig) {
  std::string body = "{\"url\":";
  body += quote(rig.sink.base_url() + "/hooks");
  body += ",\"policy\":\"steady\",\"signature\":\"standard\",\"secret\":";
  body += quote(kSecret);
  body += '}';
  return body;
}

// Tenants "fw<n>", one owned by each node (by the views after convergence).
std::map<int, std::string> tenant_per_node(Rig& rig) {
  std::map<int, std::string> out;
  for (int n = 0; n < 400 && out.size() < rig.nodes.size(); ++n) {
    std::string t = "fw";
    t += std::to_string(n);
    const int owner = rig.owner_of(t);
    if (owner >= 0 && !out.count(owner)) out[owner] = t;
  }
  return out;
}

double forwards(const Daemon& d, const std::string& outcome) {
  return metric(scrape_metrics(d), "ringcast_api_forwards_total{outcome=\"" + outcome + "\"}");
}

TEST(E2eClusterForward, EveryTenantCallWorksOnEveryNode) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  Rig rig(3);
  ASSERT_TRUE(wait_until([&] { return rig.converged(); }, scaled(20s), 50ms))
      << rig.nodes[0]->output();
  const std::map<int, std::string> tenants = tenant_per_node(rig);
  ASSERT_EQ(tenants.size(), 3u);

  for (const auto& [owner_index, tenant] : tenants) {
    const Daemon& owner = *rig.nodes[static_cast<size_t>(owner_index)];
    const Daemon& second = *rig.nodes[static_cast<size_t>(owner_index + 1) % 3];
    const Daemon& third = *rig.nodes[static_cast<size_t>(owner_index + 2) % 3];
    const std::string& owner_id = rig.ids[static_cast<size_t>(owner_index)];
    SCOPED_TRACE("tenant " + tenant + " owned by " + owner_id);
    const std::string base = "/v1/tenants/" + tenant;

    // Created on a node that does not own the tenant: the owner made it.
    const size_t second_index = static_cast<size_t>(owner_index + 1) % 3;
    Reply made = rig.call_served(second_index, "POST", base + "/endpoints", endpoint_body(rig));
    ASSERT_EQ(made.status, 201) << made.describe();
    EXPECT_EQ(header_of(made, "X-Ringcast-Served-By"), owner_id);
    const std::string id = made.json()["id"].str();
    ASSERT_FALSE(id.empty());
    const std::string ep = base + "/endpoints/" + id;

    // Read on a third node: the same answer as the owner's.
    Reply on_third = third.call("GET", ep);
    Reply on_owner = owner.call("GET", ep);
    EXPECT_EQ(on_third.status, 200) << on_third.describe();
    EXPECT_EQ(on_third.body, on_owner.body);
    EXPECT_EQ(header_of(on_owner, "X-Ringcast-Served-By"), "");  // answered there, not relayed
    Reply list_second = second.call("GET", base + "/endpoints");
    EXPECT_EQ(list_second.status, 200);
    EXPECT_EQ(list_second.body, owner.call("GET", base + "/endpoints").body);

    // Update on one non-owner, seen on the other.
    Reply patched = second.call("PATCH", ep, R"({"event_types":["order.*"]})");
    EXPECT_EQ(patched.status, 200) << patched.describe();
    EXPECT_EQ(third.call("GET", ep).json()["event_types"][0].str(), "order.*");

    // Pause / resume.
    Reply paused = third.call("POST", ep + "/pause");
    EXPECT_EQ(paused.status, 200) << paused.describe();
    EXPECT_EQ(owner.call("GET", ep).json()["state"].str(), "paused");
    Reply resumed = second.call("POST", ep + "/resume");
    EXPECT_EQ(resumed.status, 200) << resumed.describe();
    EXPECT_EQ(third.call("GET", ep).json()["state"].str(), "enabled");

    // The breaker: read on both non-owners (as the owner answers), reset through one.
    Reply breaker = second.call("GET", base + "/breaker");
    EXPECT_EQ(breaker.status, 200) << breaker.describe();
    EXPECT_EQ(breaker.body, owner.call("GET", base + "/breaker").body);
    EXPECT_EQ(third.call("GET", base + "/breaker").body, breaker.body);
    Reply reset = third.call("POST", base + "/breaker/reset");
    EXPECT_EQ(reset.status, 200) << reset.describe();

    // The subscription.
    Reply sub = second.call("PUT", base + "/subscription", R"({"active":true})");
    EXPECT_EQ(sub.status, 200) << sub.describe();
    EXPECT_TRUE(sub.json()["active"].boolean());

    // A test event through a non-owner: the delivery is in the store, read on the third node.
    Reply tested = second.call("POST", ep + "/test");
    ASSERT_EQ(tested.status, 202) << tested.describe();
    const std::string delivery = tested.json()["delivery_id"].str();
    Reply d = third.call("GET", base + "/deliveries/" + delivery);
    EXPECT_EQ(d.status, 200) << d.describe();
    EXPECT_EQ(d.json()["delivery"]["endpoint"].str(), id);

    // Rotation (the old secret keeps signing during the overlap: the sink still verifies).
    Reply rotated = third.call("POST", ep + "/secret/rotate", "");
    EXPECT_EQ(rotated.status, 200) << rotated.describe();
    EXPECT_FALSE(rotated.json()["secret"].str().empty()) << rotated.describe();

    // Errors come back as the owner gives them.
    Reply missing = second.call("GET", base + "/endpoints/4242424242");
    EXPECT_EQ(missing.status, 404);
    EXPECT_EQ(missing.body, owner.call("GET", base + "/endpoints/4242424242").body);

    // Delete a second endpoint through a non-owner.
    Reply extra = third.call("POST", base + "/endpoints", endpoint_body(rig));
    ASSERT_EQ(extra.status, 201) << extra.describe();
    const std::string extra_ep = base + "/endpoints/" + extra.json()["id"].str();
    Reply deleted = second.call("DELETE", extra_ep);
    EXPECT_EQ(deleted.status, 200) << deleted.describe();
    EXPECT_EQ(owner.call("GET", extra_ep).status, 404);

    // Intake stays the owner's (the inbox is another piece): not forwarded.
    Reply intake = second.call("POST", base + "/events",
                               R"({"id":"e1","type":"order.paid","payload":{"n":1}})");
    EXPECT_TRUE(intake.status == 503 || intake.status == 202) << intake.describe();
    EXPECT_EQ(header_of(intake, "X-Ringcast-Served-By"), "");
  }
  double answered = 0;
  double received = 0;
  for (const auto& n : rig.nodes) {
    answered += forwards(*n, "answered");
    received += metric(scrape_metrics(*n), "ringcast_api_forwarded_received_total");
  }
  EXPECT_GE(answered, 3 * 14.0);
  EXPECT_EQ(answered, received);  // every forward reached its owner once, and only once
  std::printf("[ forward ] %.0f calls forwarded to their owners\n", answered);
}

TEST(E2eClusterForward, AKilledOwnerAnswers503ThenWorksOnceOwnedAgain) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  Rig rig(3);
  ASSERT_TRUE(wait_until([&] { return rig.converged(); }, scaled(20s), 50ms))
      << rig.nodes[0]->output();
  const std::map<int, std::string> tenants = tenant_per_node(rig);
  ASSERT_EQ(tenants.size(), 3u);
  const std::string tenant = tenants.at(2);  // owned by node-c
  const std::string base = "/v1/tenants/" + tenant;
  Reply made = rig.call_served(0, "POST", base + "/endpoints", endpoint_body(rig));
  ASSERT_EQ(made.status, 201) << made.describe();
  const std::string ep = base + "/endpoints/" + made.json()["id"].str();

  rig.up[2] = false;
  rig.nodes[2]->kill9();
  const auto killed_at = SteadyClock::now();
  // Its lease still names it for up to lease_ttl: the forward cannot connect; then nobody
  // holds it until a node takes it. Either way a 503 with Retry-After, at once.
  const auto t0 = SteadyClock::now();
  Reply during = rig.nodes[0]->call("GET", ep);
  const double took = ms_since(t0);
  EXPECT_EQ(during.status, 503) << during.describe();
  const std::string code = during.json()["error"]["code"].str();
  EXPECT_TRUE(code == "owner_unreachable" || code == "not_owner") << during.describe();
  EXPECT_EQ(header_of(during, "Retry-After"), "1");
  EXPECT_LT(took, 5500) << "a call for a dead owner must not hang";
  std::printf("[ forward ] owner SIGKILLed: answered %d %s after %.0f ms\n", during.status,
              code.c_str(), took);

  // Once a live node holds the partition, every node answers again (both of them, the owner
  // directly and the other through it).
  Reply after;
  const bool back = wait_until(
      [&] {
        after = rig.nodes[0]->call("GET", ep);
        return after.status == 200 && rig.nodes[1]->call("GET", ep).status == 200;
      },
      scaled(15s), 50ms);
  EXPECT_TRUE(back) << after.describe();
  std::printf("[ forward ] the endpoint answers again on every node %.0f ms after the kill\n",
              ms_since(killed_at));
  EXPECT_EQ(after.json()["id"].str(), made.json()["id"].str());
  const int new_owner = rig.owner_of(tenant);
  ASSERT_GE(new_owner, 0);
  EXPECT_NE(new_owner, 2);
  const Daemon& other = *rig.nodes[new_owner == 0 ? 1 : 0];
  Reply patched = other.call("PATCH", ep, R"({"event_types":["after.kill"]})");
  EXPECT_EQ(patched.status, 200) << patched.describe();
  EXPECT_EQ(
      rig.nodes[static_cast<size_t>(new_owner)]->call("GET", ep).json()["event_types"][0].str(),
      "after.kill");
  EXPECT_GE(forwards(*rig.nodes[0], "unreachable") + forwards(*rig.nodes[0], "no_owner") +
                forwards(*rig.nodes[0], "timeout"),
            1.0);
}

}  // namespace
}  // namespace ringcast::e2e
