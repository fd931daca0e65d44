// The public Engine API (core/engine.h) over EngineImpl in one process: a real RocksStore in a
// TempDir, real shard threads and HTTP transport, and a receiver on 127.0.0.1
// (examples/loopback_receiver.h). Endpoint CRUD and URL validation (R6), intake idempotency
// (R12.5), signed byte-exact delivery (R1, R11.2), fan-out by event type, pause (R9) and
// recovery after a restart (R12.2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "core/engine.h"
#include "engine/build.h"
#include "engine/config.h"
#include "engine/embedded.h"
#include "engine/engine_impl.h"
#include "examples/loopback_receiver.h"
#include "net/signing.h"
#include "storage/rocks_store.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/temp_dir.h"

namespace ringcast {
namespace {

using examples::ReceivedRequest;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr auto kWait = test::kEngineWait;
using test::await;

// What the receiver got, and the status it answers with per path (200 unless set).
class Recorder {
 public:
  int on_request(const ReceivedRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(r);
    cv_.notify_all();
    auto it = status_.find(r.target);
    return it == status_.end() ? 200 : it->second;
  }
  void set_status(const std::string& path, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    status_[path] = status;
  }
  // Waits until at least `n` requests arrived; returns them all.
  std::vector<ReceivedRequest> wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kWait, [&] { return requests_.size() >= n; });
    return requests_;
  }
  std::vector<ReceivedRequest> to(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ReceivedRequest> out;
    for (const auto& r : requests_)
      if (r.target == path) out.push_back(r);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ReceivedRequest> requests_;
  std::map<std::string, int> status_;
};

class EngineApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open()); }
  void TearDown() override {
    close();
    receiver_.stop();
  }

  void open() {
    Config cfg = test::loopback_config(2, 60, ms(200));  // retries every 200 ms for ~12 s
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
  void close() {
    core_.reset();  // stops the engine, then closes the store
  }
  static Duration ms(int64_t n) { return milliseconds(n); }

  Engine& api() { return core_->engine(); }
  // The webhook id receivers get for a producer's event id (SPEC R11.3).
  std::string msg(const std::string& event_id) {
    auto ev = api().get_event(kTenant, event_id);
    return ev.ok() && ev->has_value() ? (*ev)->message_id : "";
  }
  std::string url(const std::string& path) const { return receiver_.url(path); }

  Result<Endpoint> create(EndpointSpec spec) {
    return await<Endpoint>([&](auto done) { api().create_endpoint(kTenant, spec, done); });
  }
  Endpoint create_ok(const std::string& path, std::vector<std::string> types = {}) {
    EndpointSpec spec;
    spec.url = url(path);
    spec.event_types = std::move(types);
    auto ep = create(spec);
    EXPECT_TRUE(ep.ok()) << ep.error().message;
    return ep.ok() ? *ep : Endpoint{};
  }
  Result<SubmitResult> submit(const std::string& id, const std::string& type,
                              const std::string& payload) {
    return await<SubmitResult>([&](auto done) {
      api().submit({kTenant, id, type, payload}, done);
    });
  }
  // Polls the delivery log until `endpoint` has `n` deliveries, all terminal (bounded).
  std::vector<Delivery> wait_terminal(EndpointId endpoint, size_t n) {
    std::vector<Delivery> items;
    for (auto deadline = Clock::now() + kWait; Clock::now() < deadline;) {
      auto page = api().list_deliveries(kTenant, endpoint, std::nullopt, 100, "");
      if (!page.ok()) break;
      items = page->items;
      if (items.size() >= n &&
          std::all_of(items.begin(), items.end(), [](auto& d) { return is_terminal(d.status); }))
        break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return items;
  }

  // Deliveries the engine reported finished (EngineOptions::on_delivery_done), in order.
  std::vector<Delivery> wait_done(size_t n) {
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait_for(lock, kWait, [&] { return done_.size() >= n; });
    return done_;
  }

  static constexpr const char* kTenant = "acme";
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::vector<Delivery> done_;
  test::TempDir dir_{"ringcast-engine-api"};
  Recorder rec_;
  examples::LoopbackReceiver receiver_{
      [this](const ReceivedRequest& r) { return rec_.on_request(r); }};
  std::unique_ptr<engine::Embedded> core_;  // last: destroyed first
};

TEST_F(EngineApiTest, EndpointRoundTripAndValidation) {
  EndpointSpec spec;
  spec.url = url("/a");
  spec.event_types = {"payment.succeeded"};
  auto ep = create(spec);
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  EXPECT_NE(ep->id, 0u);
  EXPECT_EQ(ep->tenant, kTenant);
  EXPECT_EQ(ep->url, url("/a"));
  EXPECT_EQ(ep->state, EndpointState::kEnabled);
  ASSERT_EQ(ep->secrets.size(), 1u);  // generated
  EXPECT_GE(ep->secrets[0].key.size(), 16u);

  auto got = await<Endpoint>([&](auto done) { api().get_endpoint(kTenant, ep->id, done); });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->url, url("/a"));
  EXPECT_EQ(got->event_types, std::vector<std::string>{"payment.succeeded"});
  // Another tenant does not see it.
  auto other = await<Endpoint>([&](auto done) { api().get_endpoint("other", ep->id, done); });
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, Errc::kNotFound);

  EndpointPatch patch;
  patch.url = url("/b");
  patch.event_types = std::vector<std::string>{"payment.*"};
  auto upd =
      await<Endpoint>([&](auto done) { api().update_endpoint(kTenant, ep->id, patch, done); });
  ASSERT_TRUE(upd.ok()) << upd.error().message;
  EXPECT_EQ(upd->url, url("/b"));
  auto list = await<std::vector<Endpoint>>([&](auto done) { api().list_endpoints(kTenant, done); });
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].url, url("/b"));
  EXPECT_EQ((*list)[0].event_types, std::vector<std::string>{"payment.*"});

  // URL form errors (R6) come back as kInvalidArgument with their reason, on create and update.
  struct Case {
    const char* url;
    const char* reason;
  };
  for (Case c : {Case{"ftp://example.com/x", "not_https"},
                 Case{"https://user:pw@example.com/x", "userinfo_not_allowed"},
                 Case{"https://example.com/x#frag", "fragment_not_allowed"},
                 Case{"example.com/hook", "invalid_url"}}) {
    EndpointSpec bad;
    bad.url = c.url;
    auto r = create(bad);
    ASSERT_FALSE(r.ok()) << c.url;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << c.url;
    EXPECT_STREQ(r.error().reason_or_code(), c.reason) << c.url;
    EXPECT_STREQ(r.error().field, "url");
    EndpointPatch p;
    p.url = c.url;
    auto u = await<Endpoint>([&](auto done) { api().update_endpoint(kTenant, ep->id, p, done); });
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_STREQ(u.error().reason_or_code(), c.reason) << c.url;
  }
  EndpointSpec bad_policy;
  bad_policy.url = url("/c");
  bad_policy.policy = "no-such-policy";
  auto bp = create(bad_policy);
  ASSERT_FALSE(bp.ok());
  EXPECT_STREQ(bp.error().reason_or_code(), "unknown_policy");
  // The failed update left the endpoint as it was.
  got = await<Endpoint>([&](auto done) { api().get_endpoint(kTenant, ep->id, done); });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->url, url("/b"));

  auto del = await<bool>([&](auto done) { api().delete_endpoint(kTenant, ep->id, done); });
  ASSERT_TRUE(del.ok());
  EXPECT_TRUE(*del);
  got = await<Endpoint>([&](auto done) { api().get_endpoint(kTenant, ep->id, done); });
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Errc::kNotFound);
  list = await<std::vector<Endpoint>>([&](auto done) { api().list_endpoints(kTenant, done); });
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  del = await<bool>([&](auto done) { api().delete_endpoint(kTenant, ep->id, done); });
  ASSERT_FALSE(del.ok());
  EXPECT_EQ(del.error().code, Errc::kNotFound);
}

