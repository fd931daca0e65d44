// Retention in the daemon (SPEC R10.1): it runs on a thread of its own, at start and every
// storage.retention_interval (seen on /metrics), and SIGTERM still stops the daemon cleanly.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

// ringcast_retention_passes_total{outcome="done"} on /metrics; -1 when absent.
int64_t retention_passes(const Daemon& d) {
  const std::string metrics = d.call("GET", "/metrics").body;
  const std::string key = "ringcast_retention_passes_total{outcome=\"done\"} ";
  const size_t at = metrics.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(metrics.substr(at + key.size()));
}

TEST(E2eRetention, RunsEveryConfiguredIntervalAndSigtermStillStopsTheDaemon) {
  DaemonOptions o;
  o.env.push_back("RINGCAST_STORAGE_RETENTION_INTERVAL=50ms");
  Daemon d(o);
  d.start();
  // A pass at start, then one every 50 ms: a handful within the bound, while the main thread
  // only waits for signals.
  int64_t passes = -1;
  EXPECT_TRUE(wait_until(
      [&] {
        passes = retention_passes(d);
        return passes >= 5;
      },
      scaled(10s), 50ms))
      << "passes: " << passes << "\n"
      << d.output();
  auto st = d.terminate(scaled(10s));
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
  EXPECT_NE(d.output().find("SIGTERM: stopping intake"), std::string::npos) << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
