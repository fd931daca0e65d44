// End to end, storage.backend = "redis": the Redis server's disk fills up or turns read-only
// (docs/durability.md). One redis-server with its AOF on the power-cut filesystem
// (tests/support/powercut, docs/powercut-fs.md) under a byte budget, or switched read-only;
// `ringcast serve` on it. Once Redis cannot append to its AOF it refuses writes (MISCONF), or,
// under appendfsync always, exits; ringcast must answer intake 503 with Retry-After and
// acknowledge nothing Redis did not take, keep running, say so on /healthz, and take intake
// again by itself once Redis can write (is restarted), every acknowledged event then delivered.
#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/e2e/powercut_mount.h"
#include "tests/support/redis_server.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::PowerCutFs;
using test::RedisServer;
using test::SinkProcess;
using test::TempDir;

uint64_t used_bytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return 0;
  return (st.f_blocks - st.f_bfree) * st.f_frsize;
}

std::string payload_of(int i) {
  std::string pad;
  for (int k = 0; k < 24; ++k) pad += std::to_string((i * 7919 + k * 104729) % 1000003) + "-";
  return "{\"i\": " + std::to_string(i) + ", \"pad\": \"" + pad + "\"}";
}

// appendfsync, and the fault: "full" (a byte budget) or "read-only" (the filesystem turns
// read-only, as ext4 does after errors=remount-ro).
struct Case {
  std::string appendfsync;
  std::string fault;
};

class E2eRedisDiskFull : public ::testing::TestWithParam<Case> {};