TEST_F(EngineApiTest, SubmitDeliversSignedByteExactPayload) {
  Endpoint ep = create_ok("/hook");
  ASSERT_NE(ep.id, 0u);
  // Odd spacing, key order and escapes: the receiver must get these exact bytes (R1).
  const std::string payload = "{ \"z\":1,\t\"a\" : [true ,null], \"s\":\"\\u00e9 \u00e9\" }";
  auto r = submit("evt_sig", "payment.succeeded", payload);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->kind, SubmitResult::Kind::kAccepted);
  EXPECT_EQ(r->deliveries, 1u);

  auto reqs = rec_.wait_for(1);
  ASSERT_EQ(reqs.size(), 1u);
  const ReceivedRequest& q = reqs[0];
  EXPECT_EQ(q.method, "POST");
  EXPECT_EQ(q.target, "/hook");
  EXPECT_EQ(q.body, payload);
  EXPECT_EQ(q.header("content-type"), "application/json");
  // The webhook id is the event's message id, not the producer's id (SPEC R11.3).
  const std::string id = msg("evt_sig");
  EXPECT_EQ(id.rfind("msg_", 0), 0u) << id;
  EXPECT_EQ(id.size(), kMessageIdChars);
  EXPECT_EQ(q.header("webhook-id"), id);
  ASSERT_FALSE(q.header("webhook-signature").empty());
  std::vector<std::string> keys = {ep.secrets.at(0).key};
  EXPECT_TRUE(net::verify_standard(q.header("webhook-signature"), keys, id,
                                   q.header("webhook-timestamp"), q.body));
  // The check can fail: another key, or one byte more of body, does not verify.
  EXPECT_FALSE(net::verify_standard(q.header("webhook-signature"), {"another key"}, "evt_sig",
                                    q.header("webhook-timestamp"), q.body));
  EXPECT_FALSE(net::verify_standard(q.header("webhook-signature"), keys, "evt_sig",
                                    q.header("webhook-timestamp"), q.body + " "));

  // The delivery log: delivered on the first attempt, 200, with the event it carried.
  auto ds = wait_terminal(ep.id, 1);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(ds[0].event, r->event);
  EXPECT_EQ(ds[0].attempts, 1u);
  auto detail = api().get_delivery(kTenant, ds[0].id);
  ASSERT_TRUE(detail.ok() && detail->has_value());
  ASSERT_EQ((*detail)->attempts.size(), 1u);
  EXPECT_EQ((*detail)->attempts[0].outcome, Outcome::kSuccess);
  EXPECT_EQ((*detail)->attempts[0].http_status, 200);
  EXPECT_EQ((*detail)->attempts[0].response_prefix, "ok");
  auto ev = api().get_event(kTenant, "evt_sig");
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->payload, payload);
  EXPECT_EQ((*ev)->seq, r->event);
  // Another tenant cannot read it.
  auto foreign = api().get_delivery("other", ds[0].id);
  ASSERT_TRUE(foreign.ok());
  EXPECT_FALSE(foreign->has_value());
}

