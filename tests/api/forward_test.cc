// Cluster mode's forwarding of tenant calls to the partition's owner (api/forward.h,
// docs/cluster.md "How a non-owner reaches the owner"), over real loopback sockets: two REST APIs,
// "node-a" whose engine answers not_owner and "node-b" that owns the tenant; the owner lookup is a
// test function. Checks the address parsing and derivation, the marking of forwarded requests, the
// hop limit, the failure answers (nobody owns it, the owner has no address, refuses, never answers,
// too many forwards) and that a forwarded call answers what the owner answers.
#include "api/forward.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/forward_auth.h"
#include "api/rest_api.h"
#include "tests/api/fake_engine.h"
#include "tests/net/http_test_client.h"
#include "tests/support/posing_listener.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::api {
namespace {

using test::ClientResponse;
using test::FakeEngine;
using test::TestClient;
using Clock = std::chrono::steady_clock;

constexpr const char* kToken = "forward-token";
constexpr const char* kClusterSecret = "forward-cluster-secret-0123456789abcdef";

Error not_owner_error() {
  return make_error(Errc::kUnavailable, "this node does not own the tenant's partition now",
                    nullptr, "not_owner");
}

// The FakeEngine behind an ownership switch: while `owns` is false every tenant call answers
// not_owner, as engine/engine_impl.cc does on a node without the partition; delivery-log reads
// go to the (shared) store as on every node.
class OwnershipEngine final : public Engine {
 public:
  explicit OwnershipEngine(FakeEngine& inner) : inner_(inner) {}
  std::atomic<bool> owns{true};
  std::atomic<int> tenant_calls{0};

  template <class T>
  bool refuse(Callback<T>& done) {
    tenant_calls.fetch_add(1);
    if (owns.load()) return false;
    done(not_owner_error());
    return true;
  }

  void create_endpoint(std::string t, EndpointSpec spec, Callback<Endpoint> done) override {
    if (!refuse(done)) inner_.create_endpoint(std::move(t), std::move(spec), std::move(done));
  }
  void list_endpoints(std::string t, Callback<std::vector<Endpoint>> done) override {
    if (!refuse(done)) inner_.list_endpoints(std::move(t), std::move(done));
  }
  void get_endpoint(std::string t, EndpointId id, Callback<Endpoint> done) override {
    if (!refuse(done)) inner_.get_endpoint(std::move(t), id, std::move(done));
  }
  void update_endpoint(std::string t, EndpointId id, EndpointPatch patch,
                       Callback<Endpoint> done) override {
    if (!refuse(done)) inner_.update_endpoint(std::move(t), id, std::move(patch), std::move(done));
  }
  void delete_endpoint(std::string t, EndpointId id, Callback<bool> done) override {
    if (!refuse(done)) inner_.delete_endpoint(std::move(t), id, std::move(done));
  }
  void endpoint_action(std::string t, EndpointId id, EndpointAction a,
                       Callback<Endpoint> done) override {
    if (!refuse(done)) inner_.endpoint_action(std::move(t), id, a, std::move(done));
  }
  void test_endpoint(std::string t, EndpointId id, Callback<DeliveryId> done) override {
    if (!refuse(done)) inner_.test_endpoint(std::move(t), id, std::move(done));
  }
  void rotate_secret(std::string t, EndpointId id, std::optional<std::string> secret,
                     Callback<Endpoint> done) override {
    if (!refuse(done)) inner_.rotate_secret(std::move(t), id, std::move(secret), std::move(done));
  }
  void submit(EventInput event, Callback<SubmitResult> done) override {
    if (!refuse(done)) inner_.submit(std::move(event), std::move(done));
  }
  void submit_batch(std::vector<EventInput> events,
                    std::function<void(std::vector<Result<SubmitResult>>)> done) override {
    inner_.submit_batch(std::move(events), std::move(done));
  }
  void get_breaker(std::string t, Callback<BreakerView> done) override {
    if (!refuse(done)) inner_.get_breaker(std::move(t), std::move(done));
  }
  void reset_breaker(std::string t, Callback<BreakerView> done) override {
    if (!refuse(done)) inner_.reset_breaker(std::move(t), std::move(done));
  }
  void set_subscription(std::string t, bool active, Callback<bool> done) override {
    if (!refuse(done)) inner_.set_subscription(std::move(t), active, std::move(done));
  }
  Result<std::optional<DeliveryDetail>> get_delivery(std::string_view t, DeliveryId id) override {
    return inner_.get_delivery(t, id);
  }
  Result<std::vector<Delivery>> recent_deliveries(std::string_view t) override {
    return inner_.recent_deliveries(t);
  }
  Result<DeliveryPage> list_deliveries(std::string_view t, std::optional<EndpointId> e,
                                       std::optional<DeliveryStatus> s, size_t limit,
                                       std::string_view cursor) override {
    return inner_.list_deliveries(t, e, s, limit, cursor);
  }
  Result<std::optional<Event>> get_event(std::string_view t, std::string_view id) override {
    return inner_.get_event(t, id);
  }
  Result<std::optional<Event>> get_event_by_seq(std::string_view t, EventSeq seq) override {
    return inner_.get_event_by_seq(t, seq);
  }
  Result<std::vector<Notification>> notifications(std::string_view t) override {
    return inner_.notifications(t);
  }
  std::string metrics_text() override { return inner_.metrics_text(); }
  bool ready() const override { return inner_.ready(); }

