// The REST API's read pool over real loopback sockets: a delivery-log read held in the (fake)
// engine stalls neither probes nor intake, a full read queue answers 503 + Retry-After, the held
// read completes with the same body as an inline read, and stopping with reads in flight is
// clean (run under ASan too).
#include "api/read_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/rest_api.h"
#include "tests/api/fake_engine.h"
#include "tests/net/http_test_client.h"

namespace ringcast::api {
namespace {

using test::ClientResponse;
using test::FakeEngine;
using test::TestClient;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kToken = "read-pool-token";
constexpr uint64_t kDeliveryId = (uint64_t{9} << 48) | 1;

// Waits (bounded) until `pred` holds.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class ReadPoolApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed();
    RestApiOptions o;
    o.api_token = kToken;
    o.read_threads = 1;
    o.max_queued_reads = 1;
    api_ = std::make_unique<RestApi>(engine_, o);
    server_ = std::make_unique<net::HttpServerThread>(*api_, net::HttpServerOptions{});
    ASSERT_TRUE(server_->start().ok());
  }
  void TearDown() override {
    engine_.open_reads();  // whatever a failed assertion left held
    server_.reset();
    api_.reset();
  }

  void seed() { engine_.seed_delivery_log(); }

  std::unique_ptr<TestClient> client() { return std::make_unique<TestClient>(server_->port()); }

  static std::string request(std::string_view method, std::string_view target,
                             std::string_view body = {}) {
    return TestClient::format(method, target, body,
                              {{"Authorization", std::string("Bearer ") + kToken}});
  }

  // The answer the same engine gives through a RestApi that reads inline (the pre-pool path).
  ClientResponse inline_answer(std::string_view target) {
    RestApiOptions o;
    o.api_token = kToken;
    o.read_threads = 0;
    RestApi inline_api(engine_, o);
    HttpRequest req;
    req.method = "GET";
    req.target = std::string(target);
    req.headers.push_back({"authorization", std::string("Bearer ") + kToken});
    std::optional<HttpResponse> got;
    inline_api.handle(std::move(req),
                      Responder::from_function([&](HttpResponse r) { got = std::move(r); }));
    EXPECT_TRUE(got.has_value()) << "an inline read answers before handle() returns";
    ClientResponse out;
    if (got) {
      out.status = got->status;
      out.body = got->body;
    }
    return out;
  }

  static void expect_error(const ClientResponse& r, int status, std::string_view code) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_NE(r.body.find("{\"error\":{\"code\":\"" + std::string(code) + "\""), std::string::npos)
        << r.body;
  }

  FakeEngine engine_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<net::HttpServerThread> server_;
};

