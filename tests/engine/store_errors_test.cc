// The engine on an in-memory store whose event reads can be made to fail (tests/support
// MemoryStore): a failed read is counted in ringcast_store_errors_total; at intake it is the
// answer (nothing is half-accepted: the same events go through afterwards), on the delivery
// path the attempt is recorded internal_error and retried, and the event is still delivered.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/build.h"
#include "engine/config.h"
#include "engine/engine_impl.h"
#include "examples/loopback_receiver.h"
#include "net/signing.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/memory_store.h"

namespace ringcast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kWait = test::kEngineWait;
using test::await;
using test::wait_until;

// One shard on the "fast" policy, no payload cache: every send reads its event from the store.
// nullptr (and a test failure) when it does not start.
std::unique_ptr<engine::EngineImpl> start_uncached(MemoryStore& store) {
  Config cfg = test::loopback_config(1, 10, milliseconds(100));
  cfg.validate();
  engine::EngineOptions eopts = engine::engine_options(cfg);
  eopts.payload_cache_bytes = 0;
  auto started = engine::EngineImpl::start(std::move(eopts), store);
  if (!started.ok()) {
    ADD_FAILURE() << started.error().message;
    return nullptr;
  }
  return std::move(*started);
}

EndpointSpec fast_hook(const examples::LoopbackReceiver& receiver) {
  EndpointSpec spec;
  spec.url = receiver.url("/hook");
  spec.policy = "fast";
  return spec;
}

TEST(EngineStoreErrors, FailedReadsAreCountedAnsweredAndRetried) {
  std::atomic<int> received{0};
  std::vector<std::string> ids;
  std::mutex ids_mu;
  examples::LoopbackReceiver receiver([&](const examples::ReceivedRequest& r) {
    std::lock_guard lock(ids_mu);
    ids.push_back(r.header("webhook-id"));
    received.fetch_add(1);
    return 200;
  });

  MemoryStore store;
  std::unique_ptr<engine::EngineImpl> eng = start_uncached(store);
  ASSERT_NE(eng, nullptr);

  EndpointSpec spec = fast_hook(receiver);
  spec.rate_limit = RateLimit{0.5, 1};  // the second event waits ~2 s for its send
  auto ep = await<Endpoint>([&](auto done) { eng->create_endpoint("acme", spec, done); });
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  EXPECT_EQ(test::metric(*eng, "ringcast_store_errors_total"), 0);

  // Intake: the idempotency lookup fails, the event is refused with the store's error.
  store.fail_next_reads(1);
  auto one = await<SubmitResult>([&](auto done) { eng->submit({"acme", "e1", "t", "{}"}, done); });
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.error().code, Errc::kIo);
  store.fail_next_reads(1);
  auto batch = await<std::vector<Result<SubmitResult>>>([&](auto done) {
    eng->submit_batch({{"acme", "e1", "t", "{}"}, {"acme", "e2", "t", "{\"n\":2}"}},
                      [done](std::vector<Result<SubmitResult>> rs) { done(std::move(rs)); });
  });
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_FALSE((*batch)[0].ok());
  EXPECT_FALSE((*batch)[1].ok());
  EXPECT_EQ(test::metric(*eng, "ringcast_store_errors_total"), 2);

  // Nothing was half-taken: the same events are new now.
  one = await<SubmitResult>([&](auto done) { eng->submit({"acme", "e1", "t", "{}"}, done); });
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(one->kind, SubmitResult::Kind::kAccepted);
  ASSERT_TRUE(wait_until([&] { return received.load() >= 1; }));
  // e2's send waits ~2 s for the rate limit, then reads its event: that read fails once.
  auto two = await<SubmitResult>([&](auto done) {
    eng->submit({"acme", "e2", "t", "{\"n\":2}"}, done);
  });
  ASSERT_TRUE(two.ok()) << two.error().message;
  EXPECT_EQ(two->kind, SubmitResult::Kind::kAccepted);
  ASSERT_EQ(received.load(), 1) << "e2 was sent before the rate limit allowed it";
  store.fail_next_reads(1);
  ASSERT_TRUE(wait_until([&] { return received.load() >= 2; }));
  EXPECT_EQ(test::metric(*eng, "ringcast_store_errors_total"), 3);
  std::vector<std::string> want;  // the webhook ids: the events' message ids
  for (const char* id : {"e1", "e2"}) {
    auto ev = eng->get_event("acme", id);
    ASSERT_TRUE(ev.ok() && ev->has_value());
    want.push_back((*ev)->message_id);
  }
  eng->stop();
  eng.reset();

  {
    std::lock_guard lock(ids_mu);
    EXPECT_EQ(ids, want);
  }
  // e2's delivery: one attempt that never left (internal_error), then the delivered one.
  size_t checked = 0;
  for (const auto& [id, d] : store.deliveries()) {
    if (d.event != two->event) continue;
    ++checked;
    EXPECT_EQ(d.status, DeliveryStatus::kDelivered);
    const auto& attempts = store.attempts_of(id);
    ASSERT_EQ(attempts.size(), 2u);
    EXPECT_EQ(attempts[0].code.str(), "internal_error");
    EXPECT_EQ(attempts[1].outcome, Outcome::kSuccess);
  }
  EXPECT_EQ(checked, 1u);
}

