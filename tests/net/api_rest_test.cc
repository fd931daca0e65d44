// net/api/rest_api over real loopback sockets (HttpServerThread) against a fake Engine that
// answers from its own thread: every route, auth, every error shape, byte-exact payloads.
#include "net/api/rest_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <simdjson.h>

#include "net/api/json_views.h"
#include "net/signing.h"
#include "tests/net/api_fake_engine.h"
#include "tests/net/api_test_client.h"

namespace ringcast::net::api {
namespace {

using test::ClientResponse;
using test::FakeEngine;
using test::TestClient;
using ::testing::HasSubstr;

constexpr const char* kToken = "test-token-0123456789";

using Headers = std::vector<std::pair<std::string, std::string>>;

// Parses a response body (fails the test on invalid JSON).
simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& body) {
  simdjson::dom::element el;
  auto err = p.parse(body).get(el);
  EXPECT_FALSE(err) << "invalid JSON: " << body;
  return el;
}

std::string str(simdjson::dom::element el, std::string_view key) {
  std::string_view s;
  if (el[key].get(s)) return "<missing " + std::string(key) + ">";
  return std::string(s);
}

int64_t num(simdjson::dom::element el, std::string_view key) {
  int64_t v = -1;
  if (el[key].get(v)) return -1;
  return v;
}

class RestApiTest : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }

  void start(RestApiOptions o) {
    server_.reset();
    api_.reset();
    o.api_token = o.api_token.empty() ? kToken : o.api_token;
    api_ = std::make_unique<RestApi>(engine_, o);
    server_ = std::make_unique<HttpServerThread>(*api_, HttpServerOptions{});
    ASSERT_TRUE(server_->start().ok());
    client_ = std::make_unique<TestClient>(server_->port());
  }

  ClientResponse call(std::string_view method, std::string_view target, std::string_view body = {},
                      Headers extra = {}) {
    Headers h = {{"Authorization", std::string("Bearer ") + kToken}};
    for (auto& kv : extra) h.push_back(kv);
    return client_->request(method, target, body, h);
  }

  // Checks the error shape and returns the error object.
  void expect_error(const ClientResponse& r, int status, std::string_view code,
                    std::string_view field = {}) {
    EXPECT_EQ(r.status, status) << r.body;
    simdjson::dom::element el = parse(parser_, r.body);
    simdjson::dom::element err;
    ASSERT_FALSE(el["error"].get(err)) << r.body;
    EXPECT_EQ(str(err, "code"), code) << r.body;
    EXPECT_FALSE(str(err, "message").empty());
    if (!field.empty()) {
      EXPECT_EQ(str(err, "field"), field) << r.body;
    }
  }

  std::string create(std::string_view body = R"({"url":"https://hooks.example.com/a"})") {
    ClientResponse r = call("POST", "/v1/tenants/acme/endpoints", body);
    EXPECT_EQ(r.status, 201) << r.body;
    return str(parse(parser_, r.body), "id");
  }

  FakeEngine engine_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<HttpServerThread> server_;
  std::unique_ptr<TestClient> client_;
  simdjson::dom::parser parser_;
};

// --- auth and plumbing ---------------------------------------------------------------------------

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

