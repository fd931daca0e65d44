// End to end: ringcast's own back-pressure is never the receiver's failure (operations.md
// "What receivers get").
// A receiver's 429 + Retry-After holds only that endpoint's queue (SPEC R7), not the other
// tenants sharing its host; sends that wait too long for a pooled connection or a pacing token
// are given back deferred, not sent, and spend no attempt (SPEC R2.3), feed no breaker (R4.5)
// and count as no transport failure (R12.8). One shard, so every tenant shares one transport
// (its host pools and pacing buckets are per shard).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

std::string make_endpoint(const Daemon& d, const std::string& tenant, const std::string& url,
                          const std::string& policy, int max_in_flight) {
  Reply r = create_endpoint(
      d, tenant,
      "{\"url\":" + quote(url) + ",\"policy\":" + quote(policy) +
          ",\"signature\":\"xhub\",\"max_in_flight\":" + std::to_string(max_in_flight) + "}");
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.json()["id"].str();
}

// Events `prefix`-1 .. `prefix`-n for `tenant`, all in one NDJSON bulk request (so they are
// accepted, and due, together). Returns their ids; fails the test unless every line is a 202.
std::vector<std::string> submit_bulk(const Daemon& d, const std::string& tenant,
                                     const std::string& prefix, int n) {
  std::vector<std::string> ids;
  std::string body;
  for (int i = 1; i <= n; ++i) {
    ids.push_back(prefix + "-" + std::to_string(i));
    body += "{\"tenant\":" + quote(tenant) + ",\"id\":" + quote(ids.back()) +
            ",\"type\":\"order.created\",\"payload\":{\"n\":" + std::to_string(i) + "}}\n";
  }
  Reply r = d.call("POST", "/v1/events/bulk", body);
  EXPECT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json()["accepted"].i64(), n) << r.body;
  return ids;
}

bool all_delivered(const Daemon& d, const std::string& tenant, const std::string& ep, size_t n) {
  Json l = list_deliveries(d, tenant, ep);
  if (l.size() != n) return false;
  for (const Json& del : l.items()) {
    if (del["status"].str() != "delivered") return false;
  }
  return true;
}

// Every delivery of `ep` got exactly one attempt, a success that was no timeout.
void expect_one_clean_attempt_each(const Daemon& d, const std::string& tenant,
                                   const std::string& ep) {
  const Json list = list_deliveries(d, tenant, ep);
  for (const Json& del : list.items()) {
    const std::string id = del["id"].str();
    EXPECT_EQ(del["status"].str(), "delivered") << id;
    EXPECT_EQ(del["attempts"].i64(), 1) << "delivery " << id << " spent more than one attempt";
    Json det = get_delivery(d, tenant, id);
    ASSERT_EQ(det["attempts"].size(), 1u)
        << "delivery " << id << ": " << det["attempts"].size() << " attempt records";
    for (const Json& a : det["attempts"].items()) {
      EXPECT_NE(a["code"].str(), "timeout") << "delivery " << id;
      EXPECT_EQ(a["outcome"].str(), "success") << "delivery " << id << " " << a["code"].str();
    }
  }
}

void expect_no_transport_failures(const Metrics& m) {
  for (const char* kind :
       {"dns", "connect", "tls", "timeout", "reset", "protocol", "refused_before_send"}) {
    EXPECT_EQ(metric(m, std::string("ringcast_transport_failures_total{kind=\"") + kind + "\"}"), 0)
        << kind;
  }
}

