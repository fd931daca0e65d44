// The REST adapter's pure pieces: bearer-token comparison, the error-to-status mapping, path
// decoding (the JSON writer: tests/net/json_writer_test.cc); and the ordered-delivery fields and
// routes (SPEC R13) sans-I/O against the fake engine. The routes themselves are tested on the real
// engine (tests/engine/rest_api_test.cc); the API tests do not link the engine.
#include "api/rest_api.h"

#include <gtest/gtest.h>

#include <simdjson.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "net/system_clock.h"
#include "tests/api/fake_engine.h"
#include "tests/api/rest_call.h"

namespace ringcast::api {
namespace {

// --- auth, errors, paths -------------------------------------------------------------------------

TEST(BearerToken, ComparesWholeTokens) {
  EXPECT_TRUE(bearer_token_matches("Bearer abc", "abc"));
  EXPECT_TRUE(bearer_token_matches("bearer abc", "abc"));
  EXPECT_TRUE(bearer_token_matches("Bearer  abc ", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer abd", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer ab", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer abcd", "abc"));
  EXPECT_FALSE(bearer_token_matches("Basic abc", "abc"));
  EXPECT_FALSE(bearer_token_matches("abc", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer ", ""));
}

TEST(ErrorMapping, StatusPerErrc) {
  EXPECT_EQ(http_status_for(make_error(Errc::kInvalidArgument, "x")), 400);
  EXPECT_EQ(http_status_for(make_error(Errc::kInvalidArgument, "x", "url", "not_https")), 422);
  EXPECT_EQ(http_status_for(make_error(Errc::kInvalidArgument, "x", "url", "url_too_long")), 422);
  EXPECT_EQ(http_status_for(make_error(Errc::kNotFound, "x")), 404);
  EXPECT_EQ(http_status_for(make_error(Errc::kConflict, "x")), 409);
  EXPECT_EQ(http_status_for(make_error(Errc::kLimitExceeded, "x")), 429);
  EXPECT_EQ(http_status_for(make_error(Errc::kUnavailable, "x")), 503);
  EXPECT_EQ(http_status_for(make_error(Errc::kIo, "x")), 500);
  HttpResponse r = error_response(make_error(Errc::kConflict, "taken", "id", "conflict"));
  EXPECT_EQ(r.body, R"({"error":{"code":"conflict","message":"taken","field":"id"}})");
}

TEST(PercentDecode, Forms) {
  EXPECT_EQ(percent_decode("a%2Fb%20c", false), "a/b c");
  EXPECT_EQ(percent_decode("a+b", false), "a+b");
  EXPECT_EQ(percent_decode("a+b", true), "a b");
  EXPECT_EQ(percent_decode("%zz", false), std::nullopt);
  EXPECT_EQ(percent_decode("%2", false), std::nullopt);
  EXPECT_EQ(percent_decode("%", false), std::nullopt);
}

// --- ordered delivery (SPEC R13) -----------------------------------------------------------------

constexpr const char* kToken = "rest-test-token";

// RestApi::handle() against the fake engine, which answers on its worker thread; reads run inline.
class OrderingApiTest : public test_support::RestCall<test::FakeEngine> {
 protected:
  OrderingApiTest() : RestCall(kToken) {}

  void expect_bad(const HttpResponse& r, std::string_view code, std::string_view field) {
    EXPECT_EQ(r.status, 400) << r.body;
    auto [c, f] = error_of(r);
    EXPECT_EQ(c, code) << r.body;
    EXPECT_EQ(f, field) << r.body;
  }

  static void expect_has(const HttpResponse& r, std::string_view part) {
    EXPECT_NE(r.body.find(part), std::string::npos) << part << " in " << r.body;
  }

  // Creates an endpoint of acme with `extra` fields; its id.
  std::string create(std::string_view extra = {}) {
    std::string body = R"({"url":"https://hooks.example.com/a")";
    if (!extra.empty()) body += "," + std::string(extra);
    body += "}";
    HttpResponse r = call("POST", "/v1/tenants/acme/endpoints", body);
    EXPECT_EQ(r.status, 201) << r.body;
    simdjson::dom::element el;
    std::string_view id;
    if (parser_.parse(r.body).get(el) || el["id"].get(id)) return "";
    return std::string(id);
  }
};

// SPEC R13.1: a named ordering key is 1..256 bytes of printable ASCII, on the single and the bulk
// route alike; a valid one reaches the engine.
TEST_F(OrderingApiTest, OrderingKeyIsCheckedAndPassedOn) {
  const std::string events = "/v1/tenants/acme/events";
  auto event = [](std::string_view key_json) {
    return R"({"id":"e1","type":"order.paid","payload":{},"ordering_key":)" +
           std::string(key_json) + "}";
  };
  expect_bad(call("POST", events, event("\"" + std::string(257, 'k') + "\"")), "invalid_value",
             "ordering_key");
  expect_bad(call("POST", events, event(R"("order\u0007-42")")), "invalid_value", "ordering_key");
  expect_bad(call("POST", events, event("42")), "invalid_type", "ordering_key");
  expect_bad(call("POST", events, event(R"("")")), "invalid_value", "ordering_key");
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_TRUE(engine_.submitted.empty());
  }

  HttpResponse r = call("POST", events, event("\"" + std::string(256, 'k') + "\""));
  EXPECT_EQ(r.status, 202) << r.body;
  r = call("POST", events, R"({"id":"e2","type":"order.paid","payload":{},"ordering_key":"o 42"})");
  EXPECT_EQ(r.status, 202) << r.body;
  r = call("POST", events, R"({"id":"e3","type":"order.paid","payload":{}})");
  EXPECT_EQ(r.status, 202) << r.body;

  // Bulk: the bad line is answered on its own, the good one goes on with its key.
  r = call(
      "POST", "/v1/events/bulk",
      "{\"tenant\":\"acme\",\"id\":\"b1\",\"type\":\"t\",\"payload\":{},\"ordering_key\":1}\n"
      "{\"tenant\":\"acme\",\"id\":\"b2\",\"type\":\"t\",\"payload\":{},\"ordering_key\":\"\"}\n"
      "{\"tenant\":\"acme\",\"id\":\"b3\",\"type\":\"t\",\"payload\":{},\"ordering_key\":"
      "\"order-7\"}\n");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.body).get(el)) << r.body;
  simdjson::dom::array results;
  ASSERT_FALSE(el["results"].get(results)) << r.body;
  ASSERT_EQ(results.size(), 3u);
  std::string_view field;
  EXPECT_FALSE(results.at(0)["error"]["field"].get(field));
  EXPECT_EQ(field, "ordering_key");
  EXPECT_FALSE(results.at(1)["error"]["field"].get(field));
  EXPECT_EQ(field, "ordering_key");
  int64_t status = 0;
  EXPECT_FALSE(results.at(2)["status"].get(status));
  EXPECT_EQ(status, 202);

  std::lock_guard lock(engine_.mu());
  ASSERT_EQ(engine_.submitted.size(), 4u);
  EXPECT_EQ(engine_.submitted[0].ordering_key, std::string(256, 'k'));
  EXPECT_EQ(engine_.submitted[1].ordering_key, "o 42");
  EXPECT_EQ(engine_.submitted[2].ordering_key, "");
  EXPECT_EQ(engine_.submitted[3].ordering_key, "order-7");
}

// SPEC R13: ordering, on_head_failure and supersede on create and PATCH, refused naming the field
// (as on_unknown is), and always shown.
TEST_F(OrderingApiTest, EndpointOrderingFieldsAreCheckedAndEchoed) {
  const std::string eps = "/v1/tenants/acme/endpoints";
  const std::string url = R"("url":"https://hooks.example.com/a",)";
  expect_bad(call("POST", eps, "{" + url + R"("ordering":"sideways"})"), "invalid_value",
             "ordering");
  expect_bad(call("POST", eps, "{" + url + R"("ordering":3})"), "invalid_type", "ordering");
  expect_bad(call("POST", eps, "{" + url + R"("on_head_failure":"retry"})"), "invalid_value",
             "on_head_failure");
  expect_bad(call("POST", eps, "{" + url + R"("on_head_failure":true})"), "invalid_type",
             "on_head_failure");
  expect_bad(call("POST", eps, "{" + url + R"("supersede":"yes"})"), "invalid_type", "supersede");

  const std::string plain = create();
  HttpResponse r = call("GET", eps + "/" + plain);
  ASSERT_EQ(r.status, 200) << r.body;
  expect_has(r, R"("ordering":"none","on_head_failure":"block","supersede":false)");

  r = call("POST", eps,
           "{" + url + R"("ordering":"per_key","on_head_failure":"skip","supersede":true})");
  ASSERT_EQ(r.status, 201) << r.body;
  expect_has(r, R"("ordering":"per_key","on_head_failure":"skip","supersede":true)");
  const std::string id = create(R"("ordering":"per_key")");

  r = call("PATCH", eps + "/" + id, R"({"ordering":"endpoint","supersede":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  expect_has(r, R"("ordering":"endpoint","on_head_failure":"block","supersede":true)");
  expect_bad(call("PATCH", eps + "/" + id, R"({"ordering":"sideways"})"), "invalid_value",
             "ordering");
  expect_bad(call("PATCH", eps + "/" + id, R"({"supersede":"yes"})"), "invalid_type", "supersede");
  r = call("GET", eps + "/" + id);
  expect_has(r, R"("ordering":"endpoint","on_head_failure":"block","supersede":true)");
}

// GET .../endpoints/{id}/ordering (SPEC R13): the keys by hash, ids as strings, null for none.
TEST_F(OrderingApiTest, OrderingRouteListsTheBlockedAndBackloggedKeys) {
  const std::string id = create(R"("ordering":"per_key")");
  const WallTime now = net::SystemClock().wall_now();
  {
    std::lock_guard lock(engine_.mu());
    OrderKeyView blocked;
    blocked.order_key = 0xab;
    blocked.blocked = true;
    blocked.blocked_by = (uint64_t{9} << 48) | 7;
    blocked.since = now - seconds(30);
    blocked.waiting = 3;
    blocked.first_waiting = (uint64_t{9} << 48) | 8;
    OrderKeyView backlog;
    backlog.order_key = kEndpointOrderKey;
    backlog.head = (uint64_t{9} << 48) | 9;
    backlog.since = now - seconds(2);
    backlog.waiting = 1;
    engine_.order_key_views = {blocked, backlog};
  }
  const std::string path = "/v1/tenants/acme/endpoints/" + id + "/ordering";
  HttpResponse r = call("GET", path);
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.body).get(el)) << r.body;
  simdjson::dom::array keys;
  ASSERT_FALSE(el["keys"].get(keys)) << r.body;
  ASSERT_EQ(keys.size(), 2u);
  simdjson::dom::element k;
  ASSERT_FALSE(keys.at(0).get(k));
  EXPECT_EQ(k["order_key"].get_string().value(), "00000000000000ab");
  EXPECT_TRUE(k["head"].is_null());
  EXPECT_TRUE(k["blocked"].get_bool().value());
  EXPECT_EQ(k["blocked_by"].get_string().value(), std::to_string((uint64_t{9} << 48) | 7));
  EXPECT_GE(k["head_age_seconds"].get_double().value(), 30.0);
  EXPECT_LT(k["head_age_seconds"].get_double().value(), 3600.0);
  EXPECT_EQ(k["waiting"].get_int64().value(), 3);
  EXPECT_EQ(k["first_waiting"].get_string().value(), std::to_string((uint64_t{9} << 48) | 8));
  ASSERT_FALSE(keys.at(1).get(k));
  EXPECT_EQ(k["order_key"].get_string().value(), "0000000000000001");
  EXPECT_EQ(k["head"].get_string().value(), std::to_string((uint64_t{9} << 48) | 9));
  EXPECT_FALSE(k["blocked"].get_bool().value());
  EXPECT_TRUE(k["blocked_by"].is_null());
  EXPECT_TRUE(k["first_waiting"].is_null());
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_order_keys_limit, 100u);
  }

