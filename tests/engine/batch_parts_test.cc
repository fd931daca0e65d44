// EngineOptions::max_batch_events bounds what one shard takes of a submit_batch in one loop
// turn: a larger batch goes in parts, each committed in its own store write, and the single
// answer still comes once every part is durable, one result per event in input order, every
// event accepted exactly once. On an in-memory store that records each write, and on RocksDB
// through engine::Embedded (its store batch counter). No traffic: the endpoints are paused.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/types.h"
#include "engine/build.h"
#include "engine/config.h"
#include "engine/embedded.h"
#include "engine/engine_impl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/locked_store.h"
#include "tests/support/temp_dir.h"

namespace ringcast {
namespace {

using test::await;
using BatchResults = std::vector<Result<SubmitResult>>;

// A LockedStore (one MemoryStore, a mutex for the two shards) that remembers the largest
// number of events one write carried and how many writes carried events.
class CountingStore final : public test::LockedStore {
 public:
  Result<uint64_t> write(const Mutations& m) override {
    if (!m.events.empty()) {
      event_writes_.fetch_add(1);
      size_t prev = max_events_.load();
      while (m.events.size() > prev && !max_events_.compare_exchange_weak(prev, m.events.size())) {
      }
    }
    return LockedStore::write(m);
  }

  size_t max_events_per_write() const { return max_events_.load(); }
  uint64_t event_writes() const { return event_writes_.load(); }

