// End to end: the REST API's contract as a producer sees it — idempotent intake (SPEC R12.5:
// 202, then 200 with the same body, 409 for another payload), byte-exact payloads (R1), 4xx
// answers that name the problem, Bearer auth, and the SSRF guard (R6 private_address: nothing
// reaches a loopback receiver without the allow-list).
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

// Asserts a JSON error answer: status, error.code and (when given) error.field.
void expect_error(const Reply& r, int status, const std::string& code,
                  const std::string& field = "") {
  EXPECT_EQ(r.status, status) << r.describe();
  Json e = r.json()["error"];
  EXPECT_TRUE(e.is_object()) << "not a JSON error: " << r.describe();
  EXPECT_EQ(e["code"].str(), code) << r.describe();
  EXPECT_FALSE(e["message"].str().empty()) << r.describe();
  if (!field.empty()) {
    EXPECT_EQ(e["field"].str(), field) << r.describe();
  }
}

TEST(E2eApi, IntakeIsIdempotentAndPayloadsAreByteExact) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-idem");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "idem";
  Reply cr = create_endpoint(d, t, "{\"url\":" + quote(sink.base_url() + "/i") + "}");
  ASSERT_EQ(cr.status, 201) << cr.describe();
  const std::string ep = cr.json()["id"].str();
  EXPECT_EQ(cr.json()["policy"].str(), "smengo") << "the default policy";
  EXPECT_EQ(cr.json()["secret"].str().rfind("whsec_", 0), 0u) << cr.body;

  const std::string payload = "{\"a\": 1,  \"b\" : [1, 2.50, \"\\u00e9\"], \"c\":{}}";
  Reply first = submit_event(d, t, "idem-1", "order.created", payload);
  ASSERT_EQ(first.status, 202) << first.describe();
  EXPECT_EQ(first.json()["event_id"].str(), "idem-1");
  EXPECT_EQ(deliveries_made(d, t, "idem-1", first), 1) << first.describe();
  // The 202 names the message id receivers deduplicate by (SPEC R11.3); in cluster mode a node
  // that queued the event for the partition's owner names the one the owner keeps.
  const std::string message = first.json()["message_id"].str();
  EXPECT_EQ(message.size(), 30u) << first.describe();
  EXPECT_EQ(message.rfind("msg_", 0), 0u) << first.describe();

  Reply again = submit_event(d, t, "idem-1", "order.created", payload);
  EXPECT_EQ(again.status, 200) << again.describe();
  EXPECT_EQ(again.json()["event_id"].str(), "idem-1");
  EXPECT_EQ(again.json()["message_id"].str(), message) << "a repeat names the first's message id";
  EXPECT_EQ(deliveries_made(d, t, "idem-1", again), 1) << again.describe();

  Reply other = submit_event(d, t, "idem-1", "order.created", "{\"a\": 2}");
  expect_error(other, 409, "conflict", "id");

  // R1: the stored payload is the request's exact bytes.
  Reply ev = d.call("GET", "/v1/tenants/" + t + "/events/idem-1");
  ASSERT_EQ(ev.status, 200) << ev.describe();
  EXPECT_NE(ev.body.find(payload), std::string::npos) << ev.body;

  // Bulk form: per-line 200 (repeat), 409 (conflict), 202 (new), 400 (bad line).
  std::string bulk =
      "{\"tenant\":\"idem\",\"id\":\"idem-1\",\"type\":\"order.created\",\"payload\":" + payload +
      "}\n" +
      "{\"tenant\":\"idem\",\"id\":\"idem-1\",\"type\":\"order.created\","
      "\"payload\":{\"a\":3}}\n"
      "{\"tenant\":\"idem\",\"id\":\"idem-2\",\"type\":\"order.created\","
      "\"payload\":[1]}\n"
      "{\"tenant\":\"idem\",\"id\":5}\n";
  Reply br = d.call("POST", "/v1/events/bulk", bulk);
  ASSERT_EQ(br.status, 200) << br.describe();
  Json res = br.json()["results"];
  ASSERT_EQ(res.size(), 4u) << br.body;
  EXPECT_EQ(res[0]["status"].i64(), 200) << br.body;
  EXPECT_EQ(res[1]["status"].i64(), 409) << br.body;
  EXPECT_EQ(res[2]["status"].i64(), 202) << br.body;
  EXPECT_EQ(res[3]["status"].i64(), 400) << br.body;
  EXPECT_EQ(res[3]["error"]["field"].str(), "id") << br.body;
  EXPECT_EQ(res[0]["message_id"].str(), message) << br.body;
  EXPECT_FALSE(res[1].has("message_id")) << br.body;  // a conflict names none
  const std::string message2 = res[2]["message_id"].str();
  EXPECT_EQ(message2.rfind("msg_", 0), 0u) << br.body;
  EXPECT_EQ(br.json()["accepted"].i64(), 1);
  EXPECT_EQ(br.json()["duplicates"].i64(), 1);
  EXPECT_EQ(br.json()["conflicts"].i64(), 1);

  // Accepted once → delivered once (no fault on the sink), with the event's message id: its
  // own, not the producer's id (SPEC R11.3), the same in the log and on the wire.
  std::vector<std::string> ids = message_ids_of(d, t, {"idem-1", "idem-2"});
  for (const std::string& m : ids) EXPECT_EQ(m.rfind("msg_", 0), 0u) << m;
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_EQ(ids[0], message) << "the 202's message id is the event's";
  EXPECT_EQ(ids[1], message2) << "the bulk line's message id is the event's";
  EXPECT_TRUE(wait_until([&] { return missing_ids(sink, ids).empty(); }, scaled(5s))) << d.output();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(sink_lines_for(sink, ids[0]), 1u) << test::read_file(sink.ids_file);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// The RocksDB store's sizes on /metrics: the payloads taken in are in the payload log.
