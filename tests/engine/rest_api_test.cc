// The REST adapter (api/rest_api) on the real engine: engine::Embedded over RocksDB in a
// temp dir, two shard threads, the HTTP transport delivering to a receiver on 127.0.0.1, the
// API served over loopback sockets. Every route: its success shape, 400 naming the field, 401
// without the token, 404 naming what is unknown, 409 conflicts, bulk per-line results, and
// what a stopping engine answers (503). The tests live here, not in tests/net, because the
// net test binary must not link the engine (engine depends on net, not the other way round).
#include "api/rest_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <simdjson.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/build.h"
#include "engine/config.h"
#include "engine/embedded.h"
#include "examples/loopback_receiver.h"
#include "net/http_server.h"
#include "net/signing.h"
#include "tests/engine/engine_test_util.h"
#include "tests/net/http_test_client.h"
#include "tests/support/temp_dir.h"

namespace ringcast::api {
namespace {

using examples::ReceivedRequest;
using test::ClientResponse;
using test::TestClient;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kToken = "test-token-0123456789";

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

bool is_null(simdjson::dom::element el, std::string_view key) {
  simdjson::dom::element v;
  return !el[key].get(v) && v.is_null();
}

// Percent-encodes a query value (a cursor is opaque: it may hold '+', '/' or '=').
std::string query(std::string_view v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The receiver's answers per path: a script of statuses, the last one repeating (200 when
// none), and what it got.
class Receiver {
 public:
  int on_request(const ReceivedRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    got_.push_back(r);
    cv_.notify_all();
    auto& script = scripts_[r.target];
    if (script.empty()) return 200;
    int status = script.front();
    if (script.size() > 1) script.erase(script.begin());
    return status;
  }
  void script(const std::string& path, std::vector<int> statuses) {
    std::lock_guard<std::mutex> lock(mu_);
    scripts_[path] = std::move(statuses);
  }
  std::vector<ReceivedRequest> to(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ReceivedRequest> out;
    for (const auto& r : got_)
      if (r.target == path) out.push_back(r);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ReceivedRequest> got_;
  std::map<std::string, std::vector<int>> scripts_;
};

class RestApiEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(start({})); }
  void TearDown() override {
    client_.reset();
    server_.reset();
    api_.reset();   // stops the read pool before the engine goes
    core_.reset();  // stops the engine, then closes the store
    receiver_.stop();
  }

  void start(RestApiOptions o) {
    client_.reset();
    server_.reset();
    api_.reset();
    if (!core_) {
      // "fast": 3 attempts 100 ms apart, off the breaker; "tripping": feeds the tenant breaker
      // (SPEC R4) and waits a minute before a retry, so the test sees its first attempts only.
      Config cfg = test::loopback_config(2, 3, std::chrono::milliseconds(100));
      PolicyConfig tripping = cfg.policies["fast"];
      tripping.name = "tripping";
      tripping.ladder = {std::chrono::seconds(60)};
      tripping.breaker = true;
      cfg.policies["tripping"] = tripping;
      cfg.storage.data_dir = dir_.path();
      cfg.validate();
      engine::EngineOptions eopts = engine::engine_options(cfg);
      eopts.on_delivery_done = [this](const Delivery& d) {
        std::lock_guard<std::mutex> lock(done_mu_);
        done_.push_back(d);
        done_cv_.notify_all();
      };
      auto opened = engine::Embedded::open(engine::store_options(cfg), std::move(eopts));
      ASSERT_TRUE(opened.ok()) << opened.error().message;
      core_ = std::move(*opened);
    }
    o.api_token = o.api_token.empty() ? kToken : o.api_token;
    api_ = std::make_unique<RestApi>(core_->engine(), o);
    server_ = std::make_unique<net::HttpServerThread>(*api_, net::HttpServerOptions{});
    ASSERT_TRUE(server_->start().ok());
    client_ = std::make_unique<TestClient>(server_->port());
  }

  ClientResponse call(std::string_view method, std::string_view target, std::string_view body = {},
                      Headers extra = {}) {
    Headers h = {{"Authorization", std::string("Bearer ") + kToken}};
    for (auto& kv : extra) h.push_back(kv);
    return client_->request(method, target, body, h);
  }

  // Parses a response body (fails the test on invalid JSON). Each call may reuse the parser:
  // use the element before the next parse.
  simdjson::dom::element parse(const std::string& body) {
    simdjson::dom::element el;
    auto err =
        parsers_.emplace_back(std::make_unique<simdjson::dom::parser>())->parse(body).get(el);
    EXPECT_FALSE(err) << "invalid JSON: " << body;
    return el;
  }

  // Checks the error shape: status, code, a message, and the field when one is named.
  void expect_error(const ClientResponse& r, int status, std::string_view code,
                    std::string_view field = {}) {
    EXPECT_EQ(r.status, status) << r.body;
    simdjson::dom::element el = parse(r.body);
    simdjson::dom::element err;
    ASSERT_FALSE(el["error"].get(err)) << r.body;
    EXPECT_EQ(str(err, "code"), code) << r.body;
    EXPECT_FALSE(str(err, "message").empty()) << r.body;
    if (!field.empty()) {
      EXPECT_EQ(str(err, "field"), field) << r.body;
    }
  }

  std::string url(const std::string& path) const { return receiver_.url(path); }

  // Creates an endpoint of `tenant` to the receiver's `path`; returns its id.
  std::string create(const std::string& path, const std::string& extra = "",
                     const std::string& tenant = "acme") {
    ClientResponse r = call("POST", "/v1/tenants/" + tenant + "/endpoints",
                            R"({"url":")" + url(path) + "\"" + extra + "}");
    EXPECT_EQ(r.status, 201) << r.body;
    return str(parse(r.body), "id");
  }

  ClientResponse submit(const std::string& id, const std::string& payload,
                        const std::string& type = "payment.created",
                        const std::string& tenant = "acme") {
    return call("POST", "/v1/tenants/" + tenant + "/events",
                R"({"id":")" + id + R"(","type":")" + type + R"(","payload":)" + payload + "}");
  }

  // The deliveries the engine reported finished (on_delivery_done), once there are `n`.
  std::vector<Delivery> wait_done(size_t n) {
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait_for(lock, test::kEngineWait, [&] { return done_.size() >= n; });
    return done_;
  }

