// End to end, cluster mode, SPEC R14.4 (docs/security.md "Between nodes"): a listener posing as
// a partition's owner — its address written into Redis over the owner's — receives a forwarded
// call and nothing it can reuse: no admin token, no tenant key, no Authorization or cookie;
// what it captured is a signed, single-use call that the real owner accepts once and then
// refuses as a replay, and that no longer holds for another tenant.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/e2e/cluster_rig.h"
#include "tests/e2e/daemon.h"
#include "tests/support/posing_listener.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

// SIGCONT on the way out, whatever the test did: the rig's teardown stops its nodes.
struct Stopped {
  explicit Stopped(pid_t p) : pid(p) { ::kill(pid, SIGSTOP); }
  ~Stopped() { resume(); }
  void resume() {
    if (pid > 0) ::kill(pid, SIGCONT);
    pid = -1;
  }
  pid_t pid;
};

TEST(E2eClusterTrust,
     AListenerPosingAsTheOwnerGetsNoReusableCredentialAndItsCaptureIsRefusedAgain) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  // Leases and membership outlast the few seconds the owner is stopped: it stays the owner and
  // a live member, so its address is still the one a forwarding node looks up.
  Rig rig(2, {"RINGCAST_CLUSTER_LEASE_TTL=10s", "RINGCAST_CLUSTER_MEMBER_TTL=8s"});
  ASSERT_TRUE(wait_until([&] { return rig.converged(); }, scaled(30s), 50ms))
      << rig.nodes[0]->output();
  std::string tenant;
  for (int n = 0; n < 400 && tenant.empty(); ++n) {
    const std::string t = "pose" + std::to_string(n);
    if (rig.owner_of(t) == 0) tenant = t;
  }
  ASSERT_FALSE(tenant.empty());
  Daemon& owner = *rig.nodes[0];
  Daemon& other = *rig.nodes[1];
  const std::string base = "/v1/tenants/" + tenant;
  Reply ep = rig.call_served(1, "POST", base + "/endpoints",
                             R"({"url":")" + rig.sink.base_url() +
                                 R"(/hooks","policy":"steady","secret":")" + kSecret + R"("})");
  ASSERT_EQ(ep.status, 201) << ep.describe();
  Reply made = rig.call_served(1, "POST", base + "/keys", "{}");
  ASSERT_EQ(made.status, 201) << made.describe();
  const std::string key = made.json()["key"].str();
  ASSERT_FALSE(key.empty());
  const std::string bearer = "Bearer " + key;
  Reply listed;
  ASSERT_TRUE(wait_until(
      [&] {
        listed = other.call_with_auth("GET", base + "/endpoints", "", bearer);
        return listed.status == 200;
      },
      scaled(10s)))
      << listed.describe();

  // The owner stops (its beats with it); its address in Redis becomes the poser's.
  test::PosingListener poser;
  const std::string planted = "http://127.0.0.1:" + std::to_string(poser.port);
  const std::string addr_key = "{rc}:addr";
  test::RedisServer& holder =
      rig.redis->node(static_cast<size_t>(rig.redis->owner_of(rig.redis->key_slot(addr_key))));
  const std::string real = holder.cmd({"HGET", addr_key, rig.ids[0]}).str;
  ASSERT_FALSE(real.empty());
  Stopped stopped(owner.pid());
  ASSERT_FALSE(holder.cmd({"HSET", addr_key, rig.ids[0], planted}).is_error());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  // The other node takes the address with its next beat (every 200 ms); until then it forwards
  // to the stopped owner, which does not answer (503 after the forward timeout).
  Reply through;
  ASSERT_TRUE(wait_until(
      [&] {
        through = other.call_with_auth("GET", base + "/endpoints", "", bearer);
        return through.status == 200;
      },
      scaled(7s), 100ms))
      << through.describe();
  const std::string captured = poser.request();
  ASSERT_FALSE(captured.empty());
  EXPECT_EQ(captured.find(key), std::string::npos) << "the tenant key reached the poser";
  EXPECT_EQ(captured.find(Daemon::kToken), std::string::npos);
  EXPECT_EQ(captured.find(Daemon::kClusterSecret), std::string::npos);
  for (const char* h : {"Authorization:", "authorization:", "Cookie:", "cookie:"})
    EXPECT_EQ(captured.find(h), std::string::npos) << h << "\n" << captured;
  EXPECT_NE(captured.find("X-Ringcast-Principal: v1 key rw "), std::string::npos) << captured;
  EXPECT_NE(captured.find("X-Ringcast-Signature: t="), std::string::npos) << captured;

  // The owner again, with its own address back.
  stopped.resume();
  ASSERT_FALSE(holder.cmd({"HSET", addr_key, rig.ids[0], real}).is_error());
  std::string replay = captured;
  const size_t host = replay.find("Host: ");
  ASSERT_NE(host, std::string::npos) << replay;
  replay.replace(host, replay.find("\r\n", host) - host, "Host: 127.0.0.1");
  const auto send = [&](const std::string& bytes) { return raw_request(owner.port(), bytes); };
  // Accepted once: a signed call it has not seen, within the clock window …
  Reply first = send(replay);
  EXPECT_EQ(first.status, 200) << first.describe();
  // … refused as a replay after.
  Reply again = send(replay);
  EXPECT_EQ(again.status, 401) << again.describe();
  EXPECT_EQ(again.json()["error"]["code"].str(), "forward_replayed") << again.describe();
  // Pointed at another tenant, its signature no longer holds.
  std::string moved = replay;
  const std::string from = "/tenants/" + tenant + "/";
  moved.replace(moved.find(from), from.size(), "/tenants/zeta/");
  Reply other_tenant = send(moved);
  EXPECT_EQ(other_tenant.status, 401) << other_tenant.describe();
  EXPECT_EQ(other_tenant.json()["error"]["code"].str(), "forward_bad_signature")
      << other_tenant.describe();
}

}  // namespace
}  // namespace ringcast::e2e
