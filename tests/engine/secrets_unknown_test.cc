// Signing secrets (SPEC R11.2) and the UNKNOWN clock (R12.8) on the real engine (one shard,
// MemoryStore, a loopback receiver): at most 10 secrets sign at once and expired ones are pruned; a
// delivery's UNKNOWN clock is dropped however the delivery ends.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
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
using test::await;
using test::wait_until;

std::unique_ptr<engine::EngineImpl> start(MemoryStore& store, Duration overlap = hours(24)) {
  Config cfg = test::loopback_config(1, 20, milliseconds(300));
  cfg.validate();
  engine::EngineOptions eopts = engine::engine_options(cfg);
  eopts.secret_rotation_overlap = overlap;
  auto started = engine::EngineImpl::start(std::move(eopts), store);
  if (!started.ok()) {
    ADD_FAILURE() << started.error().message;
    return nullptr;
  }
  return std::move(*started);
}

size_t signatures_in(const std::string& header) {
  size_t n = 0;
  for (size_t at = header.find("v1,"); at != std::string::npos; at = header.find("v1,", at + 3))
    ++n;
  return n;
}

TEST(EngineSecrets, AtMostTenSecretsSignAndTheOldestStopSigning) {
  std::mutex mu;
  std::vector<examples::ReceivedRequest> got;
  examples::LoopbackReceiver receiver([&](const examples::ReceivedRequest& r) {
    std::lock_guard lock(mu);
    got.push_back(r);
    return 200;
  });
  MemoryStore store;
  auto eng = start(store);
  ASSERT_NE(eng, nullptr);
  EndpointSpec spec;
  spec.url = receiver.url("/hook");
  spec.policy = "fast";
  auto ep = await<Endpoint>([&](auto done) { eng->create_endpoint("acme", spec, done); });
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  std::vector<std::string> keys = {ep->secrets.front().key};  // oldest first
  for (int i = 0; i < 14; ++i) {
    auto r =
        await<Endpoint>([&](auto done) { eng->rotate_secret("acme", ep->id, std::nullopt, done); });
    ASSERT_TRUE(r.ok()) << r.error().message;
    keys.push_back(r->secrets.front().key);
    EXPECT_LE(r->secrets.size(), engine::kMaxSigningSecrets) << "after rotation " << i + 1;
  }
  auto now_ep = await<Endpoint>([&](auto done) { eng->get_endpoint("acme", ep->id, done); });
  ASSERT_TRUE(now_ep.ok());
  ASSERT_EQ(now_ep->secrets.size(), engine::kMaxSigningSecrets);
  EXPECT_EQ(now_ep->secrets.front().key, keys.back());  // the newest leads

  auto sub = await<SubmitResult>([&](auto done) { eng->submit({"acme", "e1", "t", "{}"}, done); });
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(mu);
    return !got.empty();
  }));
  std::lock_guard lock(mu);
  const examples::ReceivedRequest& q = got.front();
  const std::string sig = q.header("webhook-signature");
  EXPECT_EQ(signatures_in(sig), engine::kMaxSigningSecrets) << sig;
  auto verifies = [&](const std::string& key) {
    return net::verify_standard(sig, {key}, q.header("webhook-id"), q.header("webhook-timestamp"),
                                q.body);
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    // The 10 newest sign; the 5 oldest were dropped by the cap.
    EXPECT_EQ(verifies(keys[i]), i + engine::kMaxSigningSecrets >= keys.size()) << "key " << i;
  }
}

TEST(EngineSecrets, ExpiredSecretsArePrunedAndNotCounted) {
  examples::LoopbackReceiver receiver([](const examples::ReceivedRequest&) { return 200; });
  MemoryStore store;
  auto eng = start(store, milliseconds(200));  // the old secret signs 200 ms more
  ASSERT_NE(eng, nullptr);
  EndpointSpec spec;
  spec.url = receiver.url("/hook");
  spec.policy = "fast";
  auto ep = await<Endpoint>([&](auto done) { eng->create_endpoint("acme", spec, done); });
  ASSERT_TRUE(ep.ok());
  auto r =
      await<Endpoint>([&](auto done) { eng->rotate_secret("acme", ep->id, std::nullopt, done); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->secrets.size(), 2u);  // the overlap: both sign
  std::this_thread::sleep_for(milliseconds(400));
  auto after = await<Endpoint>([&](auto done) { eng->get_endpoint("acme", ep->id, done); });
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->secrets.size(), 1u) << "an expired secret is not shown (secrets_active)";
  EXPECT_EQ(after->secrets.front().key, r->secrets.front().key);
  auto again =
      await<Endpoint>([&](auto done) { eng->rotate_secret("acme", ep->id, std::nullopt, done); });
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->secrets.size(), 2u) << "the expired one is pruned, not carried along";
}

// The UNKNOWN clock (R12.8) of a delivery that ends without another result — its endpoint is
// deleted while it waits for its retry — is dropped with it, not kept for the process's life.
TEST(EngineUnknown, TheUnknownClockEndsHoweverTheDeliveryEnds) {
  std::atomic<int> requests{0};
  examples::LoopbackReceiver receiver([&](const examples::ReceivedRequest&) {
    requests.fetch_add(1);
    return 502;  // a gateway lost the upstream's answer: UNKNOWN (R12.1)
  });
  MemoryStore store;
  auto eng = start(store);
  ASSERT_NE(eng, nullptr);
  EndpointSpec spec;
  spec.url = receiver.url("/hook");
  spec.policy = "fast";  // next try 300 ms later
  auto ep = await<Endpoint>([&](auto done) { eng->create_endpoint("acme", spec, done); });
  ASSERT_TRUE(ep.ok());
  for (const char* id : {"u1", "u2", "u3"}) {
    auto s = await<SubmitResult>([&](auto done) { eng->submit({"acme", id, "t", "{}"}, done); });
    ASSERT_TRUE(s.ok()) << s.error().message;
  }
  ASSERT_TRUE(wait_until([&] { return test::metric(*eng, "ringcast_deliveries_unknown") == 3; }))
      << eng->metrics_text();
  auto del = await<bool>([&](auto done) { eng->delete_endpoint("acme", ep->id, done); });
  ASSERT_TRUE(del.ok()) << del.error().message;
  EXPECT_TRUE(wait_until([&] { return test::metric(*eng, "ringcast_deliveries_unknown") == 0; }))
      << eng->metrics_text();
  EXPECT_GE(test::metric(*eng, "ringcast_deliveries_dead_total"), 3) << "counted however they end";
}

}  // namespace
}  // namespace ringcast