  // Repeats GET `target` until `ok` holds for the answer (bounded); returns the last answer.
  template <class Pred>
  ClientResponse poll(const std::string& target, Pred ok) {
    ClientResponse r;
    for (auto deadline = Clock::now() + test::kEngineWait; Clock::now() < deadline;) {
      r = call("GET", target);
      if (ok(r)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return r;
  }

  Receiver rec_;
  examples::LoopbackReceiver receiver_{
      [this](const ReceivedRequest& r) { return rec_.on_request(r); }};
  test::TempDir dir_{"ringcast-rest-api"};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::vector<Delivery> done_;
  std::unique_ptr<engine::Embedded> core_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<net::HttpServerThread> server_;
  std::unique_ptr<TestClient> client_;
  std::vector<std::unique_ptr<simdjson::dom::parser>> parsers_;
};

// --- auth, probes, plumbing -------------------------------------------------------------------

TEST_F(RestApiEngineTest, EveryV1RouteNeedsTheToken) {
  std::string id = create("/a");
  const std::pair<const char*, std::string> routes[] = {
      {"GET", "/v1/tenants/acme/endpoints"},
      {"POST", "/v1/tenants/acme/endpoints"},
      {"GET", "/v1/tenants/acme/endpoints/" + id},
      {"PATCH", "/v1/tenants/acme/endpoints/" + id},
      {"DELETE", "/v1/tenants/acme/endpoints/" + id},
      {"POST", "/v1/tenants/acme/endpoints/" + id + "/pause"},
      {"POST", "/v1/tenants/acme/endpoints/" + id + "/test"},
      {"POST", "/v1/tenants/acme/endpoints/" + id + "/secret/rotate"},
      {"POST", "/v1/tenants/acme/events"},
      {"GET", "/v1/tenants/acme/events/e1"},
      {"POST", "/v1/events/bulk"},
      {"GET", "/v1/tenants/acme/deliveries"},
      {"GET", "/v1/tenants/acme/deliveries/recent"},
      {"GET", "/v1/tenants/acme/deliveries/1"},
      {"GET", "/v1/tenants/acme/breaker"},
      {"POST", "/v1/tenants/acme/breaker/reset"},
      {"PUT", "/v1/tenants/acme/subscription"},
      {"GET", "/v1/tenants/acme/notifications"},
      {"GET", "/v1/tenants/acme/settings"},
      {"PUT", "/v1/tenants/acme/settings"},
      {"GET", "/v1/cluster"},
      {"GET", "/v1/nothing-here"},
  };
  const std::string bulk = R"({"tenant":"acme","id":"e1","type":"t","payload":{}})";
  for (const auto& [m, path] : routes) {
    SCOPED_TRACE(std::string(m) + " " + path);
    const std::string body = path == "/v1/events/bulk"   ? bulk
                             : path.ends_with("/events") ? R"({"id":"e1","type":"t","payload":{}})"
                                                         : "{}";
    ClientResponse r = client_->request(m, path, body);
    expect_error(r, 401, "unauthorized");
    ASSERT_NE(r.header("www-authenticate"), nullptr);
    r = client_->request(m, path, body, {{"Authorization", "Bearer wrong-token"}});
    expect_error(r, 401, "unauthorized");
    EXPECT_THAT(r.body, HasSubstr("wrong bearer token"));
  }
  // Nothing reached the engine: the endpoint is as created, no event was taken in.
  ClientResponse r = call("GET", "/v1/tenants/acme/endpoints/" + id);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(parse(r.body), "state"), "enabled");
  expect_error(call("GET", "/v1/tenants/acme/events/e1"), 404, "unknown_event", "event");
}

TEST_F(RestApiEngineTest, NoConfiguredTokenRefusesEverything) {
  server_.reset();
  RestApiOptions o;
  o.api_token = "";
  api_ = std::make_unique<RestApi>(core_->engine(), o);  // start() would put the token back
  server_ = std::make_unique<net::HttpServerThread>(*api_, net::HttpServerOptions{});
  ASSERT_TRUE(server_->start().ok());
  TestClient c(server_->port());
  ClientResponse r =
      c.request("GET", "/v1/tenants/acme/endpoints", {}, {{"Authorization", "Bearer "}});
  expect_error(r, 401, "unauthorized");
  EXPECT_THAT(r.body, HasSubstr("no API token is configured"));
}

TEST_F(RestApiEngineTest, ProbesAndMetricsNeedNoTokenAndAStoppedEngineIs503) {
  ClientResponse r = client_->request("GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"ok"})");
  r = client_->request("GET", "/readyz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"ready"})");
  std::string id = create("/m");
  ASSERT_EQ(submit("m1", "{}").status, 202);
  // The figures are the platform's (SPEC R14): the admin token, unless metrics_public.
  r = client_->request("GET", "/metrics");
  EXPECT_EQ(r.status, 401);
  r = client_->request("GET", "/metrics", {}, {{"Authorization", std::string("Bearer ") + kToken}});
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(*r.header("content-type"), HasSubstr("text/plain"));
  EXPECT_THAT(r.body, HasSubstr("ringcast_events_accepted_total"));

  core_->engine().stop();  // as SIGTERM does; the object stays until the fixture closes it
  r = client_->request("GET", "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, R"({"status":"not_ready"})");
  expect_error(submit("m2", "{}"), 503, "shutting_down");
  expect_error(call("GET", "/v1/tenants/acme/endpoints"), 503, "shutting_down");
  expect_error(call("POST", "/v1/tenants/acme/endpoints/" + id + "/pause"), 503, "shutting_down");
  r = call("POST", "/v1/events/bulk", R"({"tenant":"acme","id":"m3","type":"t","payload":{}})");
  ASSERT_EQ(r.status, 200) << r.body;  // per line: 503, so a client resends that line
  simdjson::dom::element line;
  ASSERT_FALSE(parse(r.body)["results"].at(0).get(line)) << r.body;
  EXPECT_EQ(num(line, "status"), 503);
  EXPECT_EQ(str(line["error"], "code"), "shutting_down");
}

TEST_F(RestApiEngineTest, UnknownRouteIs404AndWrongMethodIs405) {
  expect_error(call("GET", "/nope"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/whatever"), 404, "not_found");
  expect_error(call("GET", "/v1/tenants/acme/endpoints/1/2/3/4"), 404, "not_found");
  ClientResponse r = call("DELETE", "/v1/tenants/acme/endpoints");
  expect_error(r, 405, "method_not_allowed");
  ASSERT_NE(r.header("allow"), nullptr);
  EXPECT_EQ(*r.header("allow"), "GET, POST");
  expect_error(call("GET", "/v1/tenants/acme/events"), 405, "method_not_allowed");
  expect_error(call("GET", "/v1/events/bulk"), 405, "method_not_allowed");
  expect_error(call("POST", "/v1/tenants/acme/deliveries"), 405, "method_not_allowed");
  expect_error(call("GET", "/v1/tenants/acme/breaker/reset"), 405, "method_not_allowed");
  expect_error(call("POST", "/v1/tenants/acme/subscription", R"({"active":true})"), 405,
               "method_not_allowed");
  expect_error(call("GET", "/v1/tenants/ac%zzme/endpoints"), 400, "invalid_path");
  expect_error(call("GET", "/v1/tenants/has%20space/endpoints"), 400, "invalid_value", "tenant");
}

// --- 404: what is unknown is named ------------------------------------------------------------

// A tenant that never had an endpoint is 404 unknown_tenant (field "tenant") on every route
// that names only the tenant. The read routes too: the store has no tenant list, and before
// this the real engine answered 200 with empty lists there while the fake engine said 404.
TEST_F(RestApiEngineTest, UnknownTenantIs404OnEveryTenantRoute) {
  create("/a");  // another tenant exists: the answers are about "ghost", not an empty engine
  const std::pair<const char*, const char*> routes[] = {
      {"GET", "/v1/tenants/ghost/endpoints"},
      {"GET", "/v1/tenants/ghost/deliveries"},
      {"GET", "/v1/tenants/ghost/deliveries?state=failed&limit=3"},
      {"GET", "/v1/tenants/ghost/deliveries/recent"},
      {"GET", "/v1/tenants/ghost/notifications"},
      {"GET", "/v1/tenants/ghost/breaker"},
      {"POST", "/v1/tenants/ghost/breaker/reset"},
      {"GET", "/v1/tenants/ghost/settings"},
  };
  for (auto [m, path] : routes) {
    SCOPED_TRACE(std::string(m) + " " + path);
    expect_error(call(m, path), 404, "unknown_tenant", "tenant");
  }
  expect_error(call("PUT", "/v1/tenants/ghost/subscription", R"({"active":false})"), 404,
               "unknown_tenant", "tenant");
  expect_error(submit("g1", "{}", "t", "ghost"), 404, "unknown_tenant", "tenant");
  // The tenant exists once it has an endpoint: the same reads are 200 with empty lists.
  create("/g", "", "ghost");
  for (const char* path : {"/v1/tenants/ghost/deliveries", "/v1/tenants/ghost/deliveries/recent",
                           "/v1/tenants/ghost/notifications"}) {
    ClientResponse r = call("GET", path);
    EXPECT_EQ(r.status, 200) << path << " " << r.body;
  }
  EXPECT_EQ(call("GET", "/v1/tenants/ghost/deliveries").body,
            R"({"deliveries":[],"next_cursor":null})");
}

// A route ending in an id names that thing: unknown_endpoint / unknown_delivery /
// unknown_event, with the field; a malformed id is unknown too (no such thing can exist).
TEST_F(RestApiEngineTest, UnknownEndpointDeliveryAndEventAre404NamingThem) {
  std::string id = create("/a");
  ASSERT_EQ(submit("e1", "{}").status, 202);
  auto done = wait_done(1);
  ASSERT_EQ(done.size(), 1u);
  const std::string delivery = std::to_string(done[0].id);
  const std::string eps = "/v1/tenants/acme/endpoints/";
  for (const std::string& ep : {std::string("12345"), std::string("not-a-number")}) {
    SCOPED_TRACE(ep);
    expect_error(call("GET", eps + ep), 404, "unknown_endpoint", "endpoint");
    expect_error(call("PATCH", eps + ep, R"({"max_in_flight":1})"), 404, "unknown_endpoint",
                 "endpoint");
    expect_error(call("DELETE", eps + ep), 404, "unknown_endpoint", "endpoint");
    for (const char* action : {"/pause", "/resume", "/enable", "/test", "/secret/rotate"})
      expect_error(call("POST", eps + ep + action), 404, "unknown_endpoint", "endpoint");
  }
  // Another tenant's endpoint, delivery and event are unknown to this one.
  create("/o", "", "other");
  expect_error(call("GET", "/v1/tenants/other/endpoints/" + id), 404, "unknown_endpoint",
               "endpoint");
  expect_error(call("POST", "/v1/tenants/other/endpoints/" + id + "/pause"), 404,
               "unknown_endpoint", "endpoint");
  expect_error(call("GET", "/v1/tenants/other/deliveries/" + delivery), 404, "unknown_delivery",
               "delivery");
  expect_error(call("GET", "/v1/tenants/other/events/e1"), 404, "unknown_event", "event");
  expect_error(call("GET", "/v1/tenants/acme/deliveries/424242"), 404, "unknown_delivery",
               "delivery");
  expect_error(call("GET", "/v1/tenants/acme/deliveries/xyz"), 404, "unknown_delivery", "delivery");
  expect_error(call("GET", "/v1/tenants/acme/events/nope"), 404, "unknown_event", "event");
  // Deleted is unknown; the tenant stays known without endpoints.
  ASSERT_EQ(call("DELETE", eps + id).status, 200);
  expect_error(call("GET", eps + id), 404, "unknown_endpoint", "endpoint");
  expect_error(call("DELETE", eps + id), 404, "unknown_endpoint", "endpoint");
  ClientResponse r = call("GET", "/v1/tenants/acme/endpoints");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"endpoints":[]})");
  r = call("GET", "/v1/tenants/acme/notifications");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"notifications":[]})");
}

// --- endpoints ----------------------------------------------------------------------------------

TEST_F(RestApiEngineTest, EndpointLifecycle) {
  ClientResponse r = call("POST", "/v1/tenants/acme/endpoints",
                          R"({"url":")" + url("/life") + R"(","event_types":["payment.*"],
               "policy":"xhub","signature":"xhub","secret":"whsec_c2VjcmV0",
               "rate_limit":{"per_second":2.5,"burst":10},"max_in_flight":4})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto el = parse(r.body);
  std::string id = str(el, "id");
  EXPECT_GT(std::stoull(id), uint64_t{1} << 48);  // (partition << 48) | seq: a string, > 2^53
  EXPECT_EQ(str(el, "tenant"), "acme");
  EXPECT_EQ(str(el, "url"), url("/life"));
  EXPECT_EQ(str(el, "policy"), "xhub");
  EXPECT_EQ(str(el, "signature"), "xhub");
  EXPECT_EQ(str(el, "state"), "enabled");
  EXPECT_TRUE(is_null(el, "disabled_reason"));
  EXPECT_EQ(str(el, "secret"), "whsec_c2VjcmV0");  // the key "secret", shown as given
  EXPECT_EQ(num(el, "secrets_active"), 1);
  EXPECT_EQ(num(el, "max_in_flight"), 4);
  double per_second = 0;
  EXPECT_FALSE(el["rate_limit"]["per_second"].get(per_second));
  EXPECT_DOUBLE_EQ(per_second, 2.5);
  EXPECT_EQ(num(el["rate_limit"], "burst"), 10);
  std::string_view type;
  EXPECT_FALSE(el["event_types"].at(0).get(type));
  EXPECT_EQ(type, "payment.*");
  EXPECT_THAT(str(el, "created_at"), ::testing::EndsWith("Z"));