 private:
  FakeEngine& inner_;
};

// One node: an engine (ownership switch over a FakeEngine shared by the nodes: the "store"),
// its REST API with forwarding on, and the HTTP server.
struct Node {
  Node(std::string id, FakeEngine& store, Duration timeout = seconds(2), uint32_t max = 4,
       net::HttpServerOptions server_options = {}, std::string ca_file = "")
      : node_id(std::move(id)), engine(store) {
    RestApiOptions o;
    o.api_token = kToken;
    o.read_threads = 1;
    o.forward.node_id = node_id;
    o.forward.secret = kClusterSecret;
    o.forward.ca_file = std::move(ca_file);
    o.forward.timeout = timeout;
    o.forward.max_forwards = max;
    o.forward.find_owner = [this](Partition p, Duration wait) -> Result<ForwardTarget> {
      lookups.fetch_add(1);
      last_partition = p;
      last_wait = wait;
      std::lock_guard lock(mu);
      return owner;
    };
    api = std::make_unique<RestApi>(engine, o);
    server = std::make_unique<net::HttpServerThread>(*api, server_options);
    if (!server->start().ok()) throw std::runtime_error("server did not start");
  }
  ~Node() {
    server.reset();
    api.reset();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
  void set_owner(Result<ForwardTarget> o) {
    std::lock_guard lock(mu);
    owner = std::move(o);
  }
  ClientResponse call(std::string_view method, std::string_view target, std::string_view body = {},
                      std::vector<std::pair<std::string, std::string>> headers = {}) {
    TestClient c(server->port(), 10000);
    headers.push_back({"Authorization", std::string("Bearer ") + kToken});
    if (!body.empty()) headers.push_back({"Content-Type", "application/json"});
    return c.request(method, target, body, headers);
  }
  const Forwarder& fwd() const { return *api->forwarder(); }

  std::string node_id;
  OwnershipEngine engine;
  std::unique_ptr<RestApi> api;
  std::unique_ptr<net::HttpServerThread> server;
  std::mutex mu;
  Result<ForwardTarget> owner = ForwardTarget{};
  std::atomic<int> lookups{0};
  std::atomic<Partition> last_partition{0};
  Duration last_wait{};
};

// A loopback listener that never accepts: connects succeed (the kernel's backlog), nothing is
// ever answered.
struct SilentServer {
  SilentServer() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("silent server");
    port = ntohs(a.sin_port);
  }
  ~SilentServer() { ::close(fd); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  int fd = -1;
  uint16_t port = 0;
};

// A loopback port nothing listens on (bound, then closed).
uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string error_code(const ClientResponse& r) {
  const std::string key = R"("code":")";
  size_t at = r.body.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  return r.body.substr(at, r.body.find('"', at) - at);
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// --- the pieces --------------------------------------------------------------------------------

TEST(ForwardRoutes, EveryTenantRouteButIntake) {
  using V = std::vector<std::string>;
  EXPECT_TRUE(forwardable_route(V{"v1", "tenants", "t", "endpoints"}));
  EXPECT_TRUE(forwardable_route(V{"v1", "tenants", "t", "endpoints", "5", "secret", "rotate"}));
  EXPECT_TRUE(forwardable_route(V{"v1", "tenants", "t", "breaker", "reset"}));
  EXPECT_TRUE(forwardable_route(V{"v1", "tenants", "t", "subscription"}));
  EXPECT_TRUE(forwardable_route(V{"v1", "tenants", "t", "deliveries"}));
  EXPECT_TRUE(forwardable_route(V{"v1", "tenants", "t", "events", "e1"}));  // a read
  EXPECT_FALSE(forwardable_route(V{"v1", "tenants", "t", "events"}));       // intake
  EXPECT_FALSE(forwardable_route(V{"v1", "events", "bulk"}));
  EXPECT_FALSE(forwardable_route(V{"v1", "tenants", "t"}));
  EXPECT_FALSE(forwardable_route(V{"v1", "cluster"}));
}

TEST(ForwardRoutes, RecognisesTheEnginesNotOwnerAnswer) {
  HttpResponse r = error_response(not_owner_error());
  EXPECT_TRUE(is_not_owner(r)) << r.body;
  EXPECT_FALSE(is_not_owner(
      error_response(make_error(Errc::kUnavailable, "shutting down", nullptr, "shutting_down"))));
  HttpResponse fine = HttpResponse::json(200, R"({"error":{"code":"not_owner"}})");
  EXPECT_FALSE(is_not_owner(fine));
}

TEST(ForwardRequest, MarksItAndCarriesOnlyWhatTheOwnerNeeds) {
  HttpRequest req;
  req.method = "PATCH";
  req.target = "/v1/tenants/acme/endpoints/7?x=1&y=%20";
  req.headers = {{"authorization", "Bearer tok"},  {"content-type", "application/json"},
                 {"cookie", "session=1"},          {"x-ringcast-forwarded", "spoofed"},
                 {"transfer-encoding", "chunked"}, {"host", "client-facing"}};
  req.body = R"({"url":"https://a.example/h"})";
  ForwardAuth auth(kClusterSecret);
  Principal who{Principal::Kind::kKey, "acme", false, "0123456789abcdef"};
  const SignedHeaders signed_headers =
      auth.sign(who, "node-a", req.method, req.target, req.body, WallTime::from_ms(1'000));
  const std::string bytes = forward_request_bytes(req, "10.0.0.8:8080", "node-a", signed_headers);
  EXPECT_EQ(bytes.rfind("PATCH /v1/tenants/acme/endpoints/7?x=1&y=%20 HTTP/1.1\r\n", 0), 0u)
      << bytes;
  const std::string head = bytes.substr(0, bytes.find("\r\n\r\n") + 2);
  EXPECT_NE(head.find("\r\nHost: 10.0.0.8:8080\r\n"), std::string::npos);
  // No credential crosses (SPEC R14.4): the signed principal instead of the caller's key.
  EXPECT_NE(head.find("\r\nX-Ringcast-Principal: v1 key rw 0123456789abcdef acme\r\n"),
            std::string::npos);
  EXPECT_NE(head.find("\r\nX-Ringcast-Signature: " + signed_headers.signature + "\r\n"),
            std::string::npos);
  EXPECT_NE(head.find("\r\nContent-Type: application/json\r\n"), std::string::npos);
  EXPECT_NE(head.find("\r\nX-Ringcast-Forwarded: node-a\r\n"), std::string::npos);
  EXPECT_NE(head.find("\r\nContent-Length: " + std::to_string(req.body.size()) + "\r\n"),
            std::string::npos);
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos);
  for (const char* gone :
       {"cookie", "Cookie", "spoofed", "chunked", "client-facing", "Authorization", "tok\r"})
    EXPECT_EQ(head.find(gone), std::string::npos) << gone;
  EXPECT_EQ(bytes.substr(bytes.find("\r\n\r\n") + 4), req.body);
}

TEST(ForwardExchange, ASilentServerTimesOutOnTime) {
  SilentServer silent;
  const auto t0 = Clock::now();
  auto r = http_exchange({IpAddress::v4(127, 0, 0, 1), silent.port}, "GET / HTTP/1.1\r\n\r\n",
                         t0 + std::chrono::milliseconds(300), 1 << 20);
  const double took = ms_since(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason_or_code(), "timeout");
  EXPECT_GE(took, 290);
  EXPECT_LT(took, 2000);
}

TEST(ForwardExchange, AClosedPortIsRefused) {
  auto r = http_exchange({IpAddress::v4(127, 0, 0, 1), closed_port()}, "GET / HTTP/1.1\r\n\r\n",
                         Clock::now() + std::chrono::seconds(2), 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason_or_code(), "connect_failed");
  EXPECT_EQ(r.error().sys_errno, ECONNREFUSED);
}

TEST(ForwardExchange, ReadsAWholeAnswerAndCapsItsSize) {
  FakeEngine store;
  Node b("node-b", store);
  const std::string req =
      std::string("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kToken +
      "\r\nConnection: close\r\n\r\n";
  auto r = http_exchange({IpAddress::v4(127, 0, 0, 1), b.server->port()}, req,
                         Clock::now() + std::chrono::seconds(5), 1 << 20);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 200);
  ASSERT_NE(r->header("content-type"), nullptr);
  EXPECT_NE(r->body.find("ringcast_api_forwards_total"), std::string::npos) << r->body;
  auto small = http_exchange({IpAddress::v4(127, 0, 0, 1), b.server->port()}, req,
                             Clock::now() + std::chrono::seconds(5), 64);
  ASSERT_FALSE(small.ok());
  EXPECT_STREQ(small.error().reason_or_code(), "too_large");
}

// --- through the REST API ----------------------------------------------------------------------

class ForwardApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<Node>("node-a", store_);
    b_ = std::make_unique<Node>("node-b", store_);
    a_->engine.owns = false;
    a_->set_owner(ForwardTarget{"node-b", b_->url()});
    b_->set_owner(ForwardTarget{"node-b", b_->url()});
  }