TEST_F(RestApiTest, EveryV1RouteNeedsTheToken) {
  const std::pair<const char*, const char*> routes[] = {
      {"GET", "/v1/tenants/acme/endpoints"},
      {"POST", "/v1/tenants/acme/endpoints"},
      {"POST", "/v1/tenants/acme/events"},
      {"POST", "/v1/events/bulk"},
      {"GET", "/v1/tenants/acme/deliveries"},
      {"GET", "/v1/tenants/acme/breaker"},
      {"PUT", "/v1/tenants/acme/subscription"},
      {"GET", "/v1/tenants/acme/notifications"},
      {"GET", "/v1/nothing-here"},
  };
  for (auto [m, path] : routes) {
    ClientResponse r = client_->request(m, path, "{}");
    expect_error(r, 401, "unauthorized");
    ASSERT_NE(r.header("www-authenticate"), nullptr);
    r = client_->request(m, path, "{}", {{"Authorization", "Bearer wrong-token"}});
    expect_error(r, 401, "unauthorized");
    EXPECT_THAT(r.body, HasSubstr("wrong bearer token"));
  }
  std::lock_guard lock(engine_.mu());
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST_F(RestApiTest, NoConfiguredTokenRefusesEverything) {
  RestApiOptions o;
  o.api_token = "";
  server_.reset();
  api_ = std::make_unique<RestApi>(engine_, o);  // start() would put the test token back
  server_ = std::make_unique<HttpServerThread>(*api_, HttpServerOptions{});
  ASSERT_TRUE(server_->start().ok());
  TestClient c(server_->port());
  ClientResponse r =
      c.request("GET", "/v1/tenants/acme/endpoints", {}, {{"Authorization", "Bearer "}});
  expect_error(r, 401, "unauthorized");
  EXPECT_THAT(r.body, HasSubstr("no API token is configured"));
}

TEST_F(RestApiTest, ProbesAndMetricsNeedNoToken) {
  ClientResponse r = client_->request("GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"ok"})");
  r = client_->request("GET", "/readyz");
  EXPECT_EQ(r.status, 200);
  {
    std::lock_guard lock(engine_.mu());
    engine_.is_ready = false;
  }
  r = client_->request("GET", "/readyz");
  EXPECT_EQ(r.status, 503);
  r = client_->request("GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(*r.header("content-type"), HasSubstr("text/plain"));
  EXPECT_THAT(r.body, HasSubstr("ringcast_attempts_total"));
}

TEST_F(RestApiTest, UnknownRouteIs404AndWrongMethodIs405) {
  expect_error(call("GET", "/nope"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/whatever"), 404, "not_found");
  ClientResponse r = call("DELETE", "/v1/tenants/acme/endpoints");
  expect_error(r, 405, "method_not_allowed");
  ASSERT_NE(r.header("allow"), nullptr);
  EXPECT_EQ(*r.header("allow"), "GET, POST");
  expect_error(call("GET", "/v1/tenants/acme/events"), 405, "method_not_allowed");
  expect_error(call("GET", "/v1/events/bulk"), 405, "method_not_allowed");
  expect_error(call("GET", "/v1/tenants/ac%zzme/endpoints"), 400, "invalid_path");
  expect_error(call("GET", "/v1/tenants/has%20space/endpoints"), 400, "invalid_value", "tenant");
}

// --- endpoints ---------------------------------------------------------------------------------

TEST_F(RestApiTest, EndpointLifecycle) {
  ClientResponse r = call("POST", "/v1/tenants/acme/endpoints",
                          R"({"url":"https://hooks.example.com/a","event_types":["payment.*"],
                              "policy":"xhub","signature":"xhub","secret":"whsec_c2VjcmV0",
                              "rate_limit":{"per_second":2.5,"burst":10},"max_in_flight":4})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto el = parse(parser_, r.body);
  std::string id = str(el, "id");
  EXPECT_EQ(id, std::to_string((uint64_t{200} << 48) | 1));  // a string: > 2^53
  EXPECT_EQ(str(el, "url"), "https://hooks.example.com/a");
  EXPECT_EQ(str(el, "policy"), "xhub");
  EXPECT_EQ(str(el, "signature"), "xhub");
  EXPECT_EQ(str(el, "state"), "enabled");
  EXPECT_EQ(str(el, "secret"), "whsec_" + net::base64_encode("whsec_c2VjcmV0"));
  EXPECT_EQ(num(el, "max_in_flight"), 4);
  double per_second = 0;
  EXPECT_FALSE(el["rate_limit"]["per_second"].get(per_second));
  EXPECT_DOUBLE_EQ(per_second, 2.5);
  std::string_view type;
  EXPECT_FALSE(el["event_types"].at(0).get(type));
  EXPECT_EQ(type, "payment.*");

  r = call("GET", "/v1/tenants/acme/endpoints");
  ASSERT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr("\"id\":\"" + id + "\""));
  EXPECT_THAT(r.body, ::testing::Not(HasSubstr("\"secret\"")));  // listings hide secrets

  r = call("GET", "/v1/tenants/acme/endpoints/" + id);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(str(parse(parser_, r.body), "id"), id);

  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id,
           R"({"url":"https://hooks.example.com/b","event_types":[],"max_in_flight":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(parse(parser_, r.body), "url"), "https://hooks.example.com/b");

  for (auto [action, state] : {std::pair{"pause", "paused"},
                               {"resume", "enabled"},
                               {"pause", "paused"},
                               {"enable", "enabled"}}) {
    r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/" + action);
    ASSERT_EQ(r.status, 200) << action << r.body;
    EXPECT_EQ(str(parse(parser_, r.body), "state"), state);
  }

  r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/test");
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(str(parse(parser_, r.body), "delivery_id"), std::to_string((uint64_t{7} << 48) | 99));

  r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/secret/rotate");
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(parser_, r.body);
  EXPECT_EQ(str(el, "secret"), "whsec_" + net::base64_encode("rotated-0"));
  EXPECT_EQ(num(el, "secrets_active"), 2);
  EXPECT_EQ(str(el, "previous_secret_expires_at"), "2026-01-02T00:00:00.000Z");
  r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/secret/rotate", R"({"secret":"mine"})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(str(parse(parser_, r.body), "secret"), "whsec_" + net::base64_encode("mine"));

  r = call("DELETE", "/v1/tenants/acme/endpoints/" + id);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"id":")" + id + R"(","deleted":true})");
  expect_error(call("GET", "/v1/tenants/acme/endpoints/" + id), 404, "not_found");
  expect_error(call("DELETE", "/v1/tenants/acme/endpoints/" + id), 404, "not_found");
}