  // A generated secret is 24 random bytes.
  std::string other = create("/gen");
  r = call("POST", "/v1/tenants/acme/endpoints/" + other + "/secret/rotate");
  ASSERT_EQ(r.status, 200) << r.body;
  auto key = net::decode_secret(str(parse(r.body), "secret"));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->size(), 24u);

  r = call("GET", "/v1/tenants/acme/endpoints");
  ASSERT_EQ(r.status, 200);
  simdjson::dom::array list;
  ASSERT_FALSE(parse(r.body)["endpoints"].get(list));
  EXPECT_EQ(list.size(), 2u);
  EXPECT_THAT(r.body, HasSubstr("\"id\":\"" + id + "\""));
  EXPECT_THAT(r.body, ::testing::Not(HasSubstr("\"secret\"")));  // listings hide secrets

  r = call("GET", "/v1/tenants/acme/endpoints/" + id);
  ASSERT_EQ(r.status, 200);
  el = parse(r.body);
  EXPECT_EQ(str(el, "id"), id);
  EXPECT_EQ(str(el, "secret"), "<missing secret>");

  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id,
           R"({"url":")" + url("/life2") + R"(","event_types":[],"max_in_flight":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  EXPECT_EQ(str(el, "url"), url("/life2"));
  EXPECT_EQ(num(el, "max_in_flight"), 1);
  EXPECT_EQ(str(el, "policy"), "xhub");  // absent fields are kept
  simdjson::dom::array types;
  ASSERT_FALSE(el["event_types"].get(types));
  EXPECT_EQ(types.size(), 0u);

  for (auto [action, state] : {std::pair{"pause", "paused"},
                               {"resume", "enabled"},
                               {"pause", "paused"},
                               {"enable", "enabled"}}) {
    r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/" + action);
    ASSERT_EQ(r.status, 200) << action << r.body;
    EXPECT_EQ(str(parse(r.body), "state"), state);
    EXPECT_EQ(str(parse(call("GET", "/v1/tenants/acme/endpoints/" + id).body), "state"), state);
  }

  r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/secret/rotate", R"({"secret":"mine"})");
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  EXPECT_EQ(str(el, "secret"), "whsec_" + net::base64_encode("mine"));
  EXPECT_EQ(num(el, "secrets_active"), 2);
  EXPECT_THAT(str(el, "previous_secret_expires_at"), ::testing::EndsWith("Z"));

  r = call("DELETE", "/v1/tenants/acme/endpoints/" + id);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"id":")" + id + R"(","deleted":true})");
  r = call("GET", "/v1/tenants/acme/endpoints");
  ASSERT_FALSE(parse(r.body)["endpoints"].get(list));
  EXPECT_EQ(list.size(), 1u);
}

