// End to end: /metrics keeps transport failures apart from business outcomes (SPEC R12.8, R12.1).
// Real exchanges against ringcast-sink's fault modes (503, 502, a reset after the request was
// written, a timeout, a refused connection) move ringcast_attempts_total{outcome},
// ringcast_attempt_responses_total{class}, ringcast_transport_failures_total{kind} and
// ringcast_unknown_attempts_total by exact amounts; sends that ringcast's own back-pressure gave
// back unsent (SPEC R2.3) move none of them.
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

const char* const kOutcomes[] = {"success", "rejected", "retryable", "unknown"};
const char* const kClasses[] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
const char* const kKinds[] = {
    "dns", "connect", "tls", "timeout", "reset", "protocol", "refused_before_send"};

std::string outcome(const std::string& o) {
  return "ringcast_attempts_total{outcome=\"" + o + "\"}";
}
std::string cls(const std::string& c) {
  return "ringcast_attempt_responses_total{class=\"" + c + "\"}";
}
std::string kind(const std::string& k) {
  return "ringcast_transport_failures_total{kind=\"" + k + "\"}";
}

// after - before for every sample in `after` (a sample absent before counts from 0).
Metrics delta(const Metrics& before, const Metrics& after) {
  Metrics out;
  for (const auto& [k, v] : after) {
    auto it = before.find(k);
    out[k] = v - (it == before.end() ? 0 : it->second);
  }
  return out;
}

std::string make_endpoint(const Daemon& d, const std::string& tenant, const std::string& url,
                          const std::string& policy) {
  Reply r =
      create_endpoint(d, tenant, "{\"url\":" + quote(url) + ",\"policy\":" + quote(policy) + "}");
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.json()["id"].str();
}

bool terminal(const std::string& s) {
  return s == "delivered" || s == "failed" || s == "dead";
}

// Submits one event for `ep` and waits until its delivery is terminal; returns its detail.
Json deliver_one(const Daemon& d, const std::string& tenant, const std::string& ep,
                 const std::string& event_id) {
  EXPECT_EQ(submit_event(d, tenant, event_id, "job.done", "{}").status, 202) << event_id;
  Json det;
  wait_until(
      [&] {
        det = delivery_for_event(d, tenant, ep, event_id);
        return terminal(det["delivery"]["status"].str());
      },
      scaled(8s), 25ms);
  return det;
}

std::vector<std::string> attempt_codes(const Json& det) {
  std::vector<std::string> out;
  for (const Json& a : det["attempts"].items()) out.push_back(a["code"].str());
  return out;
}