TEST(E2eApi, StoreSizesAreOnMetrics) {
  RINGCAST_E2E_SINGLE_NODE_ONLY("the sizes of the RocksDB store's files");
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-sizes");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "sizes";
  ASSERT_EQ(create_endpoint(d, t, "{\"url\":" + quote(sink.base_url() + "/s") + "}").status, 201);
  ASSERT_EQ(submit_event(d, t, "sizes-1", "order.created", "{\"a\": 1}").status, 202);
  const std::string metrics = d.call("GET", "/metrics").body;
  const std::string gauge = "ringcast_store_bytes{part=\"payload_log\"} ";
  const size_t at = metrics.find(gauge);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GT(std::stoull(metrics.substr(at + gauge.size())), 0u);
  EXPECT_NE(metrics.find("ringcast_store_bytes{part=\"sst\"} "), std::string::npos);
  // (A delivery created and sent in the same turn is stored with its lease in one record, so
  // these few deliveries may have left nothing in the lease log.)
  EXPECT_NE(metrics.find("ringcast_store_bytes{part=\"lease_log\"} "), std::string::npos);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

TEST(E2eApi, BadRequestsGet4xxNamingTheProblem) {
  DaemonOptions o;
  o.env.push_back("RINGCAST_LIMITS_MAX_BODY_BYTES=4KiB");
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  const std::string t = "bad";
  Reply cr = create_endpoint(d, t, "{\"url\":\"http://127.0.0.1:9/x\",\"policy\":\"fast\"}");
  ASSERT_EQ(cr.status, 201) << cr.describe();
  const std::string ep = cr.json()["id"].str();
  const std::string events = "/v1/tenants/" + t + "/events";

  // Malformed JSON, not an object, wrong types, missing and unknown fields.
  expect_error(d.call("POST", events, "{\"id\": \"x\", "), 400, "invalid_json");
  expect_error(d.call("POST", events, "[1, 2]"), 400, "invalid_json");
  expect_error(d.call("POST", events, ""), 400, "invalid_json");
  expect_error(d.call("POST", events, "{\"id\": 7, \"type\": \"a\", \"payload\": {}}"), 400,
               "invalid_type", "id");
  expect_error(d.call("POST", events, "{\"id\": \"x\", \"type\": [\"a\"], \"payload\": {}}"), 400,
               "invalid_type", "type");
  expect_error(d.call("POST", events, "{\"id\": \"x\", \"type\": \"a\"}"), 400, "missing_field",
               "payload");
  expect_error(d.call("POST", events, "{\"id\": \"x\", \"type\": \"a\", \"payload\": {\"p\": }}"),
               400, "invalid_json");
  expect_error(
      d.call("POST", events, "{\"id\": \"x\", \"type\": \"a\", \"payload\": 1, \"extra\": 1}"), 400,
      "unknown_field", "extra");
  expect_error(d.call("POST", events, "{\"id\": \"has space\", \"type\": \"a\", \"payload\": 1}"),
               400, "invalid_event_id", "id");

  // Endpoint bodies.
  const std::string eps = "/v1/tenants/" + t + "/endpoints";
  expect_error(d.call("POST", eps, "{\"url\": 42}"), 400, "invalid_type", "url");
  expect_error(d.call("POST", eps, "{}"), 400, "missing_field", "url");
  expect_error(d.call("POST", eps, "{\"url\": \"http://127.0.0.1:9/\", \"signature\": \"rsa\"}"),
               400, "invalid_value", "signature");
  expect_error(d.call("POST", eps, "{\"url\": \"http://127.0.0.1:9/\", \"policy\": \"nope\"}"), 400,
               "unknown_policy", "policy");
  expect_error(
      d.call("POST", eps, "{\"url\": \"http://127.0.0.1:9/\", \"max_in_flight\": \"many\"}"), 400,
      "invalid_type", "max_in_flight");
  // SPEC R6 URL form errors → 422 with their code.
  expect_error(d.call("POST", eps, "{\"url\": \"https://user:pw@example.com/x\"}"), 422,
               "userinfo_not_allowed");
  expect_error(d.call("POST", eps, "{\"url\": \"https://example.com/x#frag\"}"), 422,
               "fragment_not_allowed");
  expect_error(d.call("POST", eps, "{\"url\": \"https://example.com:99999/x\"}"), 422,
               "invalid_url");
  expect_error(d.call("POST", eps, "{\"url\": \"https://example.com:22/x\"}"), 422,
               "port_not_allowed");

  // Unknown tenant, endpoint, delivery, route; wrong method.
  expect_error(submit_event(d, "ghost", "g-1", "a", "{}"), 404, "unknown_tenant", "tenant");
  expect_error(d.call("GET", "/v1/tenants/ghost/endpoints"), 404, "unknown_tenant");
  expect_error(d.call("GET", eps + "/123456789"), 404, "unknown_endpoint");
  expect_error(d.call("POST", eps + "/123456789/pause"), 404, "unknown_endpoint");
  expect_error(d.call("GET", eps + "/not-a-number"), 404, "unknown_endpoint", "endpoint");
  expect_error(d.call("GET", "/v1/tenants/" + t + "/deliveries/987654321"), 404, "unknown_delivery",
               "delivery");
  expect_error(d.call("GET", "/v1/tenants/ghost/deliveries"), 404, "unknown_tenant", "tenant");
  expect_error(d.call("GET", "/v1/nothing-here"), 404, "not_found");
  expect_error(d.call("DELETE", events), 405, "method_not_allowed");
  expect_error(d.call("GET", "/v1/tenants/" + t + "/deliveries?limit=0"), 400, "invalid_value",
               "limit");

  // Oversize body (limits.max_body_bytes = 4 KiB here) → 413 naming the body.
  std::string big =
      "{\"id\": \"big\", \"type\": \"a\", \"payload\": \"" + std::string(16384, 'x') + "\"}";
  expect_error(d.call("POST", events, big), 413, "body_too_large", "body");
  // ... and the daemon still serves afterwards; the oversize event was not taken.
  expect_error(d.call("GET", "/v1/tenants/" + t + "/events/big"), 404, "unknown_event", "event");

  // Auth: missing or wrong token → 401 on /v1; health needs none.
  Reply none = d.call_with_auth("GET", eps, "", std::nullopt);
  expect_error(none, 401, "unauthorized");
  EXPECT_NE(none.body.find("Authorization"), std::string::npos) << none.body;
  expect_error(d.call_with_auth("GET", eps, "", std::string("Bearer wrong")), 401, "unauthorized");
  expect_error(d.call_with_auth("POST", events, "{\"id\":\"u\",\"type\":\"a\",\"payload\":1}",
                                std::string("Basic Zm9vOmJhcg==")),
               401, "unauthorized");
  EXPECT_EQ(d.call_with_auth("GET", "/healthz", "", std::nullopt).status, 200);
  EXPECT_EQ(d.call_with_auth("GET", "/readyz", "", std::nullopt).status, 200);
  // /metrics is the platform's (SPEC R14, server.metrics_public is off).
  expect_error(d.call_with_auth("GET", "/metrics", "", std::nullopt), 401, "unauthorized");
  Reply metrics = d.call("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("# TYPE"), std::string::npos) << metrics.body.substr(0, 500);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// SPEC R6 "host resolves into a private / special range → nothing is sent, private_address":
// without transport.allow_private, a receiver on loopback gets no request at all, whether the
// URL names it (localhost) or spells the address.
TEST(E2eApi, SsrfGuardSendsNothingToLoopbackWithoutTheAllowList) {
  DaemonOptions o;
  o.allow_private = false;
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ssrf");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "ssrf";
  const std::string port = std::to_string(sink.port);
  std::vector<std::string> eps;
  for (const std::string& url :
       {"http://localhost:" + port + "/ssrf", "http://127.0.0.1:" + port + "/ssrf-ip"}) {
    Reply cr = create_endpoint(d, t, "{\"url\":" + quote(url) + ",\"policy\":\"quick\"}");
    // An address literal may already be refused at creation; a name can only be caught later.
    if (url.find("127.0.0.1") != std::string::npos && cr.status == 422) {
      EXPECT_EQ(cr.json()["error"]["code"].str(), "private_address") << cr.body;
      continue;
    }
    ASSERT_EQ(cr.status, 201) << cr.describe();
    eps.push_back(cr.json()["id"].str());
  }
  ASSERT_EQ(submit_event(d, t, "ssrf-1", "a.b", "{}").status, 202);
  for (const auto& ep : eps) {
    Json det;
    ASSERT_TRUE(wait_until(
        [&] {
          det = delivery_for_event(d, t, ep, "ssrf-1");
          return det["attempts"].size() >= 1;
        },
        scaled(5s)))
        << d.output();
    const Json& a = det["attempts"][0];
    EXPECT_EQ(a["code"].str(), "private_address") << "endpoint " << ep;
    EXPECT_TRUE(a["http_status"].is_null());
    EXPECT_FALSE(a["request_written"].boolean());
  }
  std::this_thread::sleep_for(scaled(500ms));
  EXPECT_EQ(sink.stats_value("requests"), 0) << sink.stats_json();
  EXPECT_EQ(sink.stats_value("ids_received"), 0) << sink.stats_json();
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