TEST_F(RestApiEngineTest, TestEventGoesOutWhilePausedAndIsInTheLog) {
  std::string id = create("/t");
  ASSERT_EQ(call("POST", "/v1/tenants/acme/endpoints/" + id + "/pause").status, 200);
  ClientResponse r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/test");
  ASSERT_EQ(r.status, 202) << r.body;
  std::string delivery = str(parse(r.body), "delivery_id");
  // SPEC R9.3: a test event is sent while paused; the log has it with its attempt.
  r = poll("/v1/tenants/acme/deliveries/" + delivery,
           [](const ClientResponse& a) { return a.body.find("\"delivered\"") != a.body.npos; });
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(r.body);
  EXPECT_EQ(str(el["delivery"], "status"), "delivered");
  EXPECT_EQ(str(el["delivery"], "endpoint"), id);
  bool test_flag = false;
  ASSERT_FALSE(el["delivery"]["test"].get(test_flag));
  EXPECT_TRUE(test_flag);
  EXPECT_EQ(str(el["event"], "type"), "ringcast.test");
  ASSERT_EQ(rec_.to("/t").size(), 1u);
  EXPECT_THAT(rec_.to("/t")[0].body, HasSubstr("\"endpoint_id\":\"" + id + "\""));
}

TEST_F(RestApiEngineTest, UrlFormErrorsAre422WithTheSpecCode) {
  const std::pair<const char*, const char*> cases[] = {
      {"ftp://hooks.example.com/a", "not_https"},
      {"https://user:pw@hooks.example.com/a", "userinfo_not_allowed"},
      {"https://hooks.example.com/a#frag", "fragment_not_allowed"},
      {"https://hooks.example.com:22/a", "port_not_allowed"},
      {"https://a", "url_too_short"},
  };
  for (auto [u, code] : cases) {
    SCOPED_TRACE(u);
    ClientResponse r =
        call("POST", "/v1/tenants/acme/endpoints", std::string(R"({"url":")") + u + "\"}");
    expect_error(r, 422, code, "url");
  }
  std::string id = create("/a");
  expect_error(call("PATCH", "/v1/tenants/acme/endpoints/" + id,
                    R"({"url":"https://hooks.example.com:22/a"})"),
               422, "port_not_allowed", "url");
}

TEST_F(RestApiEngineTest, EndpointBodyErrorsNameTheField) {
  const std::string u = R"("url":")" + url("/a") + "\"";
  struct Case {
    std::string body;
    const char* code;
    const char* field;
  };
  const Case cases[] = {
      {R"({"url":5})", "invalid_type", "url"},
      {R"({})", "missing_field", "url"},
      {"{" + u + R"(,"event_types":"payment.*"})", "invalid_type", "event_types"},
      {"{" + u + R"(,"event_types":[1]})", "invalid_type", "event_types"},
      {"{" + u + R"(,"event_types":["has space"]})", "invalid_value", "event_types"},
      {"{" + u + R"(,"event_types":["pay*ment"]})", "invalid_event_type", "event_types"},
      {"{" + u + R"(,"signature":"rsa"})", "invalid_value", "signature"},
      {"{" + u + R"(,"policy":7})", "invalid_type", "policy"},
      {"{" + u + R"(,"policy":"nope"})", "unknown_policy", "policy"},
      {"{" + u + R"(,"secret":""})", "invalid_value", "secret"},
      {"{" + u + R"(,"secret":"whsec_"})", "invalid_secret", "secret"},
      {"{" + u + R"(,"rate_limit":{"per_second":-1}})", "invalid_type", "rate_limit.per_second"},
      {"{" + u + R"(,"rate_limit":{"burst":"x"}})", "invalid_type", "rate_limit.burst"},
      {"{" + u + R"(,"rate_limit":{"rps":1}})", "unknown_field", "rate_limit.rps"},
      {"{" + u + R"(,"max_in_flight":-2})", "invalid_type", "max_in_flight"},
      {"{" + u + R"(,"colour":"red"})", "unknown_field", "colour"},
      {"{" + u + "," + u + "}", "duplicate_field", "url"},
      {"{" + u, "invalid_json", ""},
      {R"([1,2])", "invalid_json", ""},
      {"{" + u + "} trailing", "invalid_json", ""},
      {"", "invalid_json", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    expect_error(call("POST", "/v1/tenants/acme/endpoints", c.body), 400, c.code, c.field);
  }
  // Nothing was created by the refused bodies: the tenant still does not exist.
  expect_error(call("GET", "/v1/tenants/acme/endpoints"), 404, "unknown_tenant", "tenant");
  std::string id = create("/a");
  const std::string ep = "/v1/tenants/acme/endpoints/" + id;
  expect_error(call("PATCH", ep, R"({"secret":"x"})"), 400, "unknown_field", "secret");
  expect_error(call("PATCH", ep, R"({"policy":"nope"})"), 400, "unknown_policy", "policy");
  expect_error(call("PATCH", ep, R"({"max_in_flight":"1"})"), 400, "invalid_type", "max_in_flight");
  expect_error(call("POST", ep + "/secret/rotate", R"({"secret":5})"), 400, "invalid_type",
               "secret");
  expect_error(call("POST", ep + "/secret/rotate", R"({"key":"x"})"), 400, "unknown_field", "key");
}

// Extra headers and Idempotency-Key (operations.md "Endpoints") are shown, replaced by PATCH, and
// sent on every attempt after ringcast's own; Idempotency-Key is the webhook id, the same on a
// retry.
TEST_F(RestApiEngineTest, EndpointHeadersAreShownPatchedAndSentOnEveryAttempt) {
  rec_.script("/h", {503, 200});
  ClientResponse r =
      call("POST", "/v1/tenants/acme/endpoints", R"({"url":")" + url("/h") + R"(","policy":"fast",
               "headers":{"X-Tenant":"  acme\t","Authorization":"Bearer t0k","X-Empty":""},
               "idempotency_key":true})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto el = parse(r.body);
  const std::string id = str(el, "id");
  // An object in the order given (values trimmed); a receiver credential's value is write-only
  // (SPEC R14.5): named, null, even in the answer to the call that set it.
  EXPECT_THAT(r.body,
              HasSubstr(R"("headers":{"X-Tenant":"acme","Authorization":null,"X-Empty":""})"));
  EXPECT_EQ(r.body.find("t0k"), std::string::npos) << r.body;
  bool idem = false;
  ASSERT_FALSE(el["idempotency_key"].get(idem));
  EXPECT_TRUE(idem);
  r = call("GET", "/v1/tenants/acme/endpoints/" + id);
  EXPECT_THAT(r.body, HasSubstr(R"("X-Tenant":"acme")"));
  EXPECT_THAT(r.body, HasSubstr(R"("idempotency_key":true)"));
  r = call("GET", "/v1/tenants/acme/endpoints");
  EXPECT_THAT(r.body, HasSubstr(R"("Authorization":null)"));
  EXPECT_EQ(r.body.find("t0k"), std::string::npos) << r.body;

  ASSERT_EQ(submit("h1", "{}").status, 202);
  ASSERT_EQ(wait_done(1).size(), 1u);
  auto got = rec_.to("/h");
  ASSERT_EQ(got.size(), 2u);  // 503, then the retry's 200
  const std::string webhook_id = got[0].header("webhook-id");
  ASSERT_FALSE(webhook_id.empty());
  for (const auto& g : got) {
    EXPECT_EQ(g.header("x-tenant"), "acme");
    EXPECT_EQ(g.header("authorization"), "Bearer t0k");
    EXPECT_EQ(g.headers.count("x-empty"), 1u);
    EXPECT_EQ(g.header("idempotency-key"), webhook_id);  // stable over the attempts
    EXPECT_EQ(g.header("webhook-id"), webhook_id);
    EXPECT_EQ(g.header("content-type"), "application/json");  // ringcast's own untouched
  }

  // PATCH replaces the whole set; the option can be turned off.
  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id,
           R"({"headers":{"X-Other":"2"},"idempotency_key":false})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("headers":{"X-Other":"2"})"));
  EXPECT_THAT(r.body, HasSubstr(R"("idempotency_key":false)"));
  // A PATCH without them keeps them.
  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id, R"({"max_in_flight":3})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("headers":{"X-Other":"2"})"));
  ASSERT_EQ(submit("h2", "{}").status, 202);
  ASSERT_EQ(wait_done(2).size(), 2u);
  got = rec_.to("/h");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].header("x-other"), "2");
  EXPECT_EQ(got[2].headers.count("x-tenant"), 0u);
  EXPECT_EQ(got[2].headers.count("idempotency-key"), 0u);
  // {} (or null) clears them.
  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id, R"({"headers":{}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("headers":{})"));
  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id, R"({"headers":{"X-A":"1"}})");
  r = call("PATCH", "/v1/tenants/acme/endpoints/" + id, R"({"headers":null})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("headers":{})"));
}