TEST_F(EngineApiTest, IdempotentIntake) {
  Endpoint ep = create_ok("/hook");
  auto first = submit("evt_1", "payment.succeeded", R"({"n":1})");
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->kind, SubmitResult::Kind::kAccepted);
  auto again = submit("evt_1", "payment.succeeded", R"({"n":1})");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->kind, SubmitResult::Kind::kDuplicate);
  EXPECT_EQ(again->event, first->event);
  EXPECT_EQ(again->deliveries, first->deliveries);
  auto conflict = submit("evt_1", "payment.succeeded", R"({"n":2})");
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error().code, Errc::kConflict);
  EXPECT_STREQ(conflict.error().reason_or_code(), "conflict");
  // Unknown tenant and a bad id are refused, not stored.
  auto unknown = await<SubmitResult>([&](auto done) {
    api().submit({"nobody", "evt_1", "t", "{}"}, done);
  });
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::kNotFound);
  auto bad_id = submit("has space", "payment.succeeded", "{}");
  ASSERT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.error().code, Errc::kInvalidArgument);

  // One event, one delivery, one request, whatever was resubmitted.
  auto ds = wait_terminal(ep.id, 1);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].status, DeliveryStatus::kDelivered);
  auto reqs = rec_.wait_for(1);
  EXPECT_EQ(reqs.size(), 1u);
  auto ev = api().get_event(kTenant, "evt_1");
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->payload, R"({"n":1})");
}