TEST_F(RestApiTest, UnknownTenantAndEndpointAre404) {
  expect_error(call("GET", "/v1/tenants/ghost/endpoints"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/endpoints/12345"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/endpoints/not-a-number"), 404, "not_found");
  expect_error(call("POST", "/v1/tenants/acme/endpoints/12345/pause"), 404, "not_found");
  expect_error(call("POST", "/v1/tenants/acme/endpoints/12345/test"), 404, "not_found");
  std::string id = create();
  expect_error(call("GET", "/v1/tenants/other/endpoints/" + id), 404, "not_found");
}

TEST_F(RestApiTest, UrlFormErrorsAre422WithTheSpecCode) {
  const std::pair<const char*, const char*> cases[] = {
      {"http://hooks.example.com/a", "not_https"},
      {"https://user:pw@hooks.example.com/a", "userinfo_not_allowed"},
      {"https://hooks.example.com/a#frag", "fragment_not_allowed"},
      {"https://hooks.example.com:22/a", "port_not_allowed"},
      {"https://a", "url_too_short"},
  };
  for (auto [url, code] : cases) {
    ClientResponse r =
        call("POST", "/v1/tenants/acme/endpoints", std::string(R"({"url":")") + url + "\"}");
    expect_error(r, 422, code, "url");
  }
}