TEST_F(RestApiEngineTest, EndpointHeaderErrorsNameTheHeader) {
  const std::string u = R"("url":")" + url("/a") + "\"";
  auto with = [&](const std::string& headers) {
    return "{" + u + R"(,"headers":)" + headers + "}";
  };
  std::string twenty_one = "{";
  for (int i = 0; i < 21; ++i) {
    if (i) twenty_one += ",";
    twenty_one += "\"X-H" + std::to_string(i) + "\":\"v\"";
  }
  twenty_one += "}";
  // 4 + 4093 = 4097 bytes of name and value.
  const std::string too_big = R"({"X-Bg":")" + std::string(4093, 'b') + R"("})";
  const std::string just_fits = R"({"X-Bg":")" + std::string(4092, 'b') + R"("})";
  struct Case {
    std::string body;
    const char* code;
    const char* field;
    const char* names;  // the message names this header
  };
  const Case cases[] = {
      {with(R"({"Host":"evil"})"), "reserved_header", "headers.Host", "Host"},
      {with(R"({"content-length":"5"})"), "reserved_header", "headers.content-length",
       "content-length"},
      {with(R"({"X-Ok":"1","TRANSFER-ENCODING":"chunked"})"), "reserved_header",
       "headers.TRANSFER-ENCODING", "TRANSFER-ENCODING"},
      {with(R"({"Connection":"close"})"), "reserved_header", "headers.Connection", "Connection"},
      {with(R"({"Webhook-Signature":"v1,x"})"), "reserved_header", "headers.Webhook-Signature",
       "Webhook-Signature"},
      {with(R"({"x-webhook-id":"1"})"), "reserved_header", "headers.x-webhook-id", "x-webhook-id"},
      {with(R"({"Smengo-Delivery-Id":"1:1"})"), "reserved_header", "headers.Smengo-Delivery-Id",
       "Smengo-Delivery-Id"},
      {with(R"({"Idempotency-Key":"k"})"), "reserved_header", "headers.Idempotency-Key",
       "Idempotency-Key"},
      {with(R"({"Proxy-Authorization":"x"})"), "reserved_header", "headers.Proxy-Authorization",
       "Proxy-Authorization"},
      {with(R"({"X-Foo":"a\r\nX-Evil: 1"})"), "invalid_header", "headers.X-Foo", "X-Foo"},
      {with(R"({"X-Foo":"a\nb"})"), "invalid_header", "headers.X-Foo", "X-Foo"},
      {with(R"({"X-Foo":"a\u0000b"})"), "invalid_header", "headers.X-Foo", "X-Foo"},
      {with(R"({"X Foo":"a"})"), "invalid_header", "headers.X Foo", "X Foo"},
      {with(R"({"":"a"})"), "invalid_header", "headers.", R"(header \"\")"},
      {with(R"({"X-A":"1","x-a":"2"})"), "duplicate_header", "headers.x-a", "x-a"},
      {with(R"({"X-A":"1","X-A":"2"})"), "duplicate_header", "headers.X-A", "X-A"},
      {with(twenty_one), "too_many_headers", "headers", "20"},
      {with(too_big), "headers_too_large", "headers", "X-Bg"},
      {with(R"(["X-A: 1"])"), "invalid_type", "headers", "headers"},
      {with(R"({"X-N":5})"), "invalid_type", "headers.X-N", "X-N"},
      {"{" + u + R"(,"idempotency_key":"yes"})", "invalid_type", "idempotency_key",
       "idempotency_key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 200));
    ClientResponse r = call("POST", "/v1/tenants/acme/endpoints", c.body);
    expect_error(r, 400, c.code, c.field);
    EXPECT_THAT(r.body, HasSubstr(c.names));
  }
  expect_error(call("GET", "/v1/tenants/acme/endpoints"), 404, "unknown_tenant", "tenant");
  ClientResponse ok = call("POST", "/v1/tenants/acme/endpoints", with(just_fits));
  ASSERT_EQ(ok.status, 201) << ok.body.substr(0, 300);
  const std::string id = str(parse(ok.body), "id");
  const std::string ep = "/v1/tenants/acme/endpoints/" + id;
  expect_error(call("PATCH", ep, R"({"headers":{"HOST":"x"}})"), 400, "reserved_header",
               "headers.HOST");
  expect_error(call("PATCH", ep, R"({"headers":{"X-V":"a\rb"}})"), 400, "invalid_header",
               "headers.X-V");
  // The refused PATCHes changed nothing.
  ClientResponse g = call("GET", ep);
  EXPECT_THAT(g.body, HasSubstr("\"X-Bg\":\"bbbb"));
}

// SPEC R8.1, R8.4: a 410 disables the endpoint and notifies; actions on a disabled endpoint.
TEST_F(RestApiEngineTest, GoneDisablesTheEndpointWithANotification) {
  rec_.script("/gone", {410});
  std::string id = create("/gone");
  ASSERT_EQ(submit("g1", "{}").status, 202);
  ASSERT_EQ(wait_done(1).size(), 1u);
  ClientResponse r = poll("/v1/tenants/acme/endpoints/" + id, [](const ClientResponse& a) {
    return a.body.find("\"disabled\"") != a.body.npos;
  });
  auto el = parse(r.body);
  EXPECT_EQ(str(el, "state"), "disabled") << r.body;
  EXPECT_EQ(str(el, "disabled_reason"), "gone");
  expect_error(call("POST", "/v1/tenants/acme/endpoints/" + id + "/pause"), 400,
               "endpoint_disabled", "state");
  expect_error(call("POST", "/v1/tenants/acme/endpoints/" + id + "/resume"), 400,
               "endpoint_disabled", "state");

  r = poll("/v1/tenants/acme/notifications",
           [](const ClientResponse& a) { return a.body.find("endpoint_disabled") != a.body.npos; });
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::array notes;
  ASSERT_FALSE(parse(r.body)["notifications"].get(notes)) << r.body;
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(str(notes.at(0), "kind"), "endpoint_disabled");
  EXPECT_EQ(str(notes.at(0), "reason"), "gone");
  EXPECT_EQ(str(notes.at(0), "endpoint"), id);
  EXPECT_EQ(str(notes.at(0), "tenant"), "acme");
  // SPEC R8.4: what disabled it — the URL then, the delivery, its attempts and last status.
  EXPECT_EQ(str(notes.at(0), "endpoint_url"), url("/gone")) << r.body;
  EXPECT_FALSE(str(notes.at(0), "delivery").empty()) << r.body;
  EXPECT_EQ(num(notes.at(0), "attempts"), 1) << r.body;
  EXPECT_EQ(num(notes.at(0), "last_http_status"), 410) << r.body;

  r = call("POST", "/v1/tenants/acme/endpoints/" + id + "/enable");
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  EXPECT_EQ(str(el, "state"), "enabled");
  EXPECT_TRUE(is_null(el, "disabled_reason"));
}

// --- events -------------------------------------------------------------------------------------

TEST_F(RestApiEngineTest, EventAcceptedRepeatedAndConflicting) {
  create("/a");
  create("/b");
  create("/c", R"(,"event_types":["invoice.*"])");  // not subscribed to payment.created
  ClientResponse r = submit("evt-1", R"({"a":1})");
  EXPECT_EQ(r.status, 202);
  // The 202 names the message id (SPEC R11.3): the event read's.
  const std::string message = str(parse(r.body), "message_id");
  EXPECT_EQ(message.size(), kMessageIdChars) << r.body;
  std::string first_body = R"({"event_id":"evt-1","message_id":")";
  first_body += message;
  first_body += R"(","deliveries":2})";
  EXPECT_EQ(r.body, first_body);
  // SPEC R12.5: the same id and bytes again is answered like the first time, but 200.
  r = submit("evt-1", R"({"a":1})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, first_body);
  // Other bytes (even the same JSON with other spacing) are a conflict, never an overwrite.
  expect_error(submit("evt-1", R"({"a":2})"), 409, "conflict", "id");
  expect_error(submit("evt-1", R"({"a": 1})"), 409, "conflict", "id");
  r = call("GET", "/v1/tenants/acme/events/evt-1");
  ASSERT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr(R"("payload":{"a":1})"));
  EXPECT_EQ(str(parse(r.body), "message_id"), message);
  // Only the two subscribed endpoints got it.
  wait_done(2);
  EXPECT_EQ(rec_.to("/a").size(), 1u);
  EXPECT_EQ(rec_.to("/b").size(), 1u);
  EXPECT_EQ(rec_.to("/c").size(), 0u);
}