 private:
  std::atomic<size_t> max_events_{0};
  std::atomic<uint64_t> event_writes_{0};
};

// A paused endpoint makes the tenant known without sending anything (SPEC R9.1).
void make_tenant(engine::EngineImpl& eng, const std::string& tenant) {
  EndpointSpec spec;
  spec.url = "http://127.0.0.1:9/never";
  auto ep = await<Endpoint>([&](auto done) { eng.create_endpoint(tenant, spec, done); });
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  auto paused = await<Endpoint>(
      [&](auto done) { eng.endpoint_action(tenant, ep->id, EndpointAction::kPause, done); });
  ASSERT_TRUE(paused.ok()) << paused.error().message;
}

// Two tenants on different shards of a two-shard engine.
std::vector<std::string> tenants_on_two_shards() {
  std::vector<std::string> out;
  std::set<uint32_t> shards;
  for (int i = 0; out.size() < 2; ++i) {
    std::string t = "tenant-" + std::to_string(i);
    if (shards.insert(partition_of(t) % 2).second) out.push_back(t);
  }
  return out;
}

Result<BatchResults> submit_batch(engine::EngineImpl& eng, std::vector<EventInput> batch) {
  return await<BatchResults>([&](auto done) {
    eng.submit_batch(std::move(batch), [done](BatchResults rs) { done(std::move(rs)); });
  });
}

TEST(EngineBatchParts, ALargeBatchIsTakenInBoundedPartsAndAnsweredOnceInOrder) {
  constexpr size_t kPart = 64;
  constexpr size_t kEvents = 2000;
  CountingStore store;
  Config cfg = test::loopback_config(2, 3, std::chrono::milliseconds(100));
  cfg.validate();
  engine::EngineOptions eopts = engine::engine_options(cfg);
  eopts.max_batch_events = kPart;
  auto started = engine::EngineImpl::start(std::move(eopts), store);
  ASSERT_TRUE(started.ok()) << started.error().message;
  engine::EngineImpl& eng = **started;
  const std::vector<std::string> tenants = tenants_on_two_shards();
  for (const auto& t : tenants) make_tenant(eng, t);
  const uint64_t writes_before = store.event_writes();

  // Events alternate between the two shards' tenants; every 100th repeats the event 50 lines
  // earlier (a duplicate answered from an earlier part); every 250th has a malformed id.
  std::vector<EventInput> batch;
  std::map<std::string, size_t> per_tenant;
  for (size_t i = 0; i < kEvents; ++i) {
    const std::string& t = tenants[i % 2];
    std::string id = "e" + std::to_string(i);
    if (i % 100 == 99) id = batch[i - 50].id;  // same tenant: i - 50 has the same parity
    if (i % 250 == 7) id = "bad id";
    batch.push_back(
        {t, id, "order.created", "{\"n\":" + std::to_string(i % 100 == 99 ? i - 50 : i) + "}"});
    per_tenant[t]++;
  }
  auto rs = submit_batch(eng, batch);
  ASSERT_TRUE(rs.ok()) << rs.error().message;
  ASSERT_EQ(rs->size(), kEvents);

  // Bounded parts: no write carried more than a part, and each shard needed several.
  EXPECT_LE(store.max_events_per_write(), kPart);
  size_t min_writes = 0;
  for (const auto& [t, n] : per_tenant) min_writes += (n + kPart - 1) / kPart;
  EXPECT_GE(store.event_writes() - writes_before, min_writes);

  // One result per event, in input order: a duplicate names the event of the line it repeats,
  // and within a tenant accepted events got increasing sequence numbers (taken in input order).
  std::map<std::string, EventSeq> last_seq;
  std::set<EventSeq> seqs;
  size_t accepted = 0;
  for (size_t i = 0; i < kEvents; ++i) {
    const Result<SubmitResult>& r = (*rs)[i];
    if (i % 250 == 7) {
      ASSERT_FALSE(r.ok()) << "line " << i;
      EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(r.ok()) << "line " << i << ": " << r.error().message;
    if (i % 100 == 99) {
      EXPECT_EQ(r->kind, SubmitResult::Kind::kDuplicate) << "line " << i;
      ASSERT_TRUE((*rs)[i - 50].ok());
      EXPECT_EQ(r->event, (*rs)[i - 50]->event) << "line " << i;
      continue;
    }
    EXPECT_EQ(r->kind, SubmitResult::Kind::kAccepted) << "line " << i;
    EXPECT_GT(r->event, last_seq[batch[i].tenant]) << "line " << i;
    last_seq[batch[i].tenant] = r->event;
    EXPECT_TRUE(seqs.insert(r->event).second) << "line " << i;
    ++accepted;
  }
  EXPECT_EQ(static_cast<int64_t>(accepted), test::metric(eng, "ringcast_events_accepted_total"));

  // Exactly once: the whole batch again is all duplicates of the same events.
  auto again = submit_batch(eng, batch);
  ASSERT_TRUE(again.ok()) << again.error().message;
  ASSERT_EQ(again->size(), kEvents);
  for (size_t i = 0; i < kEvents; ++i) {
    if (i % 250 == 7) continue;
    ASSERT_TRUE((*again)[i].ok()) << "line " << i;
    EXPECT_EQ((*again)[i]->kind, SubmitResult::Kind::kDuplicate) << "line " << i;
    EXPECT_EQ((*again)[i]->event, (*rs)[i]->event) << "line " << i;
  }
  EXPECT_EQ(static_cast<int64_t>(accepted), test::metric(eng, "ringcast_events_accepted_total"));
  eng.stop();
}

TEST(EngineBatchParts, OnRocksDbEachPartIsItsOwnDurableBatch) {
  constexpr size_t kPart = 500;
  constexpr size_t kEvents = 10'000;
  test::TempDir dir("ringcast-batch-parts");
  Config cfg;
  cfg.engine.shards = 1;
  cfg.storage.data_dir = dir.path();
  cfg.transport.allow_http = true;
  engine::EngineOptions eopts = engine::engine_options(cfg);
  eopts.max_batch_events = kPart;
  auto opened = engine::Embedded::open(engine::store_options(cfg), std::move(eopts));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  engine::EngineImpl& eng = (*opened)->engine();
  make_tenant(eng, "t");

  std::vector<EventInput> batch;
  for (size_t i = 0; i < kEvents; ++i)
    batch.push_back({"t", "e" + std::to_string(i), "x", "{\"i\":" + std::to_string(i) + "}"});
  const int64_t batches_before = test::metric(eng, "ringcast_store_batches_total");
  auto rs = submit_batch(eng, batch);
  ASSERT_TRUE(rs.ok()) << rs.error().message;
  ASSERT_EQ(rs->size(), kEvents);
  EXPECT_GE(test::metric(eng, "ringcast_store_batches_total") - batches_before,
            static_cast<int64_t>(kEvents / kPart));
  EventSeq prev = 0;
  for (size_t i = 0; i < kEvents; ++i) {
    ASSERT_TRUE((*rs)[i].ok()) << "line " << i << ": " << (*rs)[i].error().message;
    EXPECT_EQ((*rs)[i]->kind, SubmitResult::Kind::kAccepted);
    EXPECT_GT((*rs)[i]->event, prev) << "line " << i;
    prev = (*rs)[i]->event;
  }
  EXPECT_EQ(test::metric(eng, "ringcast_events_accepted_total"), static_cast<int64_t>(kEvents));
  // In the store, once: reading an event back by its id gives the sequence it was answered with.
  for (size_t i : {size_t{0}, kPart - 1, kPart, kEvents / 2, kEvents - 1}) {
    auto ev = eng.get_event("t", batch[i].id);
    ASSERT_TRUE(ev.ok() && ev->has_value()) << "line " << i;
    EXPECT_EQ((*ev)->seq, (*rs)[i]->event) << "line " << i;
    EXPECT_EQ((*ev)->payload, batch[i].payload) << "line " << i;
  }
  (*opened)->close();
}

// Stopping the engine while parts of a batch are still to come: the answer still comes, each
// event is accepted or refused as shutting_down, and (parts go in order) the accepted ones of
// the shard are a prefix of the batch.
TEST(EngineBatchParts, AStopBetweenPartsStillAnswersEveryEvent) {
  constexpr size_t kPart = 16;
  constexpr size_t kEvents = 4000;
  CountingStore store;
  Config cfg = test::loopback_config(1, 3, std::chrono::milliseconds(100));
  cfg.validate();
  engine::EngineOptions eopts = engine::engine_options(cfg);
  eopts.max_batch_events = kPart;
  auto started = engine::EngineImpl::start(std::move(eopts), store);
  ASSERT_TRUE(started.ok()) << started.error().message;
  std::unique_ptr<engine::EngineImpl> eng = std::move(*started);
  make_tenant(*eng, "t");

  std::vector<EventInput> batch;
  for (size_t i = 0; i < kEvents; ++i) batch.push_back({"t", "e" + std::to_string(i), "x", "{}"});
  auto promise = std::make_shared<std::promise<BatchResults>>();
  auto future = promise->get_future();
  eng->submit_batch(std::move(batch),
                    [promise](BatchResults rs) { promise->set_value(std::move(rs)); });
  // Stop once the first part is in (a batch still queued for the shard is another matter).
  const auto deadline = std::chrono::steady_clock::now() + test::kEngineWait;
  while (store.event_writes() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(store.event_writes(), 0u);
  eng->stop();
  ASSERT_EQ(future.wait_for(test::kEngineWait), std::future_status::ready);
  BatchResults rs = future.get();
  ASSERT_EQ(rs.size(), kEvents);
  bool refused_seen = false;
  for (size_t i = 0; i < kEvents; ++i) {
    if (rs[i].ok()) {
      EXPECT_FALSE(refused_seen) << "line " << i << " accepted after a refused one";
      EXPECT_EQ(rs[i]->kind, SubmitResult::Kind::kAccepted);
    } else {
      EXPECT_EQ(rs[i].error().code, Errc::kUnavailable) << "line " << i;
      refused_seen = true;
    }
  }
}

}  // namespace
}  // namespace ringcast
