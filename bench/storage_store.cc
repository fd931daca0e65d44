// RocksStore benchmarks. In one run:
//  - persisted attempt records/s through the store with `interval` sync vs RocksDB's raw
//    WriteBatch of the same record and batch size (the peer), interleaved pairwise so that
//    machine load hits both alike; reported as store/raw ratio (target >= 0.7);
//  - records/s with `always` (an fsync per batch);
//  - bytes on disk per delivery (1 KB payload, 3 attempts, terminal) after flush + compaction;
//  - recovery time of 1 M pending deliveries (open + recover every partition; target < 5 s).
// Run: bench_storage_store [--benchmark_filter=...]; RINGCAST_BENCH_DIR picks the disk.
#include <benchmark/benchmark.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "storage/codec.h"
#include "storage/rocks_options.h"
#include "storage/rocks_store.h"

namespace ringcast::storage {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr size_t kBatch = 256;         // attempts per write (one shard loop turn)
constexpr int kBatchesPerRound = 100;  // one timed round ends with "everything durable"
constexpr WallTime kT0 = WallTime::from_ms(1'767'225'600'000);

// A scratch directory removed at the end of its scope.
class ScratchDir {
 public:
  explicit ScratchDir(const char* name) {
    const char* base = std::getenv("RINGCAST_BENCH_DIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + name + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) std::abort();
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// CPU time of the calling thread: recovery runs on it, and on a loaded machine wall time
// mostly measures the run queue.
double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

StoreOptions store_options(const std::string& path, SyncPolicy sync) {
  StoreOptions o;
  o.path = path;
  o.sync = sync;
  o.sync_interval = milliseconds(10);
  if (const char* wal_mb = std::getenv("RINGCAST_BENCH_WAL_MB"))  // the crash-restart knob
    o.max_total_wal_bytes = static_cast<size_t>(std::atoi(wal_mb)) << 20;
  return o;
}

std::unique_ptr<RocksStore> must_open(const StoreOptions& o) {
  auto r = RocksStore::open(o);
  if (!r) {
    std::fprintf(stderr, "open %s: %s\n", o.path.c_str(), r.error().message);
    std::abort();
  }
  return std::move(*r);
}

Attempt sample_attempt(DeliveryId d, uint16_t number) {
  Attempt a;
  a.delivery = d;
  a.number = number;
  a.ladder = Ladder::kFast;
  a.outcome = Outcome::kRetryable;
  a.code = ErrorCode::http(503);
  a.http_status = 503;
  a.request_written = true;
  a.started_at = kT0 + milliseconds(number * 1000);
  a.duration = milliseconds(37);
  a.timings = {microseconds(0), microseconds(310), microseconds(1900), milliseconds(35),
               milliseconds(37)};
  a.response_prefix = "{\"error\":\"service unavailable\",\"retry\":true,\"request\":\"r-8f2c\"}";
  return a;
}

// ---- attempts: store (interval) vs raw RocksDB, pairwise -------------------------------------

// The peer: plain RocksDB, one column family with exactly the options of the store's attempts
// family, the same keys and value sizes, a WriteBatch per 256 records, and a single WAL fsync
// at the end of each round (the store pays one per 10 ms during the round).
struct RawPeer {
  rocksdb::DB* db = nullptr;
  explicit RawPeer(const std::string& path) {
    StoreOptions so = store_options(path, SyncPolicy::kInterval);
    rocksdb::Options o(
        db_options(so),
        column_family_options(kCfAttempts, so, rocksdb::NewLRUCache(so.block_cache_bytes)));
    o.create_if_missing = true;
    if (!rocksdb::DB::Open(o, path, &db).ok()) std::abort();
  }
  ~RawPeer() { delete db; }
};

void BM_AttemptWrites_IntervalVsRaw(benchmark::State& state) {
  ScratchDir dir_store("ringcast-bench-store"), dir_raw("ringcast-bench-raw");
  auto store = must_open(store_options(dir_store.path(), SyncPolicy::kInterval));
  RawPeer raw(dir_raw.path());

  Mutations m;
  for (size_t i = 0; i < kBatch; ++i) m.attempts.push_back(sample_attempt(0, 1));
  std::string value;
  encode_attempt(m.attempts[0], value);  // the peer writes records of the very same size
  uint64_t next = 1;
  double store_s = 0, raw_s = 0, store_cpu = 0, raw_cpu = 0;
  uint64_t records = 0;
  for (auto _ : state) {
    // The store: 100 batches, then wait until all of it is durable.
    const double c0 = thread_cpu_s();
    auto t0 = SteadyClock::now();
    const uint64_t first = next;
    uint64_t seq = 0;
    for (int b = 0; b < kBatchesPerRound; ++b) {
      for (auto& a : m.attempts)
        a.delivery = make_id(static_cast<Partition>(next % 256), next), ++next;
      auto r = store->write(m);
      if (!r) state.SkipWithError("store write failed");
      seq = r ? *r : seq;
    }
    if (!store->wait_durable(seq, seconds(60))) state.SkipWithError("not durable");
    auto t1 = SteadyClock::now();
    const double c1 = thread_cpu_s();
    // The peer, same records.
    uint64_t rnext = first;
    for (int b = 0; b < kBatchesPerRound; ++b) {
      rocksdb::WriteBatch wb;
      for (size_t i = 0; i < kBatch; ++i, ++rnext) {
        auto k = attempt_key(make_id(static_cast<Partition>(rnext % 256), rnext), 1);
        wb.Put(rocksdb::Slice(k.data, kAttemptKeyBytes), value);
      }
      if (!raw.db->Write(rocksdb::WriteOptions(), &wb).ok()) state.SkipWithError("raw failed");
    }
    if (!raw.db->SyncWAL().ok()) state.SkipWithError("raw sync failed");
    auto t2 = SteadyClock::now();
    raw_cpu += thread_cpu_s() - c1;
    store_cpu += c1 - c0;
    store_s += std::chrono::duration<double>(t1 - t0).count();
    raw_s += std::chrono::duration<double>(t2 - t1).count();
    records += kBatch * kBatchesPerRound;
  }
  state.counters["store_rec_per_s"] = static_cast<double>(records) / store_s;
  state.counters["raw_rec_per_s"] = static_cast<double>(records) / raw_s;
  state.counters["ratio_store_vs_raw"] = raw_s / store_s;
  // Load-robust view: records per CPU-second of the writing thread (the store's sync thread
  // is not included; it mostly sleeps in fsync).
  state.counters["store_rec_per_cpu_s"] = static_cast<double>(records) / store_cpu;
  state.counters["raw_rec_per_cpu_s"] = static_cast<double>(records) / raw_cpu;
  state.counters["value_bytes"] = static_cast<double>(value.size());
  state.SetItemsProcessed(static_cast<int64_t>(records * 2));
}
BENCHMARK(BM_AttemptWrites_IntervalVsRaw)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20)
    ->UseRealTime();

// Two shards writing at once through one store (RocksDB groups their batches).
void BM_AttemptWrites_Interval_2Writers(benchmark::State& state) {
  ScratchDir dir("ringcast-bench-2w");
  auto store = must_open(store_options(dir.path(), SyncPolicy::kInterval));
  uint64_t records = 0;
  double secs = 0;
  for (auto _ : state) {
    auto t0 = SteadyClock::now();
    std::vector<std::thread> ts;
    for (int w = 0; w < 2; ++w) {
      ts.emplace_back([&, w] {
        Mutations m;
        for (size_t i = 0; i < kBatch; ++i) m.attempts.push_back(sample_attempt(0, 1));
        uint64_t seq = 0;
        static std::atomic<uint64_t> next{1};
        for (int b = 0; b < kBatchesPerRound; ++b) {
          for (auto& a : m.attempts) {
            uint64_t n = next.fetch_add(1);
            a.delivery = make_id(static_cast<Partition>(w), n);
          }
          auto r = store->write(m);
          if (r) seq = *r;
        }
        store->wait_durable(seq, seconds(60));
      });
    }
    for (auto& t : ts) t.join();
    secs += std::chrono::duration<double>(SteadyClock::now() - t0).count();
    records += 2 * kBatch * kBatchesPerRound;
  }
  state.counters["store_rec_per_s"] = static_cast<double>(records) / secs;
  state.SetItemsProcessed(static_cast<int64_t>(records));
}
BENCHMARK(BM_AttemptWrites_Interval_2Writers)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10)
    ->UseRealTime();

void BM_AttemptWrites_Always(benchmark::State& state) {
  ScratchDir dir("ringcast-bench-always");
  auto store = must_open(store_options(dir.path(), SyncPolicy::kAlways));
  Mutations m;
  for (size_t i = 0; i < kBatch; ++i) m.attempts.push_back(sample_attempt(0, 1));
  uint64_t next = 1;
  for (auto _ : state) {
    for (auto& a : m.attempts)
      a.delivery = make_id(static_cast<Partition>(next % 256), next), ++next;
    auto r = store->write(m);
    if (!r || store->durable_seq() < *r) state.SkipWithError("not durable on return");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
  state.counters["batch"] = kBatch;
}
BENCHMARK(BM_AttemptWrites_Always)->Unit(benchmark::kMicrosecond)->MinTime(3.0)->UseRealTime();

// ---- bytes on disk per delivery ---------------------------------------------------------------

std::string json_payload(std::mt19937_64& rng, bool random_bytes) {
  static const char* kWords[] = {"paid",      "settled",  "merchant", "order",   "customer",
                                 "amount",    "currency", "EUR",      "USD",     "invoice",
                                 "line_item", "quantity", "shipping", "address", "Berlin",
                                 "Kyiv",      "status",   "metadata"};
  auto hex = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back("0123456789abcdef"[rng() % 16]);
    return s;
  };
  std::string p = "{\"id\":\"evt_" + hex(24) + "\",\"type\":\"payment.status_changed\"," +
                  "\"data\":{\"payment\":\"pay_" + hex(24) +
                  "\",\"amount\":" + std::to_string(rng() % 100000) +
                  ",\"status\":\"paid\",\"customer\":\"cus_" + hex(16) + "\",\"notes\":\"";
  while (p.size() < 1020) {
    if (random_bytes) {
      p += hex(16);
    } else {
      p += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
      p += ' ';
    }
  }
  p.resize(1020);
  return p + "\"}}";
}

void BM_BytesOnDiskPerDelivery(benchmark::State& state) {
  const bool random_bytes = state.range(0) != 0;
  constexpr int kDeliveries = 50'000;
  for (auto _ : state) {
    ScratchDir dir("ringcast-bench-bytes");
    auto store = must_open(store_options(dir.path(), SyncPolicy::kNone));
    std::mt19937_64 rng(42);
    std::vector<std::string> tenants;
    for (int t = 0; t < 200; ++t) tenants.push_back("tenant-" + std::to_string(t));
    std::vector<uint64_t> next(kPartitions, 1);
    Mutations intake, done;
    for (int i = 0; i < kDeliveries; ++i) {
      const std::string& tenant = tenants[rng() % tenants.size()];
      const Partition p = partition_of(tenant);
      Event e;
      e.seq = make_id(p, next[p]++);
      e.tenant = tenant;
      e.id = "order-" + std::to_string(i);
      e.type = "payment.status_changed";
      e.payload = json_payload(rng, random_bytes);
      e.created_at = kT0 + milliseconds(i);
      e.payload_hash = payload_hash(e.payload);
      Delivery d;
      d.id = make_id(p, next[p]++);
      d.event = e.seq;
      d.endpoint = make_id(p, 1 + rng() % 3);
      d.created_at = e.created_at;
      d.next_attempt_at = e.created_at;
      intake.events.push_back(e);
      intake.deliveries.push_back({d, tenant_hash(tenant), true});
      for (uint16_t n = 1; n <= 3; ++n) {
        Attempt a = sample_attempt(d.id, n);
        if (n == 3) {
          a.outcome = Outcome::kSuccess, a.code = {}, a.http_status = 200;
          a.response_prefix = "{\"ok\":true}";
        }
        done.attempts.push_back(a);
      }
      d.attempts = 3;
      d.status = DeliveryStatus::kDelivered;
      d.last_http_status = 200;
      done.deliveries.push_back({d, 0, false});
      if (intake.events.size() == 500) {
        if (!store->write(intake) || !store->write(done)) state.SkipWithError("write failed");
        intake.clear();
        done.clear();
      }
    }
    if (!intake.empty() && (!store->write(intake) || !store->write(done)))
      state.SkipWithError("write failed");
    if (!store->flush(/*compact=*/true)) state.SkipWithError("flush failed");
    const auto sz = store->sizes();
    state.counters["bytes_per_delivery"] = static_cast<double>(sz.sst_bytes) / kDeliveries;
    state.counters["raw_payload_bytes"] = 1024;
  }
}
BENCHMARK(BM_BytesOnDiskPerDelivery)
    ->Arg(0)
    ->Arg(1)
    ->ArgNames({"random_payload"})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

// ---- recovery of 1 M pending deliveries -------------------------------------------------------

struct KeepingVisitor final : RecoveryVisitor {
  std::vector<Delivery> kept;  // what a shard's timer wheel would hold
  uint64_t endpoints = 0, tenants = 0;
  void on_endpoint(const Endpoint&) override { ++endpoints; }
  void on_tenant(const Tenant&) override { ++tenants; }
  void on_delivery(const Delivery& d) override { kept.push_back(d); }
};

void BM_Recovery1MPending(benchmark::State& state) {
  constexpr int kPending = 1'000'000;
  constexpr int kPerEvent = 10;
  constexpr int kInFlight = 1000;  // open leases at the "crash"
  ScratchDir dir("ringcast-bench-recovery");
  {
    auto so = store_options(dir.path(), SyncPolicy::kNone);
    so.flush_on_close = false;  // like a crash: whatever is in memtables stays in the WAL
    auto store = must_open(so);
    std::mt19937_64 rng(7);
    std::vector<std::string> tenants;
    for (int t = 0; t < 1000; ++t) tenants.push_back("tenant-" + std::to_string(t));
    std::vector<uint64_t> next(kPartitions, 1);
    Mutations m;
    int written = 0;
    while (written < kPending) {
      const std::string& tenant = tenants[rng() % tenants.size()];
      const Partition p = partition_of(tenant);
      Event e;
      e.seq = make_id(p, next[p]++);
      e.tenant = tenant;
      e.id = "e" + std::to_string(written);
      e.type = "payment.status_changed";
      e.payload = json_payload(rng, false);
      e.created_at = kT0;
      e.payload_hash = payload_hash(e.payload);
      m.events.push_back(e);
      for (int k = 0; k < kPerEvent && written < kPending; ++k, ++written) {
        Delivery d;
        d.id = make_id(p, next[p]++);
        d.event = e.seq;
        d.endpoint = make_id(p, 1 + k);
        d.created_at = kT0;
        d.next_attempt_at = kT0 + seconds(rng() % 86400);
        d.attempts = static_cast<uint16_t>(rng() % 5);
        d.status = written < kInFlight ? DeliveryStatus::kInFlight : DeliveryStatus::kPending;
        m.deliveries.push_back({d, tenant_hash(tenant), true});
      }
      if (m.deliveries.size() >= 2000) {
        if (!store->write(m)) state.SkipWithError("write failed");
        m.clear();
      }
    }
    if (!m.empty() && !store->write(m)) state.SkipWithError("write failed");
    // No flush: a crashed daemon leaves memtables in the WAL; open replays them.
  }
  // Round 1: a start after a crash (the WAL is replayed, 1000 leases are open). The store is
  // then closed cleanly (flush_on_close), so round 2 is a start after a clean shutdown.
  int round = 0;
  for (auto _ : state) {
    const std::string tag = round++ == 0 ? "crash_" : "clean_";
    const double c0 = thread_cpu_s();
    auto t0 = SteadyClock::now();
    auto store = must_open(store_options(dir.path(), SyncPolicy::kInterval));
    auto t1 = SteadyClock::now();
    const double c1 = thread_cpu_s();
    KeepingVisitor v;
    v.kept.reserve(kPending);
    uint64_t leases = 0;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      auto st = store->recover(static_cast<Partition>(p), kT0 + days(1), v);
      if (!st)
        state.SkipWithError("recover failed");
      else
        leases += st->leases_expired;
    }
    auto t2 = SteadyClock::now();
    const double c2 = thread_cpu_s();
    if (v.kept.size() != static_cast<size_t>(kPending)) state.SkipWithError("lost deliveries");
    state.counters[tag + "open_cpu_s"] = c1 - c0;
    state.counters[tag + "recover_cpu_s"] = c2 - c1;
    state.counters[tag + "open_s"] = std::chrono::duration<double>(t1 - t0).count();
    state.counters[tag + "recover_s"] = std::chrono::duration<double>(t2 - t1).count();
    state.counters[tag + "total_s"] = std::chrono::duration<double>(t2 - t0).count();
    state.counters[tag + "leases"] = static_cast<double>(leases);
    state.counters["pending"] = static_cast<double>(v.kept.size());
  }
}
BENCHMARK(BM_Recovery1MPending)->Iterations(2)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace ringcast::storage

BENCHMARK_MAIN();