TEST_F(RestApiEngineTest, PayloadIsStoredAndDeliveredByteForByte) {
  create("/bytes");
  const std::string payloads[] = {
      R"({"b" : 1,   "a":"\u00e9\n\"q\"",
 "c":[1.50, 2e3, -0.0, true, null], "d": {"deep": [[[]]]}, "u": "h\u00e9llo \ud83d\ude00"})",
      R"([ 1 , 2 ,3 ])",
      R"("just a string \/ with escapes")",
      R"(12345678901234567890.1e-3)",
      R"(true)",
      "{\"tab\":\t\"v\"\r\n}",
      R"({})",
      "{\"utf8\":\"日本語 ✓\"}",
  };
  for (size_t n = 0; n < std::size(payloads); ++n) {
    const std::string& p = payloads[n];
    std::string id = "evt-bytes-" + std::to_string(n);
    std::string body = R"({"id":")" + id + R"(",  "payload":  )" + p + R"(  , "type":"t"})";
    ClientResponse r = call("POST", "/v1/tenants/acme/events", body);
    ASSERT_EQ(r.status, 202) << p << " -> " << r.body;
    r = call("GET", "/v1/tenants/acme/events/" + id);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_THAT(r.body, HasSubstr("\"payload\":" + p + "}")) << p;
  }
  // SPEC R1: the receiver got each payload's exact bytes.
  ASSERT_EQ(wait_done(std::size(payloads)).size(), std::size(payloads));
  std::vector<std::string> got;
  for (const auto& req : rec_.to("/bytes")) got.push_back(req.body);
  EXPECT_THAT(got, ::testing::UnorderedElementsAreArray(payloads));
}

TEST_F(RestApiEngineTest, EventBodyErrorsNameTheField) {
  create("/a");
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
      {R"({"id":"has space","type":"t","payload":{}})", "invalid_event_id", "id"},  // engine
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
  // None was taken in.
  ClientResponse r = call("GET", "/v1/tenants/acme/deliveries");
  EXPECT_EQ(r.body, R"({"deliveries":[],"next_cursor":null})");
  expect_error(call("GET", "/v1/tenants/acme/events/e"), 404, "unknown_event", "event");
}