TEST_F(EngineApiTest, BatchIntakeAnswersEachEventLikeOneByOne) {
  Endpoint ep = create_ok("/hook");
  auto stored = submit("old", "t", R"({"n":0})");  // in the store before the batch
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  std::vector<EventInput> batch = {
      {kTenant, "a", "t", R"({"n":1})"},    // new
      {kTenant, "a", "t", R"({"n":1})"},    // repeat within the batch: duplicate of the first
      {kTenant, "a", "t", R"({"n":9})"},    // same id, other payload: conflict
      {kTenant, "old", "t", R"({"n":0})"},  // duplicate of a stored event
      {kTenant, "old", "t", R"({"n":5})"},  // conflict with a stored event
      {"nobody", "b", "t", "{}"},           // unknown tenant
      {kTenant, "has space", "t", "{}"},    // bad id
      {kTenant, "c", "t", R"({"n":3})"},    // new
  };
  auto rs =
      await<std::vector<Result<SubmitResult>>>([&](auto done) { api().submit_batch(batch, done); });
  ASSERT_TRUE(rs.ok());
  ASSERT_EQ(rs->size(), batch.size());
  const auto& r = *rs;
  ASSERT_TRUE(r[0].ok() && r[1].ok() && r[3].ok() && r[7].ok());
  EXPECT_EQ(r[0]->kind, SubmitResult::Kind::kAccepted);
  EXPECT_EQ(r[1]->kind, SubmitResult::Kind::kDuplicate);
  EXPECT_EQ(r[1]->event, r[0]->event);
  ASSERT_FALSE(r[2].ok());
  EXPECT_EQ(r[2].error().code, Errc::kConflict);
  EXPECT_EQ(r[3]->kind, SubmitResult::Kind::kDuplicate);
  EXPECT_EQ(r[3]->event, stored->event);
  ASSERT_FALSE(r[4].ok());
  EXPECT_EQ(r[4].error().code, Errc::kConflict);
  ASSERT_FALSE(r[5].ok());
  EXPECT_EQ(r[5].error().code, Errc::kNotFound);
  ASSERT_FALSE(r[6].ok());
  EXPECT_EQ(r[6].error().code, Errc::kInvalidArgument);
  EXPECT_EQ(r[7]->kind, SubmitResult::Kind::kAccepted);
  EXPECT_NE(r[7]->event, r[0]->event);
  // Three events, three deliveries: the repeats created nothing.
  EXPECT_EQ(wait_terminal(ep.id, 3).size(), 3u);
  auto reqs = rec_.wait_for(3);
  EXPECT_EQ(reqs.size(), 3u);
}

TEST_F(EngineApiTest, FanOutByEventTypeFilter) {
  Endpoint exact = create_ok("/exact", {"payment.succeeded"});
  Endpoint wild = create_ok("/wild", {"payment.*"});
  Endpoint all = create_ok("/all");
  Endpoint refund = create_ok("/refund", {"refund.created"});
  std::vector<EventInput> batch = {{kTenant, "e1", "payment.succeeded", R"({"i":1})"},
                                   {kTenant, "e2", "payment.failed", R"({"i":2})"},
                                   {kTenant, "e3", "refund.created", R"({"i":3})"},
                                   {kTenant, "e4", "paymentXfailed", R"({"i":4})"}};
  auto rs =
      await<std::vector<Result<SubmitResult>>>([&](auto done) { api().submit_batch(batch, done); });
  ASSERT_TRUE(rs.ok());
  ASSERT_EQ(rs->size(), 4u);
  std::vector<uint32_t> counts;
  for (auto& r : *rs) {
    ASSERT_TRUE(r.ok()) << r.error().message;
    counts.push_back(r->deliveries);
  }
  EXPECT_EQ(counts, (std::vector<uint32_t>{3, 2, 2, 1}));

  EXPECT_EQ(wait_terminal(all.id, 4).size(), 4u);
  EXPECT_EQ(wait_terminal(exact.id, 1).size(), 1u);
  EXPECT_EQ(wait_terminal(wild.id, 2).size(), 2u);
  EXPECT_EQ(wait_terminal(refund.id, 1).size(), 1u);
  rec_.wait_for(8);
  auto ids = [&](const std::string& path) {
    std::set<std::string> out;
    for (const auto& q : rec_.to(path)) out.insert(q.header("webhook-id"));
    return out;
  };
  EXPECT_EQ(ids("/exact"), (std::set<std::string>{msg("e1")}));
  EXPECT_EQ(ids("/wild"), (std::set<std::string>{msg("e1"), msg("e2")}));
  EXPECT_EQ(ids("/all"), (std::set<std::string>{msg("e1"), msg("e2"), msg("e3"), msg("e4")}));
  EXPECT_EQ(ids("/refund"), (std::set<std::string>{msg("e3")}));
}