// Tenant A's receiver path answers 429 + Retry-After: 3600. B and C have endpoints on other
// paths of the same sink (same host:port, same shard, same transport). A's 429 arrives before B
// and C submit anything: the old host-wide 429 throttle would have held them for an hour.
TEST(E2eBackpressure, RetryAfterHoldsOnlyTheEndpointThatAskedNotItsHost) {
  DaemonOptions o;
  o.shards = 1;
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-bp-shared");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/limited=status=429;retry_after=3600"}, dir.path());
  constexpr int kSlotsA = 2;  // A's max_in_flight
  constexpr int kEventsA = 6, kEventsBC = 10;
  const std::string ep_a = make_endpoint(d, "A", sink.base_url() + "/limited", "fast", kSlotsA);
  const std::string ep_b = make_endpoint(d, "B", sink.base_url() + "/b", "xhub", 0);
  const std::string ep_c = make_endpoint(d, "C", sink.base_url() + "/c", "xhub", 0);
  ASSERT_FALSE(ep_a.empty() || ep_b.empty() || ep_c.empty());

  const int64_t submitted_ms =
      std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::vector<std::string> ids_a = message_ids_of(d, "A", submit_bulk(d, "A", "a", kEventsA));
  // A's first sends come back 429 + Retry-After and the rest of its queue is held.
  ASSERT_TRUE(wait_until(
      [&] { return metric(scrape_metrics(d), "ringcast_deliveries_held_by_retry_after") > 0; },
      scaled(5s), 50ms))
      << "ids: " << test::read_file(sink.ids_file) << "\n"
      << d.call("GET", "/metrics").body;

  const std::vector<std::string> ids_b =
      message_ids_of(d, "B", submit_bulk(d, "B", "b", kEventsBC));
  const std::vector<std::string> ids_c =
      message_ids_of(d, "C", submit_bulk(d, "C", "c", kEventsBC));
  EXPECT_TRUE(wait_until(
      [&] {
        return all_delivered(d, "B", ep_b, kEventsBC) && all_delivered(d, "C", ep_c, kEventsBC);
      },
      scaled(8s), 50ms))
      << "B: " << d.call("GET", "/v1/tenants/B/deliveries?limit=20").body
      << "\nC: " << d.call("GET", "/v1/tenants/C/deliveries?limit=20").body << "\n"
      << d.output();
  expect_one_clean_attempt_each(d, "B", ep_b);
  expect_one_clean_attempt_each(d, "C", ep_c);
  for (const char* t : {"B", "C"}) {
    Json b = d.call("GET", std::string("/v1/tenants/") + t + "/breaker").json();
    EXPECT_EQ(b["state"].str(), "closed") << t;
    EXPECT_EQ(b["window_failed"].i64(), 0) << t;
  }
  EXPECT_TRUE(missing_ids(sink, ids_b).empty()) << sample(missing_ids(sink, ids_b));
  EXPECT_TRUE(missing_ids(sink, ids_c).empty()) << sample(missing_ids(sink, ids_c));

  // A's receiver saw one request per in-flight slot, not one per queued delivery, and nothing
  // more while B and C went out.
  size_t a_requests = 0;
  for (const auto& l : sink.ids()) {
    if (std::find(ids_a.begin(), ids_a.end(), l.id) == ids_a.end()) continue;
    ++a_requests;
    EXPECT_EQ(l.status, "429") << l.id;
  }
  EXPECT_EQ(a_requests, static_cast<size_t>(kSlotsA)) << test::read_file(sink.ids_file);
  Json list_a = list_deliveries(d, "A", ep_a);
  ASSERT_EQ(list_a.size(), static_cast<size_t>(kEventsA));
  int64_t attempts_a = 0;
  for (const Json& del : list_a.items()) {
    const std::string id = del["id"].str();
    attempts_a += del["attempts"].i64();
    EXPECT_LE(del["attempts"].i64(), 1) << id;
    EXPECT_EQ(del["status"].str(), "pending") << id;
    // SPEC R7.2: Retry-After 3600 s; the API shows when the delivery will go.
    const int64_t next = rfc3339_ms(del["next_attempt_at"].str());
    EXPECT_GE(next, submitted_ms + 3600'000 - 10'000)
        << "delivery " << id << " (attempts " << del["attempts"].i64() << ") next_attempt_at "
        << del["next_attempt_at"].str() << " is not ~1 h away";
    EXPECT_LE(next, submitted_ms + 3600'000 + 60'000) << id << " " << del["next_attempt_at"].str();
  }
  EXPECT_EQ(attempts_a, static_cast<int64_t>(a_requests)) << "attempts recorded vs sent";
  Metrics m = scrape_metrics(d);
  EXPECT_GT(metric(m, "ringcast_deliveries_held_by_retry_after"), 0);
  EXPECT_EQ(metric(m, "ringcast_attempt_responses_total{class=\"4xx\"}"), a_requests);
  expect_no_transport_failures(m);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// SPEC R7.2 across a restart: the receiver asked for an hour; a SIGTERM and a start on the same
// data dir must not send it the deliveries that were held in the endpoint's queue.
TEST(E2eBackpressure, RetryAfterHoldOutlivesARestart) {
  DaemonOptions o;
  o.shards = 1;
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-bp-restart");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/limited=status=429;retry_after=3600"}, dir.path());
  constexpr int kSlots = 2, kEvents = 6;
  const std::string ep = make_endpoint(d, "A", sink.base_url() + "/limited", "fast", kSlots);
  ASSERT_FALSE(ep.empty());
  submit_bulk(d, "A", "r", kEvents);
  ASSERT_TRUE(wait_until(
      [&] { return metric(scrape_metrics(d), "ringcast_deliveries_held_by_retry_after") > 0; },
      scaled(5s), 50ms))
      << test::read_file(sink.ids_file);
  const size_t sent_before = sink.ids().size();
  EXPECT_EQ(sent_before, static_cast<size_t>(kSlots)) << test::read_file(sink.ids_file);
  auto st = d.terminate();
  ASSERT_TRUE(st.ok()) << st.str() << "\n" << d.output();

  ASSERT_NO_THROW(d.start());
  // Bounded look: nothing more may reach the receiver within 2 s of the restart (the hold has
  // ~an hour left).
  ASSERT_TRUE(wait_until([&] { return d.call("GET", "/readyz").status == 200; }, scaled(5s)));
  wait_until([&] { return sink.ids().size() > sent_before; }, 2s, 50ms);
  EXPECT_EQ(sink.ids().size(), sent_before)
      << "after the restart the receiver got requests it had asked (Retry-After: 3600) not to "
         "get yet:\n"
      << test::read_file(sink.ids_file);
  st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// transport.pool_size = 2 and a receiver that takes 300 ms per answer: 20 deliveries due at once