TEST_F(RestApiEngineTest, OversizeJsonBodyIs413ButBulkMayBeLarger) {
  RestApiOptions o;
  o.max_body_bytes = 4096;
  o.max_bulk_body_bytes = 1 << 20;
  ASSERT_NO_FATAL_FAILURE(start(o));
  create("/a");
  std::string big(5000, 'x');
  std::string body = R"({"id":"e","type":"t","payload":")" + big + "\"}";
  expect_error(call("POST", "/v1/tenants/acme/events", body), 413, "body_too_large", "body");
  client_ = std::make_unique<TestClient>(server_->port());  // that connection was closed
  std::string line = R"({"tenant":"acme","id":"b1","type":"t","payload":")" + big + "\"}\n";
  ClientResponse r =
      call("POST", "/v1/events/bulk", line, {{"Content-Type", "application/x-ndjson"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(num(parse(r.body), "accepted"), 1);
}

TEST_F(RestApiEngineTest, BulkGivesPerLineResults) {
  create("/a");
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
      R"({"tenant":"acme","id":"has space","type":"t","payload":{}})"
      "\n"
      R"({"tenant":"acme","id":"b3","type":"t","payload":  { "k" : "v" } })";  // no final \n
  ClientResponse r =
      call("POST", "/v1/events/bulk", body, {{"Content-Type", "application/x-ndjson"}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(r.body);
  EXPECT_EQ(num(el, "lines"), 9);
  EXPECT_EQ(num(el, "accepted"), 3);
  EXPECT_EQ(num(el, "duplicates"), 1);
  EXPECT_EQ(num(el, "conflicts"), 1);
  EXPECT_EQ(num(el, "errors"), 4);
  simdjson::dom::array results;
  ASSERT_FALSE(el["results"].get(results));
  using Line = std::tuple<int64_t, int64_t, std::string, std::string>;  // line, status, code, field
  std::vector<Line> got;
  for (auto item : results) {
    std::string code, field;
    simdjson::dom::element err;
    if (!item["error"].get(err)) {
      code = str(err, "code");
      field = str(err, "field");
    }
    got.emplace_back(num(item, "line"), num(item, "status"), code, field);
  }
  std::vector<Line> want = {{1, 202, "", ""},
                            {2, 202, "", ""},
                            {4, 200, "", ""},
                            {5, 409, "conflict", "id"},
                            {6, 404, "unknown_tenant", "tenant"},
                            {7, 400, "missing_field", "tenant"},
                            {8, 400, "invalid_json", "payload"},
                            {9, 400, "invalid_event_id", "id"},
                            {10, 202, "", ""}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(num(results.at(0), "deliveries"), 1);
  EXPECT_EQ(str(results.at(0), "event_id"), "b1");
  // What was accepted is stored byte for byte; what was refused is not there.
  r = call("GET", "/v1/tenants/acme/events/b2");
  EXPECT_THAT(r.body, HasSubstr(R"("payload":[1, 2])"));
  r = call("GET", "/v1/tenants/acme/events/b3");
  EXPECT_THAT(r.body, HasSubstr(R"("payload":{ "k" : "v" })"));
  expect_error(call("GET", "/v1/tenants/acme/events/bad"), 404, "unknown_event", "event");
}

TEST_F(RestApiEngineTest, BulkLimits) {
  RestApiOptions o;
  o.max_bulk_events = 3;
  ASSERT_NO_FATAL_FAILURE(start(o));
  create("/a");
  std::string body;
  for (int i = 0; i < 4; ++i) {
    body += R"({"tenant":"acme","id":"l)" + std::to_string(i) +
            R"(","type":"t","payload":{}})"
            "\n";
  }
  expect_error(call("POST", "/v1/events/bulk", body), 413, "too_many_events", "body");
  expect_error(call("POST", "/v1/events/bulk", "\n\n"), 400, "invalid_json", "body");
  expect_error(call("GET", "/v1/tenants/acme/events/l0"), 404, "unknown_event", "event");
}

// --- deliveries, tenant state -------------------------------------------------------------------

// A delivery answered 503 then 200: its page, its full record, the recent list (SPEC R10).
TEST_F(RestApiEngineTest, DeliveryLogWithAttemptsPagesAndFilters) {
  rec_.script("/flaky", {503, 200});
  std::string flaky = create("/flaky", R"(,"policy":"fast")");
  std::string steady = create("/steady");
  ClientResponse r = submit("evt-9", R"({"status": "paid"})", "payment.status_changed");
  ASSERT_EQ(r.status, 202) << r.body;
  auto done = wait_done(2);
  ASSERT_EQ(done.size(), 2u);

  r = call("GET", "/v1/tenants/acme/deliveries?endpoint=" + flaky);
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(r.body);
  simdjson::dom::array items;
  ASSERT_FALSE(el["deliveries"].get(items));
  ASSERT_EQ(items.size(), 1u);
  EXPECT_TRUE(is_null(el, "next_cursor"));
  simdjson::dom::element item = items.at(0);
  const std::string id = str(item, "id");
  EXPECT_EQ(str(item, "endpoint"), flaky);
  EXPECT_EQ(str(item, "status"), "delivered");
  EXPECT_EQ(num(item, "attempts"), 2);
  EXPECT_EQ(num(item, "last_http_status"), 200);
  EXPECT_EQ(str(item, "event_id"), "evt-9");  // each item names its event (R10.2)
  EXPECT_EQ(str(item, "event_type"), "payment.status_changed");

  r = call("GET", "/v1/tenants/acme/deliveries/" + id);
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  EXPECT_EQ(str(el["delivery"], "id"), id);
  EXPECT_EQ(str(el["delivery"], "status"), "delivered");
  EXPECT_TRUE(is_null(el["delivery"], "next_attempt_at"));  // terminal
  simdjson::dom::array attempts;
  ASSERT_FALSE(el["attempts"].get(attempts));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(num(attempts.at(0), "number"), 1);
  EXPECT_EQ(str(attempts.at(0), "code"), "http_503");
  EXPECT_EQ(num(attempts.at(0), "http_status"), 503);
  EXPECT_EQ(str(attempts.at(0), "ladder"), "fast");
  EXPECT_EQ(str(attempts.at(0), "response_prefix"), "ok");  // R10.3: what the receiver said
  EXPECT_EQ(num(attempts.at(1), "number"), 2);
  EXPECT_EQ(str(attempts.at(1), "outcome"), "success");
  EXPECT_EQ(num(attempts.at(1), "http_status"), 200);
  EXPECT_EQ(str(el["event"], "id"), "evt-9");
  EXPECT_EQ(str(el["event"], "type"), "payment.status_changed");
  EXPECT_THAT(r.body, HasSubstr(R"("payload":{"status": "paid"})"));  // verbatim

  // Filters and pages: two delivered deliveries, one per page.
  r = call("GET", "/v1/tenants/acme/deliveries?state=delivered&limit=1");
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  ASSERT_FALSE(el["deliveries"].get(items));
  ASSERT_EQ(items.size(), 1u);
  std::string first = str(items.at(0), "id");
  std::string cursor = str(el, "next_cursor");
  ASSERT_FALSE(cursor.empty());
  r = call("GET", "/v1/tenants/acme/deliveries?state=delivered&limit=1&cursor=" + query(cursor));
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  ASSERT_FALSE(el["deliveries"].get(items));
  ASSERT_EQ(items.size(), 1u);
  EXPECT_NE(str(items.at(0), "id"), first);
  r = call("GET", "/v1/tenants/acme/deliveries?state=failed");
  EXPECT_EQ(r.body, R"({"deliveries":[],"next_cursor":null})");
  r = call("GET", "/v1/tenants/acme/deliveries?endpoint=" + steady + "&status=delivered");
  ASSERT_FALSE(parse(r.body)["deliveries"].get(items));
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(str(items.at(0), "endpoint"), steady);

  r = call("GET", "/v1/tenants/acme/deliveries/recent");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_FALSE(parse(r.body)["deliveries"].get(items));
  ASSERT_EQ(items.size(), 2u);
  size_t with_two = 0;
  for (auto d : items) {
    ASSERT_FALSE(d["attempts"].get(attempts));
    with_two += attempts.size() == 2 ? 1 : 0;
    EXPECT_EQ(str(d["event"], "id"), "evt-9");
  }
  EXPECT_EQ(with_two, 1u);  // the flaky one has both attempts

  expect_error(call("GET", "/v1/tenants/acme/deliveries?state=lost"), 400, "invalid_value",
               "state");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?limit=0"), 400, "invalid_value", "limit");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?limit=5000"), 400, "invalid_value",
               "limit");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?endpoint=x"), 400, "invalid_value",
               "endpoint");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?colour=red"), 400, "unknown_field",
               "colour");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?cursor=garbage"), 400, "invalid_cursor",
               "cursor");
  expect_error(call("GET", "/v1/tenants/acme/deliveries?limit=%zz"), 400, "invalid_query");
}