TEST_P(E2eRedisDiskFull, IntakeAnswers503WhileRedisCannotWriteItsAofAndResumesByItself) {
  RINGCAST_E2E_SINGLE_NODE_ONLY("one redis-server of its own on a FUSE filesystem");
  if (!RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  TempDir mnt("e2e-rdf-mnt"), logs("e2e-rdf-log"), sink_dir("e2e-rdf-sink");
  PowerCutFs::Options fo;
  fo.journaled_namespace = true;  // Redis 7 never fsyncs the directory of appendonlydir
  std::unique_ptr<PowerCutFs> fs;
  mount_powercut_or_skip(mnt.path(), fo, fs);
  if (fs == nullptr) return;
  test::RedisServerOptions ro;
  ro.appendonly = true;
  ro.extra_config = {"appendfsync " + GetParam().appendfsync,
                     "logfile " + logs.path() + "/redis.log"};
  auto redis = RedisServer::start(fs->mount_point(), ro);
  DaemonOptions o;
  o.env = {"RINGCAST_STORAGE_BACKEND=redis", "RINGCAST_STORAGE_REDIS_SERVERS=" + redis->address(),
           "RINGCAST_STORAGE_REDIS_WAIT_REPLICAS=0"};
  auto d = std::make_unique<Daemon>(o);
  ASSERT_NO_THROW(d->start());
  SinkProcess sink = SinkProcess::start({"--quiet"}, sink_dir.path());
  Reply cr = create_endpoint(*d, "rdf", "{\"url\":" + quote(sink.base_url() + "/r") + "}");
  ASSERT_EQ(cr.status, 201) << cr.describe();

  std::map<int, std::string> acked;
  int next = 0;
  auto submit = [&](int i) {
    Reply r = submit_event(*d, "rdf", "rdf-" + std::to_string(i), "disk.event", payload_of(i));
    if (r.status == 202 || r.status == 200) acked[i] = payload_of(i);
    return r;
  };
  for (; next < 20; ++next) ASSERT_EQ(submit(next).status, 202) << d->output();

  // About 200 KiB more fit; then Redis cannot append to its AOF.
  const bool read_only = GetParam().fault == "read-only";
  if (read_only) {
    fs->read_only(true);
  } else {
    fs->enospc_after(used_bytes(fs->mount_point()) + (200 << 10));
  }
  Reply refused;
  for (int k = 0; k < 5000; ++k) {
    refused = submit(next++);
    if (refused.status != 202 && refused.status != 200) break;
  }
  ASSERT_EQ(refused.status, 503) << refused.describe() << "\n" << d->output();
  EXPECT_NE(refused.headers.find("Retry-After:"), std::string::npos) << refused.headers;
  EXPECT_GT(read_only ? fs->counters().erofs_errors : fs->counters().enospc_errors, 0u);
  // everysec: Redis answers MISCONF to every write until it can append again, and ringcast
  // says storage_full. always: Redis exits (it cannot keep its promise), and ringcast answers
  // 503 as for any Redis outage until it is restarted.
  const bool always = GetParam().appendfsync == "always";
  if (always) {
    EXPECT_TRUE(wait_until([&] { return !redis->running(); }, 5s)) << redis->log();
  } else {
    // The first refusal may come from a read that met the unconfirmed write first (503
    // store_unavailable); from then on the shards know Redis' disk is full.
    Reply full;
    EXPECT_TRUE(wait_until(
        [&] {
          full = submit(next++);
          return full.body.find("\"storage_full\"") != std::string::npos;
        },
        5s, 100ms))
        << full.describe();
    EXPECT_EQ(full.status, 503) << full.describe();
  }
  // Still full: more intake is refused, the daemon keeps running and says why.
  for (int k = 0; k < 5; ++k) {
    Reply r = submit(next++);
    EXPECT_EQ(r.status, 503) << r.describe();
  }
  if (!always) {
    Reply h = http_request(d->port(), "GET", "/healthz", "", {}, 5s);
    EXPECT_EQ(h.status, 200) << h.describe();
    EXPECT_NE(h.body.find("\"degraded\""), std::string::npos) << h.describe();
    EXPECT_NE(h.body.find("storage_full"), std::string::npos) << h.describe();
    EXPECT_EQ(http_request(d->port(), "GET", "/readyz", "", {}, 5s).status, 503);
  }
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(d->running()) << d->output();

  if (read_only) {
    fs->read_only(false);
  } else {
    fs->lift_enospc();
  }
  if (always) {
    ASSERT_NO_THROW(redis->restart()) << redis->log();
  }
  Reply again;
  EXPECT_TRUE(wait_until(
      [&] {
        again = submit(next++);
        return again.status == 202;
      },
      scaled(30s), 200ms))
      << again.describe() << "\n"
      << d->output() << redis->log();
  for (int k = 0; k < 10; ++k) EXPECT_EQ(submit(next++).status, 202);
  Reply h2 = http_request(d->port(), "GET", "/healthz", "", {}, 5s);
  EXPECT_NE(h2.body.find("\"ok\""), std::string::npos) << h2.describe();

  // Every acknowledged event is stored byte for byte and delivered.
  std::vector<std::string> ids;
  for (const auto& [i, payload] : acked) {
    Reply ev = d->call("GET", "/v1/tenants/rdf/events/rdf-" + std::to_string(i));
    ASSERT_EQ(ev.status, 200) << "rdf-" << i << " was acknowledged: " << ev.describe();
    EXPECT_NE(ev.body.find("\"payload\":" + payload), std::string::npos) << ev.describe();
    const Json j = ev.json();
    ids.push_back(j.has("event") ? j["event"]["message_id"].str() : j["message_id"].str());
  }
  EXPECT_TRUE(wait_until([&] { return missing_ids(sink, ids).empty(); }, scaled(30s), 100ms))
      << "acknowledged but never delivered: " << sample(missing_ids(sink, ids));
  std::printf("[ redis-full ] appendfsync=%s acknowledged=%zu refused meanwhile, then resumed\n",
              (GetParam().appendfsync + " " + GetParam().fault).c_str(), acked.size());
  auto st = d->terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d->output();
  d.reset();
  redis.reset();
  fs->unmount();
}

INSTANTIATE_TEST_SUITE_P(Appendfsync, E2eRedisDiskFull,
                         ::testing::Values(Case{"everysec", "full"}, Case{"always", "full"},
                                           Case{"everysec", "read-only"}),
                         [](const auto& info) {
                           std::string name = info.param.appendfsync + "_" + info.param.fault;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace ringcast::e2e