// The request's body is a view of the event (SendRequest::body): the send slot must keep the
// event alive until the exchange completes. With no payload cache every send reads its event
// back from the store for that turn only, and this receiver answers `Connection: close`, so
// each request is written after its connect completes, turns later. Each body must arrive
// byte for byte and under a valid signature.
TEST(EngineStoreErrors, BodiesReadBackForOneTurnArriveIntactWhenWrittenTurnsLater) {
  constexpr int kEvents = 40;
  std::mutex mu;
  std::map<std::string, std::string> got;  // webhook-id -> body
  int bad_signatures = 0;
  std::string secret;
  examples::LoopbackReceiver receiver([&](const examples::ReceivedRequest& r) {
    std::lock_guard lock(mu);
    const std::string id = r.header("webhook-id");
    if (!net::verify_standard(r.header("webhook-signature"), {secret}, id,
                              r.header("webhook-timestamp"), r.body))
      ++bad_signatures;
    got[id] = r.body;
    return 200;
  });

  EndpointSpec spec = fast_hook(receiver);
  spec.max_in_flight = 4;  // the rest are sent in later turns, from events read back then

  MemoryStore store;
  std::unique_ptr<engine::EngineImpl> eng = start_uncached(store);
  ASSERT_NE(eng, nullptr);

  auto ep = await<Endpoint>([&](auto done) { eng->create_endpoint("acme", spec, done); });
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  {
    std::lock_guard lock(mu);
    secret = ep->secrets.front().key;
  }

  std::vector<EventInput> events;
  std::map<std::string, std::string> sent;
  for (int i = 0; i < kEvents; ++i) {
    std::string body = "{\"n\":" + std::to_string(i) + ",\"fill\":\"" +
                       std::string(900 + static_cast<size_t>(i), static_cast<char>('a' + i % 26)) +
                       "\"}";
    const std::string id = "ev" + std::to_string(i);
    sent[id] = body;
    events.push_back({"acme", id, "t", body});
  }
  auto batch = await<std::vector<Result<SubmitResult>>>([&](auto done) {
    eng->submit_batch(events,
                      [done](std::vector<Result<SubmitResult>> rs) { done(std::move(rs)); });
  });
  ASSERT_TRUE(batch.ok());
  for (const auto& r : *batch) ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(mu);
    return got.size() >= static_cast<size_t>(kEvents);
  }));
  // Only the first turn's sends could take their event from the batch itself.
  EXPECT_GE(test::metric(*eng, "ringcast_payload_cache_misses_total"), kEvents - 4);
  std::map<std::string, std::string> message_id;  // producer id -> webhook id
  for (const auto& [id, body] : sent) {
    auto ev = eng->get_event("acme", id);
    ASSERT_TRUE(ev.ok() && ev->has_value());
    message_id[id] = (*ev)->message_id;
  }
  eng->stop();
  eng.reset();
  std::lock_guard lock(mu);
  ASSERT_EQ(got.size(), sent.size());
  int wrong = 0;
  for (const auto& [id, body] : sent) {
    auto it = got.find(message_id[id]);
    if (it == got.end() || it->second != body) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "bodies that did not arrive byte for byte";
  EXPECT_EQ(bad_signatures, 0);
}

}  // namespace
}  // namespace ringcast