// (10x the connections). Those that cannot get a connection within max_queue_wait (500 ms) are
// given back deferred and sent later: each goes on the wire once, with one attempt.
TEST(E2eBackpressure, ConnectionLimitDefersWithoutSpendingAttempts) {
  DaemonOptions o;
  o.shards = 1;
  o.env = {"RINGCAST_TRANSPORT_POOL_SIZE=2", "RINGCAST_TRANSPORT_MAX_QUEUE_WAIT=500ms"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-bp-pool");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/slow=delay=300ms"}, dir.path());
  constexpr int kEvents = 20;
  // "fast" (4 attempts, 100-300 ms apart): a deferral taken for a failure would show as a retry.
  const std::string ep = make_endpoint(d, "pool", sink.base_url() + "/slow", "fast", kEvents);
  ASSERT_FALSE(ep.empty());
  const std::vector<std::string> ids =
      message_ids_of(d, "pool", submit_bulk(d, "pool", "p", kEvents));

  EXPECT_TRUE(wait_until([&] { return all_delivered(d, "pool", ep, kEvents); }, scaled(20s), 50ms))
      << d.call("GET", "/v1/tenants/pool/deliveries?limit=30").body << "\n"
      << d.output();
  expect_one_clean_attempt_each(d, "pool", ep);
  for (const std::string& id : ids) {
    EXPECT_EQ(sink_lines_for(sink, id), 1u) << id << " went on the wire more than once (or never)";
  }
  EXPECT_EQ(sink.ids().size(), static_cast<size_t>(kEvents)) << test::read_file(sink.ids_file);
  Metrics m = scrape_metrics(d);
  EXPECT_GT(metric(m, "ringcast_sends_deferred_total{reason=\"connections\"}"), 0)
      << "no send waited for a connection: the test did not exercise the limit";
  expect_no_transport_failures(m);
  EXPECT_EQ(metric_sum(m, "ringcast_attempts_total"), kEvents);
  EXPECT_EQ(metric(m, "ringcast_attempts_total{outcome=\"success\"}"), kEvents);
  EXPECT_EQ(metric(m, "ringcast_deliveries_deferred"), 0) << "nothing is left waiting";
  EXPECT_LE(sink.stats_value("connections_accepted"), 2 * 2) << sink.stats_json();
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// transport.host_rate_per_second = 5 (burst 1): 20 deliveries due at once. Those without a
// token within max_queue_wait (300 ms) are deferred, not failed; the pacing still holds.
TEST(E2eBackpressure, HostPacingDefersWithoutSpendingAttempts) {
  DaemonOptions o;
  o.shards = 1;
  o.env = {"RINGCAST_TRANSPORT_HOST_RATE_PER_SECOND=5", "RINGCAST_TRANSPORT_MAX_QUEUE_WAIT=300ms"};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-bp-pace");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  constexpr int kEvents = 20;
  constexpr double kRate = 5, kBurst = 1;
  const std::string ep = make_endpoint(d, "pace", sink.base_url() + "/paced", "fast", kEvents);
  ASSERT_FALSE(ep.empty());
  const std::vector<std::string> ids =
      message_ids_of(d, "pace", submit_bulk(d, "pace", "q", kEvents));

  EXPECT_TRUE(wait_until([&] { return all_delivered(d, "pace", ep, kEvents); }, scaled(20s), 50ms))
      << d.call("GET", "/v1/tenants/pace/deliveries?limit=30").body << "\n"
      << d.output();
  expect_one_clean_attempt_each(d, "pace", ep);
  for (const std::string& id : ids) EXPECT_EQ(sink_lines_for(sink, id), 1u) << id;
  Metrics m = scrape_metrics(d);
  EXPECT_GT(metric(m, "ringcast_sends_deferred_total{reason=\"pacing\"}"), 0)
      << "no send waited for a token: the test did not exercise the pacing";
  expect_no_transport_failures(m);
  EXPECT_EQ(metric_sum(m, "ringcast_attempts_total"), kEvents);

  // The pacing held on average. An attempt's started_at is when it entered the host queue, at
  // most max_queue_wait before it left: the last of 20 leaves no earlier than (20 - burst) / rate
  // after the first.
  std::vector<int64_t> starts;
  const Json list = list_deliveries(d, "pace", ep);
  for (const Json& del : list.items()) {
    Json det = get_delivery(d, "pace", del["id"].str());
    starts.push_back(rfc3339_ms(det["attempts"][0]["started_at"].str()));
  }
  ASSERT_EQ(starts.size(), static_cast<size_t>(kEvents));
  const auto [lo, hi] = std::minmax_element(starts.begin(), starts.end());
  const int64_t min_span_ms = static_cast<int64_t>((kEvents - kBurst) / kRate * 1000) - 300 - 10;
  EXPECT_GE(*hi - *lo, min_span_ms) << "20 sends at 5/s took less than the pacing allows";
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
