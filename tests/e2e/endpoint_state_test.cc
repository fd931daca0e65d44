// End to end: endpoint and tenant states as a receiver and an operator see them — 410 disables
// and kills the backlog (SPEC R6, R8), exhaustion auto-disables and notifies (R8.1, R8.4, R8.5),
// pause / resume / test while paused (R9), inactive subscription (R6 subscription_inactive).
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

std::string make_endpoint(const Daemon& d, const std::string& tenant, const std::string& body) {
  Reply r = create_endpoint(d, tenant, body);
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.json()["id"].str();
}

std::string ep_body(const std::string& url, const std::string& policy,
                    const std::string& extra = "") {
  return "{\"url\":" + quote(url) + ",\"policy\":" + quote(policy) + extra + "}";
}

// One NDJSON bulk request with `ids` for `tenant`; returns the per-line statuses.
std::vector<int64_t> submit_bulk(const Daemon& d, const std::string& tenant,
                                 const std::vector<std::string>& ids) {
  std::string body;
  for (const auto& id : ids) {
    body += "{\"tenant\":" + quote(tenant) + ",\"id\":" + quote(id) +
            ",\"type\":\"thing.happened\",\"payload\":{\"id\":" + quote(id) + "}}\n";
  }
  Reply r = d.call("POST", "/v1/events/bulk", body);
  EXPECT_EQ(r.status, 200) << r.describe();
  std::vector<int64_t> out;
  const Json results = r.json()["results"];
  for (const Json& l : results.items()) out.push_back(l["status"].i64());
  for (int64_t st : out) {
    if (st != 202) ADD_FAILURE() << "bulk answer: " << r.body;
  }
  return out;
}

// Sink lines whose webhook id is one of `ids` (message ids) and, if given, with `status`.
size_t count_ids(const SinkProcess& sink, const std::vector<std::string>& ids,
                 const std::string& status = "") {
  size_t n = 0;
  for (const auto& l : sink.ids()) {
    n += std::find(ids.begin(), ids.end(), l.id) != ids.end() &&
         (status.empty() || l.status == status);
  }
  return n;
}

// The message id of the test event behind a POST .../test answer.
std::string test_message_id(const Daemon& d, const std::string& tenant, const Reply& test) {
  return get_delivery(d, tenant, test.json()["delivery_id"].str())["event"]["message_id"].str();
}

Reply sink_set_faults(const SinkProcess& sink, const std::string& rules) {
  return http_request(sink.port, "POST", "/_fault", rules, {});
}

