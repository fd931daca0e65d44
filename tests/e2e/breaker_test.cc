// End to end: the per-tenant circuit breaker (SPEC R4) with an xhub-shaped millisecond policy.
// The sink goes down (its process is killed: connection refused), the breaker opens, holds the
// tenant's deliveries without spending attempts (R2.3, R4.6), probes one at a time (R4.3), and
// once the sink is back on the same port a probe succeeds, the breaker closes and the backlog
// drains (R4.4).
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

int64_t total_attempts(const Json& list) {
  int64_t n = 0;
  for (const Json& d : list.items()) n += d["attempts"].i64();
  return n;
}

// This test found the poll() spin fixed in 93f035a (tenant timer key rounded down: a turn in
// the same millisecond as reopen_at, but before it, re-armed the timer forever).
TEST(E2eBreaker, OpensHoldsProbesClosesAndDrains) {
  Daemon d;  // [engine.breaker]: >= 3 deliveries, 80 % failed, open 400 ms doubling to 800 ms
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-breaker");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const uint16_t port = sink.port;
  const std::string ids_file = sink.ids_file;
  const std::string t = "brk";
  Reply cr = create_endpoint(
      d, t,
      "{\"url\":" + quote(sink.base_url() + "/b") + ",\"policy\":\"hub\",\"signature\":\"xhub\"}");
  ASSERT_EQ(cr.status, 201) << cr.describe();
  const std::string ep = cr.json()["id"].str();
  const std::string breaker = "/v1/tenants/" + t + "/breaker";

  ASSERT_EQ(submit_event(d, t, "b-0", "order.created", "{}").status, 202);
  const std::string first = message_id_of(d, t, "b-0");
  ASSERT_TRUE(wait_until([&] { return sink_lines_for(sink, first) == 1; }, scaled(5s)));
  EXPECT_EQ(d.call("GET", breaker).json()["state"].str(), "closed");

  // The receiver goes away.
  sink.process.kill();
  std::vector<std::string> ids;
  for (int i = 1; i <= 5; ++i) {
    ids.push_back("b-" + std::to_string(i));
    ASSERT_EQ(submit_event(d, t, ids.back(), "order.created", "{}").status, 202);
  }
  ASSERT_TRUE(wait_until([&] { return d.call("GET", breaker).json()["state"].str() != "closed"; },
                         scaled(5s)))
      << d.call("GET", breaker).body << "\n"
      << d.output();

  // While it is open, attempts barely move: only probes (one per cycle, 400-800 ms apart) go
  // out. Without the breaker the 100 ms ladder would spend ~20 attempts per delivery here.
  const int64_t at_open = total_attempts(list_deliveries(d, t, ep));
  std::this_thread::sleep_for(2000ms);
  Json list = list_deliveries(d, t, ep);
  const int64_t later = total_attempts(list);
  EXPECT_LE(later - at_open, 6) << "attempts spent while the breaker was open: " << later - at_open
                                << "\n"
                                << d.call("GET", breaker).body;
  Json b = d.call("GET", breaker).json();
  EXPECT_GE(b["failed_probes"].i64(), 1) << "no probe went out while open: " << b["state"].str();
  EXPECT_NE(b["state"].str(), "closed");
  bool held = false;
  for (const Json& del : list.items()) {
    EXPECT_NE(del["status"].str(), "failed") << "held deliveries must not exhaust their budget";
    EXPECT_LT(del["attempts"].i64(), 11) << del["id"].str();
    held |= del["held_ms"].num() > 0;
  }
  EXPECT_TRUE(held) << "no delivery recorded time held by the breaker (R2.3)";
  // A delivery's attempt log shows why it failed before the hold: connection refused (or reset,
  // when the first try went out on the pooled keep-alive connection of the dead sink).
  Json det = delivery_for_event(d, t, ep, "b-1");
  ASSERT_GE(det["attempts"].size(), 1u);
  const std::string code = det["attempts"][0]["code"].str();
  EXPECT_TRUE(code == "network_ECONNREFUSED" || code == "network_ECONNRESET") << code;

  // The receiver comes back on the same port (same ids file): a probe succeeds, the breaker
  // closes and every held delivery goes out.
  SinkProcess back = SinkProcess::start(
      {"--quiet", "--listen", "127.0.0.1:" + std::to_string(port), "--ids-file", ids_file},
      dir.path());
  ASSERT_EQ(back.port, port);
  ids = message_ids_of(d, t, ids);
  EXPECT_TRUE(wait_until([&] { return missing_ids(back, ids).empty(); }, scaled(10s)))
      << "missing: " << sample(missing_ids(back, ids)) << "\n"
      << d.call("GET", breaker).body << "\n"
      << d.output();
  EXPECT_TRUE(wait_until([&] { return d.call("GET", breaker).json()["state"].str() == "closed"; },
                         scaled(5s)))
      << d.call("GET", breaker).body;
  EXPECT_TRUE(wait_until(
      [&] {
        Json l = list_deliveries(d, t, ep);
        for (const Json& del : l.items()) {
          if (del["status"].str() != "delivered") return false;
        }
        return l.size() == 6;
      },
      scaled(5s)))
      << d.call("GET", "/v1/tenants/" + t + "/deliveries?endpoint=" + ep).body;
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