TEST_F(EngineApiTest, PausedEndpointGetsNoDeliveries) {
  Endpoint paused = create_ok("/paused");
  Endpoint open = create_ok("/open");
  auto p = await<Endpoint>(
      [&](auto done) { api().endpoint_action(kTenant, paused.id, EndpointAction::kPause, done); });
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->state, EndpointState::kPaused);

  // R9.1: while paused, new events are not enqueued for it at all.
  auto r = submit("while_paused", "payment.succeeded", "{}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->deliveries, 1u);
  EXPECT_EQ(wait_terminal(open.id, 1).size(), 1u);
  auto none = api().list_deliveries(kTenant, paused.id, std::nullopt, 100, "");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->items.empty());

  // R9.3: a test event goes out while paused.
  auto t = await<DeliveryId>([&](auto done) { api().test_endpoint(kTenant, paused.id, done); });
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto ds = wait_terminal(paused.id, 1);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].id, *t);
  EXPECT_EQ(ds[0].status, DeliveryStatus::kDelivered);
  auto to_paused = rec_.to("/paused");
  ASSERT_EQ(to_paused.size(), 1u);
  EXPECT_NE(to_paused[0].body.find("ringcast.test"), std::string::npos);
  // The body names the endpoint by the id the API uses.
  EXPECT_NE(to_paused[0].body.find("\"endpoint_id\":\"" + std::to_string(paused.id) + "\""),
            std::string::npos)
      << to_paused[0].body;

  // After resume, new events reach it again.
  auto res = await<Endpoint>(
      [&](auto done) { api().endpoint_action(kTenant, paused.id, EndpointAction::kResume, done); });
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->state, EndpointState::kEnabled);
  r = submit("after_resume", "payment.succeeded", "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deliveries, 2u);
  EXPECT_EQ(wait_terminal(paused.id, 2).size(), 2u);
  std::set<std::string> got;
  for (const auto& q : rec_.to("/paused")) got.insert(q.header("webhook-id"));
  EXPECT_EQ(got.count(msg("while_paused")), 0u);
  EXPECT_EQ(got.count(msg("after_resume")), 1u);
}

// A test event's id is "test_<its sequence>": a producer may have taken that id already. The
// test is refused (R12.5: the producer's event is never overwritten) and the shard goes on.
TEST_F(EngineApiTest, ATestEventWhoseIdAProducerUsedIsRefused) {
  Endpoint ep = create_ok("/hook");
  auto p = await<Endpoint>(
      [&](auto done) { api().endpoint_action(kTenant, ep.id, EndpointAction::kPause, done); });
  ASSERT_TRUE(p.ok());
  // Ids are handed out in order: this event takes ep.id + 1, the test event would take + 2.
  const std::string taken = "test_" + std::to_string(ep.id + 2);
  auto r = submit(taken, "payment.succeeded", R"({"mine":true})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->event, ep.id + 1);
  auto t = await<DeliveryId>([&](auto done) { api().test_endpoint(kTenant, ep.id, done); });
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, Errc::kConflict);
  auto ev = api().get_event(kTenant, taken);
  ASSERT_TRUE(ev.ok() && ev->has_value());
  EXPECT_EQ((*ev)->payload, R"({"mine":true})");
  // The next test goes out.
  auto t2 = await<DeliveryId>([&](auto done) { api().test_endpoint(kTenant, ep.id, done); });
  ASSERT_TRUE(t2.ok()) << t2.error().message;
  EXPECT_EQ(wait_terminal(ep.id, 1).size(), 1u);
}