TEST_F(RestApiTest, EndpointBodyErrorsNameTheField) {
  struct Case {
    const char* body;
    int status;
    const char* code;
    const char* field;
  };
  const Case cases[] = {
      {R"({"url":5})", 400, "invalid_type", "url"},
      {R"({})", 400, "missing_field", "url"},
      {R"({"url":"https://hooks.example.com/a","event_types":"payment.*"})", 400, "invalid_type",
       "event_types"},
      {R"({"url":"https://hooks.example.com/a","event_types":[1]})", 400, "invalid_type",
       "event_types"},
      {R"({"url":"https://hooks.example.com/a","event_types":["has space"]})", 400, "invalid_value",
       "event_types"},
      {R"({"url":"https://hooks.example.com/a","signature":"rsa"})", 400, "invalid_value",
       "signature"},
      {R"({"url":"https://hooks.example.com/a","policy":7})", 400, "invalid_type", "policy"},
      {R"({"url":"https://hooks.example.com/a","policy":"nope"})", 400, "unknown_policy", "policy"},
      {R"({"url":"https://hooks.example.com/a","rate_limit":{"per_second":-1}})", 400,
       "invalid_type", "rate_limit.per_second"},
      {R"({"url":"https://hooks.example.com/a","rate_limit":{"burst":"x"}})", 400, "invalid_type",
       "rate_limit.burst"},
      {R"({"url":"https://hooks.example.com/a","rate_limit":{"rps":1}})", 400, "unknown_field",
       "rate_limit.rps"},
      {R"({"url":"https://hooks.example.com/a","max_in_flight":-2})", 400, "invalid_type",
       "max_in_flight"},
      {R"({"url":"https://hooks.example.com/a","colour":"red"})", 400, "unknown_field", "colour"},
      {R"({"url":"https://hooks.example.com/a","url":"https://hooks.example.com/b"})", 400,
       "duplicate_field", "url"},
      {R"({"url":"https://hooks.example.com/a")", 400, "invalid_json", ""},
      {R"([1,2])", 400, "invalid_json", ""},
      {R"({"url":"https://hooks.example.com/a"} trailing)", 400, "invalid_json", ""},
      {"", 400, "invalid_json", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    expect_error(call("POST", "/v1/tenants/acme/endpoints", c.body), c.status, c.code, c.field);
  }
  std::string id = create();
  expect_error(call("PATCH", "/v1/tenants/acme/endpoints/" + id, R"({"secret":"x"})"), 400,
               "unknown_field", "secret");
  expect_error(
      call("PATCH", "/v1/tenants/acme/endpoints/" + id, R"({"url":"ftp://x.example.com/"})"), 422,
      "not_https", "url");
}

// --- events ------------------------------------------------------------------------------------

TEST_F(RestApiTest, EventAcceptedRepeatedAndConflicting) {
  create();
  create();
  ClientResponse r = call("POST", "/v1/tenants/acme/events",
                          R"({"id":"evt-1","type":"payment.created","payload":{"a":1}})");
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, R"({"event_id":"evt-1","deliveries":2})");
  r = call("POST", "/v1/tenants/acme/events",
           R"({"id":"evt-1","type":"payment.created","payload":{"a":1}})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"event_id":"evt-1","deliveries":2})");
  r = call("POST", "/v1/tenants/acme/events",
           R"({"id":"evt-1","type":"payment.created","payload":{"a":2}})");
  expect_error(r, 409, "conflict");
  r = call("POST", "/v1/tenants/ghost/events", R"({"id":"e","type":"t","payload":{}})");
  expect_error(r, 404, "not_found");
}

TEST_F(RestApiTest, PayloadReachesTheEngineByteForByte) {
  const std::string payloads[] = {
      R"({"b" : 1,   "a":"\u00e9\n\"q\"",
 "c":[1.50, 2e3, -0.0, true, null], "d": {"deep": [[[]]]}, "u": "h\u00e9llo \ud83d\ude00"})",
      R"([ 1 , 2 ,3 ])",
      R"("just a string \/ with escapes")",
      R"(12345678901234567890.1e-3)",
      R"(true)",
      R"(null)",
      "{\"tab\":\t\"v\"\r\n}",
      R"({})",
      "{\"utf8\":\"日本語 ✓\"}",
  };
  int n = 0;
  for (const auto& p : payloads) {
    std::string id = "evt-bytes-" + std::to_string(n++);
    std::string body = R"({"id":")" + id + R"(",  "payload":  )" + p + R"(  , "type":"t"})";
    ClientResponse r = call("POST", "/v1/tenants/acme/events", body);
    ASSERT_EQ(r.status, 202) << p << " -> " << r.body;
    std::lock_guard lock(engine_.mu());
    ASSERT_FALSE(engine_.submitted.empty());
    EXPECT_EQ(engine_.submitted.back().payload, p);
    EXPECT_EQ(engine_.submitted.back().id, id);
    EXPECT_EQ(engine_.submitted.back().tenant, "acme");
  }
}

TEST_F(RestApiTest, EventBodyErrors) {
  struct Case {
    const char* body;
    const char* code;
    const char* field;
  };
  const Case cases[] = {
      {R"({"type":"t","payload":{}})", "missing_field", "id"},
      {R"({"id":"e","payload":{}})", "missing_field", "type"},
      {R"({"id":"e","type":"t"})", "missing_field", "payload"},
      {R"({"id":1,"type":"t","payload":{}})", "invalid_type", "id"},
      {R"({"id":"e","type":["t"],"payload":{}})", "invalid_type", "type"},
      {R"({"id":"","type":"t","payload":{}})", "invalid_value", "id"},
      {R"({"id":"e","type":"has space","payload":{}})", "invalid_value", "type"},
      {R"({"id":"e","type":"t","payload":{"a": tru}})", "invalid_json", "payload"},
      {R"({"id":"e","type":"t","payload":{"a": 1,}})", "invalid_json", "payload"},
      {R"({"id":"e","type":"t","payload":{}, "tenant":"other"})", "unknown_field", "tenant"},
      {R"({"id":"e","type":"t","payload":{})", "invalid_json", ""},
      {"{\"id\":\"e\xff\",\"type\":\"t\",\"payload\":{}}", "invalid_json", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    expect_error(call("POST", "/v1/tenants/acme/events", c.body), 400, c.code, c.field);
  }
  std::lock_guard lock(engine_.mu());
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST_F(RestApiTest, OversizeJsonBodyIs413ButBulkMayBeLarger) {
  RestApiOptions o;
  o.max_body_bytes = 4096;
  o.max_bulk_body_bytes = 1 << 20;
  start(o);
  std::string big(5000, 'x');
  std::string body = R"({"id":"e","type":"t","payload":")" + big + "\"}";
  expect_error(call("POST", "/v1/tenants/acme/events", body), 413, "body_too_large", "body");
  client_ = std::make_unique<TestClient>(server_->port());  // that connection was closed
  std::string line = R"({"tenant":"acme","id":"b1","type":"t","payload":")" + big + "\"}\n";
  ClientResponse r =
      call("POST", "/v1/events/bulk", line, {{"Content-Type", "application/x-ndjson"}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(RestApiTest, BulkGivesPerLineResults) {
  create();
  std::string body =
      R"({"tenant":"acme","id":"b1","type":"t","payload":{"n":1}})"
      "\n"
      R"({"tenant":"acme","id":"b2","type":"t","payload":[1, 2]})"
      "\n\n"  // a blank line is skipped but counted
      R"({"tenant":"acme","id":"b1","type":"t","payload":{"n":1}})"
      "\n"
      R"({"tenant":"acme","id":"b2","type":"t","payload":"other"})"
      "\n"
      R"({"tenant":"ghost","id":"g1","type":"t","payload":{}})"
      "\n"
      R"({"id":"x","type":"t","payload":{}})"
      "\n"
      R"({"tenant":"acme","id":"bad","type":"t","payload":{]})"
      "\n"
      R"({"tenant":"acme","id":"b3","type":"t","payload":  { "k" : "v" } })";  // no final \n
  ClientResponse r =
      call("POST", "/v1/events/bulk", body, {{"Content-Type", "application/x-ndjson"}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(parser_, r.body);
  EXPECT_EQ(num(el, "lines"), 8);
  EXPECT_EQ(num(el, "accepted"), 3);
  EXPECT_EQ(num(el, "duplicates"), 1);
  EXPECT_EQ(num(el, "conflicts"), 1);
  EXPECT_EQ(num(el, "errors"), 3);
  simdjson::dom::array results;
  ASSERT_FALSE(el["results"].get(results));
  std::vector<std::tuple<int64_t, int64_t, std::string>> got;  // line, status, code
  for (auto item : results) {
    std::string code;
    simdjson::dom::element err;
    if (!item["error"].get(err)) code = str(err, "code");
    got.emplace_back(num(item, "line"), num(item, "status"), code);
  }
  std::vector<std::tuple<int64_t, int64_t, std::string>> want = {{1, 202, ""},
                                                                 {2, 202, ""},
                                                                 {4, 200, ""},
                                                                 {5, 409, "conflict"},
                                                                 {6, 404, "not_found"},
                                                                 {7, 400, "missing_field"},
                                                                 {8, 400, "invalid_json"},
                                                                 {9, 202, ""}};
  EXPECT_EQ(got, want);
  std::lock_guard lock(engine_.mu());
  EXPECT_EQ(engine_.batches, 1u);
  ASSERT_EQ(engine_.submitted.size(), 6u);  // the three bad lines never reach the engine
  EXPECT_EQ(engine_.submitted[1].payload, "[1, 2]");
  EXPECT_EQ(engine_.submitted[5].payload, R"({ "k" : "v" })");
}

TEST_F(RestApiTest, BulkLimits) {
  RestApiOptions o;
  o.max_bulk_events = 3;
  start(o);
  std::string body;
  for (int i = 0; i < 4; ++i) {
    body += R"({"tenant":"acme","id":"l)" + std::to_string(i) +
            R"(","type":"t","payload":{}})"
            "\n";
  }
  expect_error(call("POST", "/v1/events/bulk", body), 413, "too_many_events");
  expect_error(call("POST", "/v1/events/bulk", "\n\n"), 400, "invalid_json");
}

// --- deliveries, tenant state --------------------------------------------------------------------

class RestApiDeliveriesTest : public RestApiTest {
 protected:
  void SetUp() override {
    RestApiTest::SetUp();
    engine_.seed_delivery_log();
  }
};

TEST_F(RestApiDeliveriesTest, ListPassesFiltersAndPages) {
  ClientResponse r =
      call("GET", "/v1/tenants/acme/deliveries?endpoint=77&state=delivered&limit=1&cursor=abc%3D");
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(parser_, r.body);
  simdjson::dom::array items;
  ASSERT_FALSE(el["deliveries"].get(items));
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(str(el, "next_cursor"), "next-page");
  // Each item names its event: the producer's id and the type (R10.2).
  EXPECT_EQ(str(items.at(0), "event_id"), "evt-9");
  EXPECT_EQ(str(items.at(0), "event_type"), "payment.status_changed");
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_list.endpoint, 77u);
    EXPECT_EQ(engine_.last_list.status, DeliveryStatus::kDelivered);
    EXPECT_EQ(engine_.last_list.limit, 1u);
    EXPECT_EQ(engine_.last_list.cursor, "abc=");
  }
  r = call("GET", "/v1/tenants/acme/deliveries");
  ASSERT_EQ(r.status, 200);
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_list.limit, 50u);
    EXPECT_FALSE(engine_.last_list.endpoint);
  }
  expect_error(call("GET", "/v1/tenants/acme/deliveries?state=lost"), 400, "invalid_value",
               "state");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?limit=0"), 400, "invalid_value", "limit");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?limit=5000"), 400, "invalid_value",
               "limit");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?endpoint=x"), 400, "invalid_value",
               "endpoint");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?colour=red"), 400, "unknown_field",
               "colour");
  expect_error(call("GET", "/v1/tenants/ghost/deliveries"), 404, "not_found");
}