  r = call("GET", path + "?limit=1");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_FALSE(parser_.parse(r.body).get(el)) << r.body;
  ASSERT_FALSE(el["keys"].get(keys)) << r.body;
  EXPECT_EQ(keys.size(), 1u);
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_order_keys_limit, 1u);
  }
  for (const char* bad : {"0", "1001", "x", ""})
    expect_bad(call("GET", path + "?limit=" + bad), "invalid_value", "limit");
  expect_bad(call("GET", path + "?after=1"), "unknown_field", "after");

  r = call("GET", "/v1/tenants/acme/endpoints/12345/ordering");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(error_of(r).first, "unknown_endpoint");
  r = call("POST", path, "{}");
  EXPECT_EQ(r.status, 405) << r.body;
}

// SPEC R13.3: a superseded delivery's record names the delivery that replaced it; the log's
// status filter takes "superseded"; the event shows its ordering key (R13.1), null when none.
TEST_F(OrderingApiTest, SupersededDeliveriesAndTheEventsOrderingKeyAreShown) {
  const EventSeq seq = (uint64_t{9} << 48) | 40;
  const DeliveryId id = (uint64_t{9} << 48) | 41;
  const DeliveryId by = (uint64_t{9} << 48) | 42;
  {
    std::lock_guard lock(engine_.mu());
    Event ev;
    ev.seq = seq;
    ev.tenant = "acme";
    ev.id = "evt-40";
    ev.type = "order.paid";
    ev.payload = "{}";
    ev.ordering_key = "order-42";
    ev.created_at = WallTime::from_ms(1'767'225'600'000);
    engine_.events_by_seq[seq] = ev;
    ev.seq = seq + 10;
    ev.id = "evt-50";
    ev.ordering_key.clear();
    engine_.events_by_seq[ev.seq] = ev;
    DeliveryDetail d;
    d.tenant = "acme";
    d.delivery.id = id;
    d.delivery.event = seq;
    d.delivery.endpoint = 77;
    d.delivery.status = DeliveryStatus::kSuperseded;
    d.delivery.created_at = ev.created_at;
    Attempt a;
    a.delivery = id;
    a.number = kSupersededRecord;
    a.code = ErrorCode::of(ErrorCode::Kind::kSuperseded);
    a.started_at = WallTime::from_ms(1'767'225'601'000);
    a.response_prefix = std::to_string(by);
    d.attempts.push_back(a);
    engine_.deliveries[id] = d;
  }
  HttpResponse r = call("GET", "/v1/tenants/acme/deliveries/" + std::to_string(id));
  ASSERT_EQ(r.status, 200) << r.body;
  expect_has(r, R"("status":"superseded")");
  expect_has(r, R"({"kind":"superseded","at":"2026-01-01T00:00:01.000Z","by":")" +
                    std::to_string(by) + "\"}");
  expect_has(r, R"("ordering_key":"order-42")");

  r = call("GET", "/v1/tenants/acme/deliveries?state=superseded");
  ASSERT_EQ(r.status, 200) << r.body;
  expect_has(r, "\"id\":\"" + std::to_string(id) + "\"");
  expect_has(r, R"("event_type":"order.paid","ordering_key":"order-42")");
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_list.status, DeliveryStatus::kSuperseded);
  }
  expect_bad(call("GET", "/v1/tenants/acme/deliveries?state=replaced"), "invalid_value", "state");

  r = call("GET", "/v1/tenants/acme/events/evt-40");
  ASSERT_EQ(r.status, 200) << r.body;
  expect_has(r, R"("type":"order.paid","ordering_key":"order-42")");
  r = call("GET", "/v1/tenants/acme/events/evt-50");
  ASSERT_EQ(r.status, 200) << r.body;
  expect_has(r, R"("ordering_key":null)");
}

}  // namespace
}  // namespace ringcast::api