TEST(E2eEndpointState, GoneDisablesTheEndpointAndKillsItsBacklog) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-gone");
  // The first answer is slow, so the rest of the batch is still queued when the 410 arrives.
  SinkProcess sink =
      SinkProcess::start({"--quiet", "--fault", "/gone=status=410;delay=400ms"}, dir.path());
  const std::string t = "gone";
  std::string ep =
      make_endpoint(d, t, ep_body(sink.base_url() + "/gone", "fast", ",\"max_in_flight\":1"));
  ASSERT_FALSE(ep.empty());
  std::vector<std::string> ids = {"g-1", "g-2", "g-3", "g-4"};
  auto statuses = submit_bulk(d, t, ids);
  ASSERT_EQ(statuses, std::vector<int64_t>(4, 202));

  ASSERT_TRUE(
      wait_until([&] { return get_endpoint(d, t, ep)["state"].str() == "disabled"; }, scaled(10s)))
      << get_endpoint(d, t, ep)["state"].str() << "\n"
      << d.output();
  Json e = get_endpoint(d, t, ep);
  EXPECT_EQ(e["disabled_reason"].str(), "gone");

  // Every delivery is dead: the one that met the 410 with `gone`, the backlog with
  // `endpoint_disabled` and no attempt spent (R8.3).
  Json list;
  ASSERT_TRUE(wait_until(
      [&] {
        list = list_deliveries(d, t, ep);
        if (list.size() != 4) return false;
        for (const Json& del : list.items()) {
          if (del["status"].str() != "dead") return false;
        }
        return true;
      },
      scaled(10s)))
      << d.call("GET", "/v1/tenants/" + t + "/deliveries?endpoint=" + ep).body;
  int gone = 0, killed = 0;
  for (const Json& del : list.items()) {
    if (del["last_code"].str() == "gone") {
      ++gone;
      EXPECT_EQ(del["attempts"].i64(), 1);
      EXPECT_EQ(del["last_http_status"].i64(), 410);
    } else {
      EXPECT_EQ(del["last_code"].str(), "endpoint_disabled") << del["id"].str();
      EXPECT_EQ(del["attempts"].i64(), 0) << del["id"].str();
      ++killed;
    }
  }
  EXPECT_EQ(gone, 1);
  EXPECT_EQ(killed, 3);
  EXPECT_EQ(sink.stats_value("requests"), 1) << sink.stats_json();

  // The operator notification names the reason (R8.4).
  Json notes = d.call("GET", "/v1/tenants/" + t + "/notifications").json()["notifications"];
  bool found = false;
  for (const Json& n : notes.items()) {
    found |= n["kind"].str() == "endpoint_disabled" && n["endpoint"].str() == ep &&
             n["reason"].str() == "gone";
  }
  EXPECT_TRUE(found) << d.call("GET", "/v1/tenants/" + t + "/notifications").body;

  // Re-enabling does not resurrect the killed backlog (R8.3).
  Reply en = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/enable");
  ASSERT_EQ(en.status, 200) << en.describe();
  EXPECT_EQ(en.json()["state"].str(), "enabled");
  std::this_thread::sleep_for(scaled(600ms));
  EXPECT_EQ(sink.stats_value("requests"), 1) << sink.stats_json();
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eEndpointState, ExhaustionDisablesNotifiesAndRecoversThroughATestEvent) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-exhaust");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/down=status=500"}, dir.path());
  const std::string t = "exhaust";
  // `quick`: smengo shape with 3 attempts 50 ms apart; exhaustion disables (R8.1).
  std::string ep = make_endpoint(d, t, ep_body(sink.base_url() + "/down", "quick"));
  std::string healthy = make_endpoint(d, t, ep_body(sink.base_url() + "/ok", "quick"));
  ASSERT_FALSE(ep.empty() || healthy.empty());
  ASSERT_EQ(submit_event(d, t, "ex-1", "a.b", "{\"v\":1}").status, 202);

  ASSERT_TRUE(
      wait_until([&] { return get_endpoint(d, t, ep)["state"].str() == "disabled"; }, scaled(10s)))
      << get_endpoint(d, t, ep)["state"].str() << "\n"
      << d.output();
  EXPECT_EQ(get_endpoint(d, t, ep)["disabled_reason"].str(), "http_500");
  EXPECT_EQ(get_endpoint(d, t, healthy)["state"].str(), "enabled") << "bulkhead: only one endpoint";
  Json det = delivery_for_event(d, t, ep, "ex-1");
  EXPECT_EQ(det["delivery"]["status"].str(), "dead");
  EXPECT_EQ(det["attempts"].size(), 3u);

  // R8.4: a notification for the operator.
  Json note;
  ASSERT_TRUE(wait_until(
      [&] {
        Json notes = d.call("GET", "/v1/tenants/" + t + "/notifications").json()["notifications"];
        for (const Json& n : notes.items()) {
          if (n["endpoint"].str() == ep) note = n;
        }
        return note.is_object();
      },
      scaled(5s)))
      << d.call("GET", "/v1/tenants/" + t + "/notifications").body;
  EXPECT_EQ(note["kind"].str(), "endpoint_disabled");
  EXPECT_EQ(note["reason"].str(), "http_500");
  EXPECT_NE(note["message"].str().find("exhausted"), std::string::npos) << note["message"].str();

  // Events for a disabled endpoint are not sent (R8.2).
  Reply r2 = submit_event(d, t, "ex-2", "a.b", "{\"v\":2}");
  ASSERT_EQ(r2.status, 202) << r2.describe();
  EXPECT_EQ(deliveries_made(d, t, "ex-2", r2), 1) << "only the healthy endpoint gets ex-2";

  // R8.5: fix the receiver, send a test event, see 2xx, re-enable; new events flow again.
  ASSERT_EQ(sink_set_faults(sink, "").status, 200);
  Reply test = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/test");
  ASSERT_EQ(test.status, 202) << test.describe();
  EXPECT_FALSE(test.json()["delivery_id"].str().empty());
  const std::vector<std::string> test_id = {test_message_id(d, t, test)};
  EXPECT_TRUE(wait_until([&] { return count_ids(sink, test_id, "200") >= 1; }, scaled(5s)))
      << test::read_file(sink.ids_file);
  ASSERT_EQ(d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/enable").status, 200);
  Reply r3 = submit_event(d, t, "ex-3", "a.b", "{\"v\":3}");
  ASSERT_EQ(r3.status, 202);
  EXPECT_EQ(deliveries_made(d, t, "ex-3", r3), 2) << r3.describe();
  const std::vector<std::string> ex3 = {message_id_of(d, t, "ex-3")};
  EXPECT_TRUE(wait_until([&] { return count_ids(sink, ex3, "200") >= 2; }, scaled(5s)))
      << test::read_file(sink.ids_file);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eEndpointState, PauseHoldsTheQueueTakesNoNewEventsAndStillSendsTests) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-pause");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/slow=delay=500ms"}, dir.path());
  const std::string t = "pause";
  std::string ep =
      make_endpoint(d, t, ep_body(sink.base_url() + "/slow", "fast", ",\"max_in_flight\":1"));
  ASSERT_FALSE(ep.empty());
  ASSERT_EQ(submit_bulk(d, t, {"p-1", "p-2", "p-3"}), std::vector<int64_t>(3, 202));
  Reply pr = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/pause");
  ASSERT_EQ(pr.status, 200) << pr.describe();
  EXPECT_EQ(pr.json()["state"].str(), "paused");

  // R9.1: nothing is enqueued for a paused endpoint.
  Reply r4 = submit_event(d, t, "p-4", "thing.happened", "{}");
  ASSERT_EQ(r4.status, 202) << r4.describe();
  EXPECT_EQ(deliveries_made(d, t, "p-4", r4), 0) << r4.describe();

  // R9.3: a test event goes out while paused.
  Reply test = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/test");
  ASSERT_EQ(test.status, 202) << test.describe();
  const std::vector<std::string> test_id = {test_message_id(d, t, test)};
  EXPECT_TRUE(wait_until([&] { return count_ids(sink, test_id, "200") == 1; }, scaled(5s)))
      << test::read_file(sink.ids_file);

  // R9.2: the queued ones stay queued while paused (at most the one already on the wire).
  const std::vector<std::string> queued = message_ids_of(d, t, {"p-1", "p-2", "p-3"});
  size_t during = count_ids(sink, queued);
  std::this_thread::sleep_for(scaled(1200ms));
  EXPECT_EQ(count_ids(sink, queued), during) << test::read_file(sink.ids_file);
  EXPECT_LE(during, 1u) << test::read_file(sink.ids_file);
  EXPECT_EQ(get_endpoint(d, t, ep)["state"].str(), "paused");

  // ... and go out after resume.
  Reply rr = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/resume");
  ASSERT_EQ(rr.status, 200) << rr.describe();
  EXPECT_EQ(rr.json()["state"].str(), "enabled");
  EXPECT_TRUE(wait_until([&] { return missing_ids(sink, queued).empty(); }, scaled(8s)))
      << test::read_file(sink.ids_file);
  EXPECT_EQ(sink_lines_for(sink, message_id_of(d, t, "p-4")), 0u)
      << "an event taken while paused was delivered";
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eEndpointState, InactiveSubscriptionPostponesWithoutSpendingAttempts) {
  DaemonOptions o;
  o.env.push_back("RINGCAST_ENGINE_SUBSCRIPTION_POSTPONE=2s");
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-sub");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "sub";
  std::string ep = make_endpoint(d, t, ep_body(sink.base_url() + "/s", "quick"));
  ASSERT_FALSE(ep.empty());
  Reply off = d.call("PUT", "/v1/tenants/" + t + "/subscription", "{\"active\":false}");
  ASSERT_EQ(off.status, 200) << off.describe();
  EXPECT_FALSE(off.json()["active"].boolean());
  ASSERT_EQ(submit_event(d, t, "s-1", "a.b", "{}").status, 202);

  Json det;
  ASSERT_TRUE(wait_until(
      [&] {
        det = delivery_for_event(d, t, ep, "s-1");
        return det["delivery"]["last_code"].str() == "subscription_inactive";
      },
      scaled(5s)))
      << det["delivery"]["last_code"].str() << "\n"
      << d.output();
  EXPECT_EQ(det["delivery"]["status"].str(), "pending");
  EXPECT_EQ(det["delivery"]["attempts"].i64(), 0) << "no attempt is spent (SPEC R6)";
  EXPECT_EQ(det["attempts"].size(), 0u);
  int64_t created = rfc3339_ms(det["delivery"]["created_at"].str());
  int64_t next = rfc3339_ms(det["delivery"]["next_attempt_at"].str());
  EXPECT_GE(next - created, 1900) << "postponed by engine.subscription_postpone";
  std::this_thread::sleep_for(300ms);
  const std::string s1 = message_id_of(d, t, "s-1");
  EXPECT_EQ(sink_lines_for(sink, s1), 0u);
  EXPECT_EQ(get_endpoint(d, t, ep)["state"].str(), "enabled") << "the endpoint is not disabled";

  Reply on = d.call("PUT", "/v1/tenants/" + t + "/subscription", "{\"active\":true}");
  ASSERT_EQ(on.status, 200) << on.describe();
  EXPECT_TRUE(wait_until([&] { return sink_lines_for(sink, s1) >= 1; }, scaled(6s))) << d.output();
  // The sink logs the request before the daemon has recorded the answer: wait for the record.
  Json done = wait_delivery(
      d, t, ep, "s-1", [](const Json& x) { return x["delivery"]["status"].str() != "in_flight"; },
      scaled(5s));
  EXPECT_EQ(done["delivery"]["status"].str(), "delivered");
  EXPECT_EQ(done["delivery"]["attempts"].i64(), 1);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