TEST_F(RestApiDeliveriesTest, OneDeliveryWithAttemptsAndItsEvent) {
  std::string id = std::to_string((uint64_t{9} << 48) | 1);
  ClientResponse r = call("GET", "/v1/tenants/acme/deliveries/" + id);
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(parser_, r.body);  // valid JSON although the response prefix is not UTF-8
  EXPECT_EQ(str(el["delivery"], "id"), id);
  EXPECT_EQ(str(el["delivery"], "status"), "delivered");
  EXPECT_EQ(str(el["delivery"], "created_at"), "2026-01-01T00:00:00.123Z");
  simdjson::dom::array attempts;
  ASSERT_FALSE(el["attempts"].get(attempts));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(str(attempts.at(0), "code"), "http_503");
  EXPECT_EQ(num(attempts.at(0), "http_status"), 503);
  EXPECT_EQ(str(attempts.at(0), "response_prefix"),
            "busy \xEF\xBF\xBD\xEF\xBF\xBD \"quoted\"\n\x01");
  EXPECT_EQ(str(attempts.at(0), "ladder"), "fast");
  EXPECT_EQ(str(el["event"], "type"), "payment.status_changed");
  EXPECT_THAT(r.body, HasSubstr(R"("payload":{"status": "paid"})"));  // verbatim

  expect_error(call("GET", "/v1/tenants/acme/deliveries/424242"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/deliveries/xyz"), 404, "not_found");
  {
    std::lock_guard lock(engine_.mu());
    engine_.known_tenants.insert("other");
  }
  expect_error(call("GET", "/v1/tenants/other/deliveries/" + id), 404, "not_found");
}

TEST_F(RestApiDeliveriesTest, RecentHasAttemptHistory) {
  ClientResponse r = call("GET", "/v1/tenants/acme/deliveries/recent");
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(parser_, r.body);
  simdjson::dom::array items;
  ASSERT_FALSE(el["deliveries"].get(items));
  ASSERT_EQ(items.size(), 3u);
  simdjson::dom::array attempts;
  ASSERT_FALSE(items.at(0)["attempts"].get(attempts));
  EXPECT_EQ(attempts.size(), 2u);
  EXPECT_EQ(str(items.at(0)["event"], "id"), "evt-9");
}

TEST_F(RestApiDeliveriesTest, EventLookup) {
  ClientResponse r = call("GET", "/v1/tenants/acme/events/evt-9");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("payload":{"status": "paid"})"));
  expect_error(call("GET", "/v1/tenants/acme/events/nope"), 404, "not_found");
}

TEST_F(RestApiDeliveriesTest, BreakerSubscriptionNotifications) {
  engine_.open_breaker();
  ClientResponse r = call("GET", "/v1/tenants/acme/breaker");
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(parser_, r.body);
  EXPECT_EQ(str(el, "state"), "open");
  EXPECT_EQ(num(el, "window_failed"), 9);
  EXPECT_EQ(str(el, "reopen_at"), "2026-01-01T00:05:00.000Z");
  r = call("POST", "/v1/tenants/acme/breaker/reset");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(str(parse(parser_, r.body), "state"), "closed");
  expect_error(call("GET", "/v1/tenants/ghost/breaker"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/breaker/reset"), 405, "method_not_allowed");

  r = call("PUT", "/v1/tenants/acme/subscription", R"({"active":false})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"tenant":"acme","active":false})");
  EXPECT_EQ(engine_.subscription("acme"), false);
  expect_error(call("PUT", "/v1/tenants/acme/subscription", R"({"active":"no"})"), 400,
               "invalid_type", "active");
  expect_error(call("PUT", "/v1/tenants/acme/subscription", R"({})"), 400, "missing_field",
               "active");
  expect_error(call("POST", "/v1/tenants/acme/subscription", R"({"active":true})"), 405,
               "method_not_allowed");

  r = call("GET", "/v1/tenants/acme/notifications");
  ASSERT_EQ(r.status, 200);
  el = parse(parser_, r.body);
  simdjson::dom::array notes;
  ASSERT_FALSE(el["notifications"].get(notes));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(str(notes.at(0), "kind"), "endpoint_disabled");
  EXPECT_EQ(str(notes.at(0), "reason"), "gone");
  EXPECT_EQ(str(notes.at(0), "endpoint"), "77");
}

// --- JSON writer
// -----------------------------------------------------------------------------------

TEST(JsonWriterTest, EscapesAndRepairsUtf8) {
  std::string out;
  append_json_string(out, std::string("a\"b\\c\n\t\x01\x7f", 9));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\"");
  out.clear();
  append_json_string(out, "\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80");  // é ✓ 😀 stay
  EXPECT_EQ(out, "\"\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80\"");
  out.clear();
  append_json_string(out,
                     "\xc0\xaf|\xed\xa0\x80|\xe2\x9c|\xf5\x80\x80\x80");  // overlong, surrogate,
                                                                          // truncated, > U+10FFFF
  simdjson::dom::parser p;
  simdjson::dom::element el;
  ASSERT_FALSE(p.parse(out).get(el)) << out;
  EXPECT_EQ(out.find('\xc0'), std::string::npos);

  JsonWriter w;
  w.begin_object().field("a", 1).key("b").begin_array().value(true).null().value(2.5).end_array();
  w.field("c", std::string_view("x")).key("d").raw(R"({"k":[]})").end_object();
  EXPECT_EQ(w.str(), R"({"a":1,"b":[true,null,2.5],"c":"x","d":{"k":[]}})");
}

}  // namespace
}  // namespace ringcast::net::api