TEST_F(EngineApiTest, RestartRecoversEndpointsAndDeliveries) {
  Endpoint ok_ep = create_ok("/ok", {"payment.*"});
  EndpointSpec flaky_spec;  // answers 503 until after the restart; retried every 200 ms
  flaky_spec.url = url("/flaky");
  flaky_spec.policy = "fast";
  flaky_spec.secret = "whsec_" + net::base64_encode("a known secret for the flaky one");
  rec_.set_status("/flaky", 503);
  auto flaky = create(flaky_spec);
  ASSERT_TRUE(flaky.ok()) << flaky.error().message;

  auto a = submit("r1", "payment.succeeded", R"({"r":1})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->deliveries, 2u);
  auto b = submit("r2", "invoice.created", R"({"r":2})");  // only the flaky one
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->deliveries, 1u);
  ASSERT_EQ(wait_terminal(ok_ep.id, 1).size(), 1u);
  // Wait until the flaky endpoint has refused each event at least once.
  auto flaky_ids = [&] {
    std::set<std::string> ids;
    for (const auto& q : rec_.to("/flaky")) ids.insert(q.header("webhook-id"));
    return ids;
  };
  for (auto deadline = Clock::now() + kWait; flaky_ids().size() < 2 && Clock::now() < deadline;)
    std::this_thread::sleep_for(milliseconds(10));
  const std::set<std::string> before_restart = {msg("r1"), msg("r2")};
  ASSERT_EQ(flaky_ids(), before_restart);

  close();
  rec_.set_status("/flaky", 200);
  ASSERT_NO_FATAL_FAILURE(open());

  // Endpoints come back with the same ids, URLs, filters and secrets.
  auto list = await<std::vector<Endpoint>>([&](auto done) { api().list_endpoints(kTenant, done); });
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->size(), 2u);
  for (const Endpoint& e : *list) {
    const Endpoint& before = e.id == ok_ep.id ? ok_ep : *flaky;
    EXPECT_EQ(e.id, before.id);
    EXPECT_EQ(e.url, before.url);
    EXPECT_EQ(e.event_types, before.event_types);
    EXPECT_EQ(e.policy, before.policy);
    ASSERT_EQ(e.secrets.size(), 1u);
    EXPECT_EQ(e.secrets[0].key, before.secrets.at(0).key);
  }
  // The delivered one is in the log as it was; the pending ones are retried and delivered.
  auto ok_ds = wait_terminal(ok_ep.id, 1);
  ASSERT_EQ(ok_ds.size(), 1u);
  EXPECT_EQ(ok_ds[0].status, DeliveryStatus::kDelivered);
  auto flaky_ds = wait_terminal(flaky->id, 2);
  ASSERT_EQ(flaky_ds.size(), 2u);
  for (const Delivery& d : flaky_ds) {
    EXPECT_EQ(d.status, DeliveryStatus::kDelivered);
    auto detail = api().get_delivery(kTenant, d.id);
    ASSERT_TRUE(detail.ok() && detail->has_value());
    const auto& attempts = (*detail)->attempts;
    ASSERT_GE(attempts.size(), 2u);
    EXPECT_EQ(attempts.front().http_status, 503);
    EXPECT_EQ(attempts.back().outcome, Outcome::kSuccess);
    EXPECT_EQ(attempts.back().http_status, 200);
    for (size_t i = 0; i < attempts.size(); ++i) EXPECT_EQ(attempts[i].number, i + 1);
  }
  // Message ids are stored with the event: the same after the restart, and the retries after
  // it carried them (receivers deduplicate by them, R11.3).
  EXPECT_EQ((std::set<std::string>{msg("r1"), msg("r2")}), before_restart);
  EXPECT_EQ(flaky_ids(), before_restart);
  auto recent = api().recent_deliveries(kTenant);
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->size(), 3u);
  // Idempotency survives the restart too.
  auto again = submit("r1", "payment.succeeded", R"({"r":1})");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->kind, SubmitResult::Kind::kDuplicate);
  EXPECT_EQ(again->event, a->event);
  auto conflict = submit("r1", "payment.succeeded", R"({"r":9})");
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error().code, Errc::kConflict);
}

TEST_F(EngineApiTest, EmbedderHearsOfEveryFinishedDeliveryOnceItIsDurable) {
  rec_.set_status("/gone", 410);
  Endpoint ok = create_ok("/fine");
  Endpoint gone = create_ok("/gone");
  auto r = submit("evt_done", "order.created", R"({"n":1})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->deliveries, 2u);
  auto done = wait_done(2);
  ASSERT_EQ(done.size(), 2u);
  std::map<EndpointId, Delivery> by_endpoint;
  for (const Delivery& d : done) by_endpoint[d.endpoint] = d;
  ASSERT_EQ(by_endpoint.count(ok.id), 1u);
  ASSERT_EQ(by_endpoint.count(gone.id), 1u);
  EXPECT_EQ(by_endpoint[ok.id].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(by_endpoint[gone.id].status, DeliveryStatus::kDead);  // 410: R8, no retry
  for (const Delivery& d : done) {
    EXPECT_EQ(d.event, r->event);
    // Reported only once durable: the delivery log already has the same final state.
    auto detail = api().get_delivery(kTenant, d.id);
    ASSERT_TRUE(detail.ok() && detail->has_value());
    EXPECT_EQ((*detail)->delivery.status, d.status);
  }
  // Nothing is reported twice, and nothing that has not finished.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(wait_done(2).size(), 2u);
}

}  // namespace
}  // namespace ringcast
