// engine::Embedded: the store's durability hook reaches both the caller and the shards (an
// intake acknowledgement waits for it), stop and close are idempotent, and a failed open is an
// error, not a crash. Real RocksDB in a temp dir; no traffic.
#include "engine/embedded.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "engine/build.h"
#include "engine/config.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/temp_dir.h"

namespace ringcast::engine {
namespace {

using test::await;

Config config_for(const std::string& dir) {
  Config cfg;
  cfg.engine.shards = 1;
  cfg.storage.data_dir = dir;
  cfg.transport.allow_http = true;
  return cfg;
}

TEST(Embedded, DurabilityReachesTheCallerAndTheShards) {
  test::TempDir dir("ringcast-embedded");
  Config cfg = config_for(dir.path());
  storage::StoreOptions sopts = store_options(cfg);
  auto hooked = std::make_shared<std::atomic<int>>(0);
  sopts.on_durable = [hooked](uint64_t) { hooked->fetch_add(1); };
  auto opened = Embedded::open(std::move(sopts), engine_options(cfg));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  std::unique_ptr<Embedded> e = std::move(*opened);

  EndpointSpec spec;
  spec.url = "http://127.0.0.1:9/x";  // never sent to: the endpoint is paused below
  auto ep = await<Endpoint>([&](auto done) { e->engine().create_endpoint("t", spec, done); });
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  auto paused = await<Endpoint>(
      [&](auto done) { e->engine().endpoint_action("t", ep->id, EndpointAction::kPause, done); });
  ASSERT_TRUE(paused.ok());
  // Accepted only once durable: the answer came, so the store's hook ran and woke the shard.
  auto r = await<SubmitResult>([&](auto done) {
    e->engine().submit({"t", "e1", "x", "{}"}, done);
  });
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->deliveries, 0u);
  EXPECT_GT(hooked->load(), 0);

  e->stop();
  e->stop();  // idempotent
  e->close();
  e->close();

  // Reopened on the same data, the event is there (the idempotency key answers a duplicate).
  auto again = Embedded::open(store_options(cfg), engine_options(cfg));
  ASSERT_TRUE(again.ok()) << again.error().message;
  auto dup = await<SubmitResult>([&](auto done) {
    (*again)->engine().submit({"t", "e1", "x", "{}"}, done);
  });
  ASSERT_TRUE(dup.ok()) << dup.error().message;
  EXPECT_EQ(dup->kind, SubmitResult::Kind::kDuplicate);
  EXPECT_EQ(dup->event, r->event);
}

TEST(Embedded, AStoreThatCannotOpenIsAnError) {
  test::TempDir dir("ringcast-embedded");
  Config cfg = config_for(dir.file("not-a-dir"));
  {
    std::FILE* f = std::fopen(cfg.storage.data_dir.c_str(), "w");  // a file where the dir goes
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  auto opened = Embedded::open(store_options(cfg), engine_options(cfg));
  EXPECT_FALSE(opened.ok());
}

}  // namespace
}  // namespace ringcast::engine