TEST(E2eCounters, TransportFailuresAndBusinessOutcomesAreCountedApart) {
  DaemonOptions o;
  o.shards = 1;
  o.env = {"RINGCAST_TRANSPORT_REQUEST_TIMEOUT=600ms"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-counters");
  // Each rule misbehaves once; the retry (the "fast" ladder: 100 ms later) gets a 200.
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/e503=status=503;limit=1", "--fault", "/e502=status=502;limit=1",
       "--fault", "/reset=reset;limit=1", "--fault", "/slow=delay=3s;limit=1"},
      dir.path());
  const uint16_t closed_port = test::free_tcp_port();  // nobody listens there
  const std::string t = "ctr";
  const std::string ep503 = make_endpoint(d, t, sink.base_url() + "/e503", "fast");
  const std::string ep502 = make_endpoint(d, t, sink.base_url() + "/e502", "fast");
  const std::string ep_reset = make_endpoint(d, t, sink.base_url() + "/reset", "fast");
  const std::string ep_slow = make_endpoint(d, t, sink.base_url() + "/slow", "fast");
  // "quick": 3 attempts, then the endpoint is disabled (SPEC R8.1) and the delivery is dead.
  const std::string ep_refused =
      make_endpoint(d, t, "http://127.0.0.1:" + std::to_string(closed_port) + "/x", "quick");
  ASSERT_FALSE(ep503.empty() || ep502.empty() || ep_reset.empty() || ep_slow.empty() ||
               ep_refused.empty());
  // Pause all but one endpoint per step, so that each event reaches only the endpoint it is for
  // and one exchange at a time is on the wire.
  const std::vector<std::string> eps = {ep503, ep502, ep_reset, ep_slow, ep_refused};
  auto only = [&](const std::string& ep) {
    for (const std::string& e : eps) {
      const std::string action = e == ep ? "/resume" : "/pause";
      Reply r = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + e + action);
      ASSERT_EQ(r.status, 200) << r.describe();
    }
  };

  const Metrics before = scrape_metrics(d);
  ASSERT_FALSE(before.empty());

  only(ep503);
  Json det = deliver_one(d, t, ep503, "c-503");
  EXPECT_EQ(det["delivery"]["status"].str(), "delivered");
  EXPECT_EQ(attempt_codes(det), (std::vector<std::string>{"http_503", ""}));

  only(ep502);
  det = deliver_one(d, t, ep502, "c-502");
  EXPECT_EQ(det["delivery"]["status"].str(), "delivered");
  EXPECT_EQ(attempt_codes(det), (std::vector<std::string>{"http_502", ""}));
  EXPECT_EQ(det["attempts"][0]["outcome"].str(), "unknown") << "SPEC R12.1: a 502 is UNKNOWN";

  only(ep_reset);
  det = deliver_one(d, t, ep_reset, "c-reset");
  EXPECT_EQ(det["delivery"]["status"].str(), "delivered");
  EXPECT_EQ(attempt_codes(det), (std::vector<std::string>{"network_ECONNRESET", ""}));
  EXPECT_EQ(det["attempts"][0]["outcome"].str(), "unknown");
  EXPECT_TRUE(det["attempts"][0]["request_written"].boolean());

  only(ep_slow);
  det = deliver_one(d, t, ep_slow, "c-slow");
  EXPECT_EQ(det["delivery"]["status"].str(), "delivered");
  EXPECT_EQ(attempt_codes(det), (std::vector<std::string>{"timeout", ""}));
  EXPECT_EQ(det["attempts"][0]["outcome"].str(), "unknown");

  only(ep_refused);
  det = deliver_one(d, t, ep_refused, "c-refused");
  EXPECT_EQ(det["delivery"]["status"].str(), "dead") << det["delivery"]["last_code"].str();
  EXPECT_EQ(attempt_codes(det), (std::vector<std::string>(3, "network_ECONNREFUSED")));
  for (const Json& a : det["attempts"].items()) {
    EXPECT_FALSE(a["request_written"].boolean());
    EXPECT_EQ(a["outcome"].str(), "retryable");
  }

  // The per-attempt metrics are updated before each result is committed, so once every
  // delivery above is terminal they are final.
  const Metrics m = delta(before, scrape_metrics(d));
  // Business outcomes (SPEC R6, R12.1): 4 retries succeeded; 503 and 3 refusals retryable;
  // 502, reset and timeout UNKNOWN.
  EXPECT_EQ(metric(m, outcome("success")), 4);
  EXPECT_EQ(metric(m, outcome("retryable")), 1 + 3);
  EXPECT_EQ(metric(m, outcome("unknown")), 3);
  EXPECT_EQ(metric(m, outcome("rejected")), 0);
  EXPECT_EQ(metric(m, "ringcast_unknown_attempts_total"), 3);
  // HTTP answers by class: 4 x 200, 503 + 502; reset, timeout and 3 refusals had none.
  EXPECT_EQ(metric(m, cls("2xx")), 4);
  EXPECT_EQ(metric(m, cls("5xx")), 2);
  EXPECT_EQ(metric(m, cls("none")), 1 + 1 + 3);
  for (const char* c : {"1xx", "3xx", "4xx"}) EXPECT_EQ(metric(m, cls(c)), 0) << c;
  // Transport failures: only the exchanges that got no HTTP answer, by kind.
  EXPECT_EQ(metric(m, kind("reset")), 1);
  EXPECT_EQ(metric(m, kind("timeout")), 1);
  EXPECT_EQ(metric(m, kind("connect")), 3);
  for (const char* k : {"dns", "tls", "protocol", "refused_before_send"})
    EXPECT_EQ(metric(m, kind(k)), 0) << k;
  // Every attempt is in exactly one outcome and one class.
  double outcomes = 0, classes = 0, failures = 0;
  for (const char* x : kOutcomes) outcomes += metric(m, outcome(x));
  for (const char* x : kClasses) classes += metric(m, cls(x));
  for (const char* x : kKinds) failures += metric(m, kind(x));
  EXPECT_EQ(outcomes, 11);
  EXPECT_EQ(classes, 11);
  EXPECT_EQ(failures, metric(m, cls("none")));
  // R12.8: time spent UNKNOWN is measured; each of the 3 waited at least the 100 ms pause.
  EXPECT_GE(metric(m, "ringcast_unknown_seconds_total"), 3 * 0.1 - 0.01);
  EXPECT_EQ(metric(m, "ringcast_deliveries_delivered_total"), 4);
  EXPECT_EQ(metric(m, "ringcast_deliveries_dead_total"), 1);
  EXPECT_EQ(metric(m, "ringcast_endpoints_disabled_total"), 1);
  for (const char* r : {"pacing", "connections", "queue_full"}) {
    EXPECT_EQ(metric(m, std::string("ringcast_sends_deferred_total{reason=\"") + r + "\"}"), 0)
        << r;
  }
  // The sink saw what the log says: one faulty exchange, then the same id again.
  for (const char* id : {"c-503", "c-502", "c-reset", "c-slow"})
    EXPECT_EQ(sink_lines_for(sink, message_id_of(d, t, id)), 2u) << id << "\n"
                                                                 << test::read_file(sink.ids_file);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// ringcast's own limits defer sends (one connection per host to a receiver that takes 300 ms;