  // `method target body` on node-a (not the owner) is forwarded to node-b and answers what
  // node-b answers to a direct call (asked right after, for reads).
  void expect_same(std::string_view method, std::string_view target, std::string_view body = {}) {
    ClientResponse via = a_->call(method, target, body);
    ASSERT_NE(via.header("x-ringcast-served-by"), nullptr) << method << " " << target;
    EXPECT_EQ(*via.header("x-ringcast-served-by"), "node-b");
    ClientResponse direct = b_->call(method, target, body);
    EXPECT_EQ(via.status, direct.status) << method << " " << target << ": " << via.body;
    EXPECT_EQ(via.body, direct.body) << method << " " << target;
    ASSERT_NE(via.header("content-type"), nullptr);
    EXPECT_EQ(*via.header("content-type"), *direct.header("content-type"));
  }

  FakeEngine store_;
  std::unique_ptr<Node> a_, b_;
};

TEST_F(ForwardApiTest, EveryTenantCallAnswersAsTheOwnerDoes) {
  // Create through the non-owner: the owner made it (its engine saw the call).
  ClientResponse made = a_->call("POST", "/v1/tenants/acme/endpoints",
                                 R"({"url":"https://hooks.example.com/a","policy":"smengo"})");
  ASSERT_EQ(made.status, 201) << made.body;
  EXPECT_NE(made.body.find("\"secret\""), std::string::npos);
  ASSERT_NE(made.header("x-ringcast-served-by"), nullptr);
  const std::string key = R"("id":")";
  const size_t at = made.body.find(key) + key.size();
  const std::string id = made.body.substr(at, made.body.find('"', at) - at);
  const std::string ep = "/v1/tenants/acme/endpoints/" + id;

  expect_same("GET", "/v1/tenants/acme/endpoints");
  expect_same("GET", ep);
  ClientResponse patched = a_->call("PATCH", ep, R"({"event_types":["order.*"]})");
  EXPECT_EQ(patched.status, 200) << patched.body;
  EXPECT_NE(patched.body.find("order.*"), std::string::npos);
  expect_same("GET", ep);
  EXPECT_EQ(a_->call("POST", ep + "/pause").status, 200);
  EXPECT_NE(b_->call("GET", ep).body.find("paused"), std::string::npos);
  EXPECT_EQ(a_->call("POST", ep + "/resume").status, 200);
  ClientResponse rotated = a_->call("POST", ep + "/secret/rotate", "");
  EXPECT_EQ(rotated.status, 200) << rotated.body;
  EXPECT_EQ(a_->call("POST", ep + "/test").status, 202);
  store_.open_breaker();
  expect_same("GET", "/v1/tenants/acme/breaker");
  ClientResponse reset = a_->call("POST", "/v1/tenants/acme/breaker/reset");
  EXPECT_EQ(reset.status, 200) << reset.body;
  EXPECT_NE(reset.body.find("closed"), std::string::npos) << reset.body;
  ClientResponse sub = a_->call("PUT", "/v1/tenants/acme/subscription", R"({"active":false})");
  EXPECT_EQ(sub.status, 200) << sub.body;
  EXPECT_EQ(store_.subscription("acme"), false);
  // The owner's errors come back as they are: 404, 400 with its field, 405 with Allow.
  expect_same("GET", "/v1/tenants/acme/endpoints/999999");
  // What is refused before the engine is answered here (the same answer the owner gives).
  ClientResponse bad = a_->call("PATCH", ep, R"({"nope":1})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.header("x-ringcast-served-by"), nullptr);
  ClientResponse wrong = a_->call("PUT", ep + "/pause");
  EXPECT_EQ(wrong.status, 405);
  ASSERT_NE(wrong.header("allow"), nullptr);
  // A collection read of a tenant with no deliveries asks the engine whether the tenant
  // exists; on a non-owner that is not_owner, so the read is forwarded too.
  expect_same("GET", "/v1/tenants/ghost/deliveries");
  EXPECT_EQ(a_->last_partition.load(), partition_of("ghost"));  // the tenant's partition
  ClientResponse deleted = a_->call("DELETE", ep);
  EXPECT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(b_->call("GET", ep).status, 404);

  // Every forward went to node-b once, marked; node-b never forwarded anything itself.
  const uint64_t answered = a_->fwd().count(Forwarder::Outcome::kAnswered);
  EXPECT_EQ(answered, 15u);
  EXPECT_EQ(b_->fwd().received(), answered);
  EXPECT_EQ(b_->fwd().count(Forwarder::Outcome::kAnswered), 0u);
  ClientResponse metrics = a_->call("GET", "/metrics");
  EXPECT_NE(metrics.body.find("ringcast_api_forwards_total{outcome=\"answered\"} " +
                              std::to_string(answered) + "\n"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("ringcast_api_forwards_in_flight 0\n"), std::string::npos);
}

TEST_F(ForwardApiTest, IntakeIsNotForwarded) {
  ClientResponse r = a_->call("POST", "/v1/tenants/acme/events",
                              R"({"id":"e1","type":"order.paid","payload":{}})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(error_code(r), "not_owner");
  EXPECT_EQ(a_->lookups.load(), 0);
  EXPECT_EQ(b_->fwd().received(), 0u);
}

TEST_F(ForwardApiTest, AForwardedCallIsNeverForwardedAgain) {
  // Mid hand-over both think the other one owns it: node-b answers not_owner, and must not
  // send the call back.
  b_->engine.owns = false;
  b_->set_owner(ForwardTarget{"node-a", a_->url()});
  ClientResponse r = a_->call("GET", "/v1/tenants/acme/breaker");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(error_code(r), "not_owner");
  ASSERT_NE(r.header("retry-after"), nullptr);
  EXPECT_EQ(*r.header("retry-after"), "1");
  EXPECT_EQ(b_->fwd().received(), 1u);
  EXPECT_EQ(b_->lookups.load(), 0);
  EXPECT_EQ(a_->fwd().received(), 0u);
  // A client's own X-Ringcast-Forwarded is a forwarded call without a signature: refused,
  // whatever credential it carries (SPEC R14.4), and never forwarded.
  ClientResponse own =
      a_->call("GET", "/v1/tenants/acme/breaker", {}, {{"X-Ringcast-Forwarded", "somebody"}});
  EXPECT_EQ(own.status, 401) << own.body;
  EXPECT_EQ(error_code(own), "forward_unsigned");
  EXPECT_EQ(a_->lookups.load(), 1);
}

// Sends raw request bytes to `port` and returns the whole answer.
std::string send_raw(uint16_t port, const std::string& bytes) {
  auto r = http_exchange({IpAddress::v4(127, 0, 0, 1), port}, bytes,
                         Clock::now() + std::chrono::seconds(5), 1 << 20);
  if (!r.ok()) return "error";
  return std::to_string(r->status) + " " + r->body;
}

TEST_F(ForwardApiTest, AListenerPosingAsTheOwnerGetsNoReusableCredential) {
  ClientResponse made = b_->call("POST", "/v1/tenants/acme/endpoints",
                                 R"({"url":"https://hooks.example.com/a","policy":"smengo"})");
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string key = R"("id":")";
  const size_t at = made.body.find(key) + key.size();
  const std::string ep =
      "/v1/tenants/acme/endpoints/" + made.body.substr(at, made.body.find('"', at) - at);
  test::PosingListener poser;
  a_->set_owner(ForwardTarget{"node-b", "http://127.0.0.1:" + std::to_string(poser.port)});
  ClientResponse r = a_->call("PATCH", ep, R"({"event_types":["a"]})");
  EXPECT_EQ(r.status, 200) << r.body;
  const std::string captured = poser.request();
  ASSERT_FALSE(captured.empty());
  // Neither the admin token the client used nor any Authorization header reached it.
  EXPECT_EQ(captured.find(kToken), std::string::npos) << captured;
  EXPECT_EQ(captured.find("Authorization"), std::string::npos) << captured;
  EXPECT_NE(captured.find("X-Ringcast-Principal: v1 admin rw - -\r\n"), std::string::npos)
      << captured;

  // What it captured, sent to the real owner: accepted once (it is a fresh, signed call) …
  std::string replay = captured;
  const size_t host = replay.find("Host: ");
  replay.replace(host, replay.find("\r\n", host) - host, "Host: 127.0.0.1");
  b_->engine.owns = true;
  const std::string first = send_raw(b_->server->port(), replay);
  EXPECT_EQ(first.substr(0, 3), "200") << first;
  // … and refused as a replay after that: a captured call cannot be used again.
  const std::string again = send_raw(b_->server->port(), replay);
  EXPECT_EQ(again.substr(0, 3), "401") << again;
  EXPECT_NE(again.find("forward_replayed"), std::string::npos) << again;
  // Pointed at another tenant, or with another body, its signature no longer holds.
  std::string moved = captured;
  moved.replace(moved.find("/acme/"), 6, "/zeta/");
  const std::string other = send_raw(b_->server->port(), moved);
  EXPECT_EQ(other.substr(0, 3), "401") << other;
  EXPECT_NE(other.find("forward_bad_signature"), std::string::npos) << other;
}

// SPEC R14.4 / docs/security.md "Between nodes": an owner that advertises https:// is reached
// over TLS, its certificate verified against cluster.ca_file for its IP; a certificate of
// another CA is refused (503 owner_unreachable), never sent the call.
TEST(ForwardApi, AnHttpsOwnerIsReachedOverTlsAndVerified) {
  test::TempDir dir("forward-tls");
  const test::TestCa ca = test::TestCa::create();
  const test::CertFiles files = ca.write_localhost(dir.path());
  const test::TestCa other = test::TestCa::create("another CA");
  const std::string other_ca = dir.file("other-ca.pem");
  test::write_file(other_ca, other.ca_pem);
  net::HttpServerOptions tls;
  tls.tls_cert_file = files.cert;
  tls.tls_key_file = files.key;
  FakeEngine store;
  Node b("node-b", store, seconds(2), 4, tls);
  Node a("node-a", store, seconds(2), 4, {}, files.ca);
  Node lost("node-c", store, seconds(2), 4, {}, other_ca);
  a.engine.owns = false;
  lost.engine.owns = false;
  const std::string https = "https://127.0.0.1:" + std::to_string(b.server->port());
  a.set_owner(ForwardTarget{"node-b", https});
  lost.set_owner(ForwardTarget{"node-b", https});
  ClientResponse made = a.call("POST", "/v1/tenants/acme/endpoints",
                               R"({"url":"https://hooks.example.com/a","policy":"smengo"})");
  EXPECT_EQ(made.status, 201) << made.body;
  ASSERT_NE(made.header("x-ringcast-served-by"), nullptr);
  EXPECT_EQ(*made.header("x-ringcast-served-by"), "node-b");
  EXPECT_EQ(b.fwd().received(), 1u);
  // Trusting another CA: refused before anything is sent.
  ClientResponse refused = lost.call("GET", "/v1/tenants/acme/endpoints");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(error_code(refused), "owner_unreachable");
  EXPECT_EQ(b.fwd().received(), 1u);
  // Plain HTTP to the TLS listener gets no answer.
  auto plain = http_exchange({IpAddress::v4(127, 0, 0, 1), b.server->port()},
                             "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             Clock::now() + std::chrono::seconds(2), 1 << 20);
  EXPECT_FALSE(plain.ok());
  // An https URL parses as TLS; its derivation from a TLS listener says https.
  auto addr = cluster::parse_advertise_url(https);
  ASSERT_TRUE(addr.has_value());
  EXPECT_TRUE(addr->tls);
  EXPECT_EQ(cluster::derive_advertise_url(IpAddress::v4(127, 0, 0, 1), 8443, true),
            std::optional<std::string>("https://127.0.0.1:8443"));
}

TEST_F(ForwardApiTest, NobodyToForwardToAnswersNotOwner) {
  for (const ForwardTarget& t : {ForwardTarget{}, ForwardTarget{"node-a", a_->url()}}) {
    a_->set_owner(t);  // nobody holds the lease; this node holds it (handing it over)
    ClientResponse r = a_->call("GET", "/v1/tenants/acme/endpoints");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(error_code(r), "not_owner") << r.body;
    ASSERT_NE(r.header("retry-after"), nullptr);
  }
  a_->set_owner(make_error(Errc::kUnavailable, "redis", nullptr, "redis_unavailable"));
  ClientResponse r = a_->call("GET", "/v1/tenants/acme/endpoints");
  EXPECT_EQ(error_code(r), "not_owner");
  EXPECT_EQ(a_->fwd().count(Forwarder::Outcome::kNoOwner), 2u);
  EXPECT_EQ(a_->fwd().count(Forwarder::Outcome::kLookupFailed), 1u);
  EXPECT_EQ(b_->fwd().received(), 0u);
}

TEST_F(ForwardApiTest, AnUnreachableOwnerAnswers503WithRetryAfter) {
  // No address published.
  a_->set_owner(ForwardTarget{"node-c", ""});
  ClientResponse r = a_->call("GET", "/v1/tenants/acme/endpoints");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(error_code(r), "owner_unreachable") << r.body;
  EXPECT_NE(r.body.find("node-c"), std::string::npos);
  // Nothing listens there (a killed node on loopback).
  a_->set_owner(ForwardTarget{"node-c", "http://127.0.0.1:" + std::to_string(closed_port())});
  r = a_->call("GET", "/v1/tenants/acme/endpoints");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(error_code(r), "owner_unreachable") << r.body;
  ASSERT_NE(r.header("retry-after"), nullptr);
  EXPECT_EQ(a_->fwd().count(Forwarder::Outcome::kNoAddress), 1u);
  EXPECT_EQ(a_->fwd().count(Forwarder::Outcome::kUnreachable), 1u);
}

TEST(ForwardApi, AnOwnerThatNeverAnswersTimesOut) {
  FakeEngine store;
  Node a("node-a", store, milliseconds(400), 1);
  a.engine.owns = false;
  SilentServer silent;
  a.set_owner(ForwardTarget{"node-c", silent.url()});
  const auto t0 = Clock::now();
  ClientResponse r = a.call("GET", "/v1/tenants/acme/breaker");
  const double took = ms_since(t0);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(error_code(r), "owner_unreachable") << r.body;
  ASSERT_NE(r.header("retry-after"), nullptr);
  EXPECT_GE(took, 390);
  EXPECT_LT(took, 3000);
  EXPECT_EQ(a.fwd().count(Forwarder::Outcome::kTimeout), 1u);
  EXPECT_LE(to_ms(a.last_wait), 400);  // the lookup may use what is left of the deadline only

  // One forward at a time and one waiting: more at once are refused at once, and every one is
  // answered within the timeout of its not_owner (the queued one's wait counts). A longer
  // timeout here, so that the four clients surely arrive while the first forward waits.
  Node b("node-b", store, milliseconds(1500), 1);
  b.engine.owns = false;
  b.set_owner(ForwardTarget{"node-c", silent.url()});
  std::vector<std::thread> clients;
  std::vector<ClientResponse> got(4);
  std::vector<double> times(4);
  for (size_t i = 0; i < got.size(); ++i) {
    clients.emplace_back([&, i] {
      const auto s = Clock::now();
      got[i] = b.call("GET", "/v1/tenants/acme/breaker");
      times[i] = ms_since(s);
    });
  }
  for (auto& t : clients) t.join();
  size_t overloaded = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].status, 503);
    const std::string code = error_code(got[i]);
    EXPECT_TRUE(code == "overloaded" || code == "owner_unreachable") << code;
    overloaded += code == "overloaded";
    EXPECT_LT(times[i], 4500);
  }
  EXPECT_GE(overloaded, 2u);
  EXPECT_EQ(b.fwd().count(Forwarder::Outcome::kOverloaded), overloaded);
}

}  // namespace
}  // namespace ringcast::api