TEST_F(ReadPoolApiTest, HeldReadStallsNeitherProbesNorIntakeAndCompletes) {
  const std::string target = "/v1/tenants/acme/deliveries/" + std::to_string(kDeliveryId);
  engine_.close_reads();
  auto slow = client();
  ASSERT_TRUE(slow->send_raw(request("GET", target)));
  ASSERT_TRUE(engine_.wait_held_reads(1)) << "the read never reached the engine";

  // The loop is free: probes, an async engine call and event intake are answered meanwhile.
  auto other = client();
  ClientResponse r = other->request("GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"ok"})");
  other->send_raw(
      request("POST", "/v1/tenants/acme/endpoints", R"({"url":"https://hooks.example.com/a"})"));
  EXPECT_EQ(other->read_one().status, 201);
  other->send_raw(request("POST", "/v1/tenants/acme/events",
                          R"({"id":"evt-1","type":"t.a","payload":{"n":1}})"));
  r = other->read_one();
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(r.body, R"({"event_id":"evt-1","deliveries":1})");

  engine_.open_reads();
  r = slow->read_one();
  ClientResponse want = inline_answer(target);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.status, want.status);
  EXPECT_EQ(r.body, want.body);
  EXPECT_NE(r.body.find("\"attempts\":[{"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"id\":\"evt-9\""), std::string::npos) << r.body;
}

TEST_F(ReadPoolApiTest, FullReadQueueAnswers503WithRetryAfter) {
  engine_.close_reads();
  auto running = client();
  ASSERT_TRUE(running->send_raw(request("GET", "/v1/tenants/acme/notifications")));
  ASSERT_TRUE(engine_.wait_held_reads(1));
  auto queued = client();  // the one queue slot
  ASSERT_TRUE(queued->send_raw(request("GET", "/v1/tenants/acme/events/evt-9")));
  ASSERT_TRUE(eventually([&] { return api_->queued_reads() == 1; }));

  auto refused = client();
  ClientResponse r = refused->request("GET", "/v1/tenants/acme/deliveries?limit=2", {},
                                      {{"Authorization", std::string("Bearer ") + kToken}});
  expect_error(r, 503, "overloaded");
  ASSERT_NE(r.header("retry-after"), nullptr);
  EXPECT_EQ(*r.header("retry-after"), "1");
  EXPECT_EQ(r.header("content-type") ? *r.header("content-type") : "", "application/json");
  // Only delivery-log reads queue: the rest of the API still answers on the same connection.
  r = refused->request("GET", "/v1/tenants/acme/breaker", {},
                       {{"Authorization", std::string("Bearer ") + kToken}});
  EXPECT_EQ(r.status, 200) << r.body;

  engine_.open_reads();
  r = running->read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, inline_answer("/v1/tenants/acme/notifications").body);
  r = queued->read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, inline_answer("/v1/tenants/acme/events/evt-9").body);
  // Room again: the refused read goes through now.
  r = refused->request("GET", "/v1/tenants/acme/deliveries?limit=2", {},
                       {{"Authorization", std::string("Bearer ") + kToken}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, inline_answer("/v1/tenants/acme/deliveries?limit=2").body);
}

// Every delivery-log route runs off the loop and renders exactly as the inline path does,
// errors included.
TEST_F(ReadPoolApiTest, EveryReadRouteRunsOffTheLoopWithTheSameAnswer) {
  const std::string targets[] = {
      "/v1/tenants/acme/deliveries",
      "/v1/tenants/acme/deliveries?endpoint=77&state=delivered&limit=1",
      "/v1/tenants/acme/deliveries/recent",
      "/v1/tenants/acme/deliveries/" + std::to_string(kDeliveryId),
      "/v1/tenants/acme/deliveries/424242",
      "/v1/tenants/ghost/deliveries",
      "/v1/tenants/acme/events/evt-9",
      "/v1/tenants/acme/events/nope",
      "/v1/tenants/acme/notifications",
  };
  auto probe = client();
  for (const std::string& t : targets) {
    SCOPED_TRACE(t);
    size_t before = engine_.reads_started();
    engine_.close_reads();
    auto c = client();
    ASSERT_TRUE(c->send_raw(request("GET", t)));
    ASSERT_TRUE(engine_.wait_held_reads(1));
    EXPECT_EQ(probe->request("GET", "/healthz").status, 200);
    engine_.open_reads();
    ClientResponse r = c->read_one();
    EXPECT_GT(engine_.reads_started(), before);
    ClientResponse want = inline_answer(t);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(r.status, want.status);
    EXPECT_EQ(r.body, want.body);
  }
  // Request errors are still decided on the loop, before any read.
  size_t before = engine_.reads_started();
  auto c = client();
  c->send_raw(request("GET", "/v1/tenants/acme/deliveries?limit=0"));
  expect_error(c->read_one(), 400, "invalid_value");
  c->send_raw(request("GET", "/v1/tenants/acme/deliveries/xyz"));
  expect_error(c->read_one(), 404, "unknown_delivery");
  EXPECT_EQ(engine_.reads_started(), before);
}