// SPEC R4: five failed deliveries open the tenant's breaker; an operator resets it (R4.8).
TEST_F(RestApiEngineTest, BreakerOpensAndResets) {
  rec_.script("/down", {503});
  create("/down", R"(,"policy":"tripping")");
  ClientResponse r = call("GET", "/v1/tenants/acme/breaker");
  ASSERT_EQ(r.status, 200) << r.body;
  auto el = parse(r.body);
  EXPECT_EQ(str(el, "tenant"), "acme");
  EXPECT_EQ(str(el, "state"), "closed");
  EXPECT_EQ(num(el, "window_total"), 0);
  EXPECT_EQ(num(el, "endpoints"), 1);
  EXPECT_EQ(num(el, "endpoints_using_breaker"), 1);  // "tripping" is a policy with a breaker
  for (int i = 0; i < 5; ++i) ASSERT_EQ(submit("d" + std::to_string(i), "{}").status, 202);
  r = poll("/v1/tenants/acme/breaker",
           [](const ClientResponse& a) { return a.body.find("\"open\"") != a.body.npos; });
  el = parse(r.body);
  ASSERT_EQ(str(el, "state"), "open") << r.body;
  EXPECT_EQ(num(el, "window_failed"), 5);
  EXPECT_EQ(num(el, "window_total"), 5);
  EXPECT_THAT(str(el, "reopen_at"), ::testing::EndsWith("Z"));

  r = call("POST", "/v1/tenants/acme/breaker/reset");
  ASSERT_EQ(r.status, 200) << r.body;
  el = parse(r.body);
  EXPECT_EQ(str(el, "state"), "closed");
  EXPECT_EQ(num(el, "window_total"), 0);
  EXPECT_TRUE(is_null(el, "reopen_at"));
}

TEST_F(RestApiEngineTest, SubscriptionRoute) {
  create("/a");
  ClientResponse r = call("PUT", "/v1/tenants/acme/subscription", R"({"active":false})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"tenant":"acme","active":false})");
  r = call("PUT", "/v1/tenants/acme/subscription", R"({"active":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"tenant":"acme","active":true})");
  expect_error(call("PUT", "/v1/tenants/acme/subscription", R"({"active":"no"})"), 400,
               "invalid_type", "active");
  expect_error(call("PUT", "/v1/tenants/acme/subscription", R"({})"), 400, "missing_field",
               "active");
  expect_error(call("PUT", "/v1/tenants/acme/subscription", R"({"active":true,"x":1})"), 400,
               "unknown_field", "x");
}

// SPEC R8.4: the owner's e-mail address is a tenant setting, kept in the tenant record; one
// the platform sets is confirmed at once (SPEC R14, docs/security.md "Owner e-mail").
TEST_F(RestApiEngineTest, SettingsKeepTheOwnerEmailAcrossARestart) {
  create("/a");
  ClientResponse r = call("GET", "/v1/tenants/acme/settings");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"tenant":"acme","owner_email":null,"owner_email_confirmed":false,)"
                    R"("confirmation_sent_at":null})");
  r = call("PUT", "/v1/tenants/acme/settings", R"({"owner_email":"ops@acme.example"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body,
            R"({"tenant":"acme","owner_email":"ops@acme.example","owner_email_confirmed":true,)"
            R"("confirmation_sent_at":null,"confirmation_sent":false})");
  for (const char* bad :
       {R"({"owner_email":"no-at-sign"})", R"({"owner_email":"a@b\r\nBcc: x@y"})",
        R"({"owner_email":"a b@c.example"})", R"({"owner_email":"a@-c.example"})"}) {
    SCOPED_TRACE(bad);
    expect_error(call("PUT", "/v1/tenants/acme/settings", bad), 400, "invalid_value",
                 "owner_email");
  }
  expect_error(call("PUT", "/v1/tenants/acme/settings", R"({"owner_email":1})"), 400,
               "invalid_type", "owner_email");
  expect_error(call("PUT", "/v1/tenants/acme/settings", R"({})"), 400, "missing_field",
               "owner_email");
  expect_error(call("PUT", "/v1/tenants/acme/settings", R"({"owner":"x@y.example"})"), 400,
               "unknown_field", "owner");
  expect_error(call("POST", "/v1/tenants/acme/settings", "{}"), 405, "method_not_allowed");
  expect_error(call("PUT", "/v1/tenants/ghost/settings", R"({"owner_email":"a@b.example"})"), 404,
               "unknown_tenant", "tenant");

  // Durable: the tenant record holds it after the engine and its store were reopened.
  core_.reset();
  ASSERT_NO_FATAL_FAILURE(start({}));
  r = call("GET", "/v1/tenants/acme/settings");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body,
            R"({"tenant":"acme","owner_email":"ops@acme.example","owner_email_confirmed":true,)"
            R"("confirmation_sent_at":null})");
  r = call("PUT", "/v1/tenants/acme/settings", R"({"owner_email":null})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"tenant":"acme","owner_email":null,"owner_email_confirmed":false,)"
                    R"("confirmation_sent_at":null,"confirmation_sent":false})");
}

// --- cluster mode -----------------------------------------------------------------------------

TEST_F(RestApiEngineTest, ClusterRouteOnASingleNodeIs404NotCluster) {
  ClientResponse r = call("GET", "/v1/cluster");
  expect_error(r, 404, "not_cluster");
  EXPECT_EQ(r.body,
            R"({"error":{"code":"not_cluster","message":"this node does not run in cluster mode )"
            R"x((storage.backend = \"redis\" and cluster.enabled = true)"}})x");
  expect_error(client_->request("GET", "/v1/cluster"), 401, "unauthorized");
  r = call("POST", "/v1/cluster");
  expect_error(r, 405, "method_not_allowed");
  ASSERT_NE(r.header("allow"), nullptr);
  EXPECT_EQ(*r.header("allow"), "GET");
}

TEST_F(RestApiEngineTest, ClusterRouteAnswersTheStatusJson) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const std::string body = R"({"node_id":"node-a","synced":true,"members":[]})";
  RestApiOptions o;
  o.cluster_status = [calls, body] {
    calls->fetch_add(1);
    return body;
  };
  ASSERT_NO_FATAL_FAILURE(start(o));
  ClientResponse r = call("GET", "/v1/cluster");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, body);
  ASSERT_NE(r.header("content-type"), nullptr);
  EXPECT_THAT(*r.header("content-type"), HasSubstr("application/json"));
  EXPECT_EQ(calls->load(), 1);
  // Asked again on every request (the view changes).
  ASSERT_EQ(call("GET", "/v1/cluster").status, 200);
  EXPECT_EQ(calls->load(), 2);
  // The token is checked before the status is built.
  expect_error(client_->request("GET", "/v1/cluster"), 401, "unauthorized");
  expect_error(client_->request("GET", "/v1/cluster", {}, {{"Authorization", "Bearer nope"}}), 401,
               "unauthorized");
  expect_error(call("DELETE", "/v1/cluster"), 405, "method_not_allowed");
  expect_error(call("GET", "/v1/cluster/members"), 404, "not_found");
  EXPECT_EQ(calls->load(), 2);
}

}  // namespace
}  // namespace ringcast::api