// 5 sends per second per host), while one real 503 happens among them: the counters show that
// 503 and the successes, exactly, and no deferral in any attempt or transport-failure count.
TEST(E2eCounters, DeferredSendsAreNoAttemptsAndNoTransportFailures) {
  DaemonOptions o;
  o.shards = 1;
  o.env = {"RINGCAST_TRANSPORT_POOL_SIZE=1", "RINGCAST_TRANSPORT_HOST_RATE_PER_SECOND=5",
           "RINGCAST_TRANSPORT_MAX_QUEUE_WAIT=300ms"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-counters-defer");
  TempDir dir2("e2e-counters-defer2");
  SinkProcess slow = SinkProcess::start({"--quiet", "--fault", "/s=delay=300ms"}, dir.path());
  SinkProcess paced =
      SinkProcess::start({"--quiet", "--fault", "/p=status=503;limit=1"}, dir2.path());
  constexpr int kEach = 10;
  Reply r1 = create_endpoint(d, "dfr",
                             "{\"url\":" + quote(slow.base_url() + "/s") + ",\"policy\":\"fast\"," +
                                 "\"max_in_flight\":" + std::to_string(kEach) + "}");
  Reply r2 =
      create_endpoint(d, "dfr",
                      "{\"url\":" + quote(paced.base_url() + "/p") + ",\"policy\":\"fast\"," +
                          "\"max_in_flight\":" + std::to_string(kEach) + "}");
  ASSERT_EQ(r1.status, 201) << r1.describe();
  ASSERT_EQ(r2.status, 201) << r2.describe();
  const std::string ep_slow = r1.json()["id"].str(), ep_paced = r2.json()["id"].str();
  const Metrics before = scrape_metrics(d);

  // One bulk request: each event fans out to both endpoints, all due at once.
  std::string body;
  for (int i = 1; i <= kEach; ++i) {
    body += "{\"tenant\":\"dfr\",\"id\":\"d-" + std::to_string(i) +
            "\",\"type\":\"job.done\",\"payload\":{}}\n";
  }
  Reply br = d.call("POST", "/v1/events/bulk", body);
  ASSERT_EQ(br.status, 200) << br.describe();
  ASSERT_EQ(br.json()["accepted"].i64(), kEach) << br.body;
  auto delivered = [&](const std::string& ep) {
    Json l = list_deliveries(d, "dfr", ep);
    if (l.size() != static_cast<size_t>(kEach)) return false;
    for (const Json& del : l.items())
      if (del["status"].str() != "delivered") return false;
    return true;
  };
  EXPECT_TRUE(
      wait_until([&] { return delivered(ep_slow) && delivered(ep_paced); }, scaled(20s), 50ms))
      << d.call("GET", "/v1/tenants/dfr/deliveries?limit=30").body << "\n"
      << d.output();

  const Metrics m = delta(before, scrape_metrics(d));
  EXPECT_GT(metric(m, "ringcast_sends_deferred_total{reason=\"connections\"}"), 0)
      << "no send waited for the one connection: the test did not exercise the limit";
  EXPECT_GT(metric(m, "ringcast_sends_deferred_total{reason=\"pacing\"}"), 0)
      << "no send waited for a pacing token: the test did not exercise the pacing";
  // 20 deliveries, one of which got a 503 first: 21 attempts, nothing else.
  EXPECT_EQ(metric(m, outcome("success")), 2 * kEach);
  EXPECT_EQ(metric(m, outcome("retryable")), 1);
  EXPECT_EQ(metric(m, outcome("unknown")), 0);
  EXPECT_EQ(metric(m, outcome("rejected")), 0);
  EXPECT_EQ(metric(m, "ringcast_unknown_attempts_total"), 0);
  EXPECT_EQ(metric(m, cls("2xx")), 2 * kEach);
  EXPECT_EQ(metric(m, cls("5xx")), 1);
  EXPECT_EQ(metric(m, cls("none")), 0);
  for (const char* k : kKinds) EXPECT_EQ(metric(m, kind(k)), 0) << k;
  EXPECT_EQ(metric(scrape_metrics(d), "ringcast_deliveries_deferred"), 0);
  // The attempt log agrees: 21 attempt records, one per exchange the sinks saw.
  int64_t records = 0;
  for (const std::string& ep : {ep_slow, ep_paced}) {
    const Json l = list_deliveries(d, "dfr", ep);
    for (const Json& del : l.items()) {
      records += static_cast<int64_t>(get_delivery(d, "dfr", del["id"].str())["attempts"].size());
    }
  }
  EXPECT_EQ(records, 2 * kEach + 1);
  EXPECT_EQ(slow.ids().size() + paced.ids().size(), static_cast<size_t>(2 * kEach + 1));
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