// stop_reads() with one read running and one queued: the queued one is answered 503, the
// running one finishes with its real answer, later reads get 503.
TEST_F(ReadPoolApiTest, StopReadsFinishesTheRunningReadAndRefusesTheRest) {
  engine_.close_reads();
  auto running = client();
  ASSERT_TRUE(running->send_raw(request("GET", "/v1/tenants/acme/notifications")));
  ASSERT_TRUE(engine_.wait_held_reads(1));
  auto queued = client();
  ASSERT_TRUE(queued->send_raw(request("GET", "/v1/tenants/acme/deliveries/recent")));
  ASSERT_TRUE(eventually([&] { return api_->queued_reads() == 1; }));

  std::thread stopper([&] { api_->stop_reads(); });  // joins the held worker
  expect_error(queued->read_one(), 503, "shutting_down");
  engine_.open_reads();
  stopper.join();
  ClientResponse r = running->read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, inline_answer("/v1/tenants/acme/notifications").body);
  auto late = client();
  late->send_raw(request("GET", "/v1/tenants/acme/events/evt-9"));
  expect_error(late->read_one(), 503, "shutting_down");
  EXPECT_EQ(late->request("GET", "/healthz").status, 200);
  api_->stop_reads();  // idempotent
}

// The daemon's order (serve.cc): the server stops while a read is held in the engine (its
// connection is closed after the grace), then the pool stops; the late answers go to
// responders the server has orphaned. Must not crash or leak (ASan).
TEST_F(ReadPoolApiTest, ServerStopWithReadsInFlightIsClean) {
  engine_.close_reads();
  auto running = client();
  ASSERT_TRUE(running->send_raw(request("GET", "/v1/tenants/acme/deliveries")));
  ASSERT_TRUE(engine_.wait_held_reads(1));
  auto queued = client();
  ASSERT_TRUE(queued->send_raw(request("GET", "/v1/tenants/acme/notifications")));
  ASSERT_TRUE(eventually([&] { return api_->queued_reads() == 1; }));

  server_->stop(milliseconds(50));
  EXPECT_TRUE(running->wait_eof());
  EXPECT_TRUE(queued->wait_eof());
  std::thread stopper([&] { api_->stop_reads(); });
  ASSERT_TRUE(eventually([&] { return api_->queued_reads() == 0; }));
  engine_.open_reads();
  stopper.join();
  server_.reset();
  api_.reset();
}

TEST(ReadPool, AnswersEveryJobOnceAndBoundsTheQueue) {
  ReadPool pool(ReadPoolOptions{2, 4});
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int answered = 0;
  std::vector<int> statuses;
  auto responder = [&] {
    return Responder::from_function([&](HttpResponse r) {
      std::lock_guard lock(mu);
      statuses.push_back(r.status);
      answered++;
      cv.notify_all();
    });
  };
  auto held = [&]() -> HttpResponse {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return release; });
    return HttpResponse::json(200, "{}");
  };
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    Responder r = responder();
    auto s = pool.submit(held, r);
    if (s == ReadPool::Submit::kQueued) {
      EXPECT_FALSE(r.valid());
    } else {
      EXPECT_EQ(s, ReadPool::Submit::kFull);
      EXPECT_TRUE(r.valid());
      r.send(ReadPool::overloaded_response());
      refused++;
    }
    if (i < 2) {  // let the two workers take the first two, so the count below is exact
      ASSERT_TRUE(eventually([&] { return pool.queued() == 0; }));
    }
  }
  EXPECT_EQ(refused, 10 - 2 - 4);
  EXPECT_EQ(pool.queued(), 4u);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return answered == 10; }));
  }
  pool.stop();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), 6);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 503), 4);
  Responder r = responder();
  EXPECT_EQ(pool.submit(held, r), ReadPool::Submit::kStopped);
  EXPECT_TRUE(r.valid());
  r.send(ReadPool::stopped_response());
  EXPECT_EQ(answered, 11);
}

}  // namespace
}  // namespace ringcast::api
