// SPEC R14 (docs/security.md "Redis"), end to end: `ringcast serve` on Redis as an ACL user
// (storage.redis.username): its connections are that user's, intake and reads work, and a
// wrong password does not come up (a clear exit, not a node that runs without its store).
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/daemon.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

DaemonOptions on_redis(const std::string& address, const std::string& password) {
  DaemonOptions o;
  o.env = {"RINGCAST_STORAGE_BACKEND=redis",
           "RINGCAST_STORAGE_REDIS_SERVERS=" + address,
           "RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=0",
           "RINGCAST_STORAGE_REDIS_USERNAME=ringcast",
           "RINGCAST_STORAGE_REDIS_PASSWORD=" + password,
           "RINGCAST_STORAGE_REDIS_COMMAND_TIMEOUT=1s"};
  return o;
}

TEST(E2eRedisAcl, TheDaemonRunsAsItsRedisAclUserAndAWrongPasswordDoesNotComeUp) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  test::TempDir redis_dir("e2e-redis-acl");
  test::RedisServerOptions ro;
  ro.requirepass = "admin-pw-0123456789";
  ro.extra_config = {"user ringcast on >ringcast-pw-0123456789 ~* &* +@all"};
  auto redis = test::RedisServer::start(redis_dir.path(), ro);

  Daemon d(on_redis(redis->address(), "ringcast-pw-0123456789"));
  ASSERT_NO_THROW(d.start());
  Reply cr = create_endpoint(d, "acl", "{\"url\":\"http://127.0.0.1:9/x\"}");
  ASSERT_EQ(cr.status, 201) << cr.describe();
  ASSERT_EQ(submit_event(d, "acl", "e-1", "payment.created", "{\"n\":1}").status, 202);
  EXPECT_EQ(d.call("GET", "/v1/tenants/acl/events/e-1").status, 200);
  auto clients = redis->cmd({"CLIENT", "LIST"});
  EXPECT_NE(clients.str.find("user=ringcast"), std::string::npos) << clients.str;
  EXPECT_EQ(d.terminate().code, 0) << d.output();

  Daemon wrong(on_redis(redis->address(), "not-the-password-0123"));
  // The store asks 21 times (command_timeout 1 s each) before it gives up: about 23 s.
  EXPECT_THROW(wrong.start(60s), std::runtime_error);
  EXPECT_FALSE(wrong.running());
  EXPECT_NE(wrong.output().find("cannot start on the store"), std::string::npos) << wrong.output();
}

}  // namespace
}  // namespace ringcast::e2e
