// What persisting costs a delivery: the engine delivering the same backlog on its RocksDB store
// and on an in-memory store, against wrk sending the same request, in one run (docs/benchmarks.md
// "What persisting costs": the ratio against wrk per CPU-second).
//
//   bench_e2e_engine_store [--trials=5] [--n=30000] [--conns=32] [--seconds=2]
//                          [--sink=PATH] [--wrk=PATH] [--only=rocks|memory|wrk]
//                          [--max-allocs=X] [--ordered=K]
//
// Each trial runs three peers against a fresh ringcast-sink pinned to CPU 1 (signatures
// verified), in an order that rotates from trial to trial; this process and all its threads
// are pinned to CPU 0:
//   rocks   the engine (one shard, `interval` sync, the daemon's defaults) on storage::RocksStore
//           in a temp dir, delivering `n` pre-ingested 1 KB events to one endpoint with `conns`
//           requests in flight; deliveries per CPU-second of this process (RocksDB's background
//           threads included) from lifting the rate limit that held the backlog back to the
//           last durable result;
//   memory  the same engine and backlog on a store that keeps everything in memory and is
//           "durable" at once (the test MemoryStore behind a mutex): what the engine costs
//           without persisting anything;
//   wrk     `wrk -t1 -c<conns>`, one pre-signed request replayed for `seconds`.
// It prints each trial and the medians of the per-trial ratios rocks/wrk, memory/wrk and
// rocks/memory (the share of a delivery's CPU left when persisting is free). Loopback only.
// With --ordered=K a fourth peer, `ordered`, is the rocks peer with its endpoint ordered per key
// (SPEC R13) and the events spread over K ordering keys; the median of ordered/rocks is printed
// (docs/benchmarks.md "Ordered delivery").
//
// It also counts the heap allocations of the whole process (every thread) in each engine
// peer's timed window, per delivery: malloc, calloc and realloc are interposed here and
// counted before glibc's own run (not in sanitizer builds, which interpose them themselves).
// With --max-allocs=X it fails (exit 1) when the median per delivery of either engine peer is
// above X: the hot path's allocations are a figure the benchmark holds.
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bench/support/loopback_peers.h"
#include "engine/build.h"
#include "engine/config.h"
#include "engine/embedded.h"
#include "engine/engine_impl.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/locked_store.h"

// ---- allocation counting ---------------------------------------------------------------------

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RINGCAST_BENCH_COUNT_ALLOCS 0
#else
#define RINGCAST_BENCH_COUNT_ALLOCS 1
#endif

namespace {
std::atomic<uint64_t> g_allocs{0};

// RINGCAST_BENCH_ALLOC_STACKS=1: every 16th allocation of a timed window records its call stack;
// the most frequent ones are printed at the end, as object+offset of each call (`addr2line -f
// -C -i -e <object> <offset>` names them). To find what allocates on the hot path.
constexpr int kStackDepth = 12;
constexpr uint32_t kMaxSamples = 1 << 16;
struct StackSample {
  void* pcs[kStackDepth];
  int depth;
};
std::atomic<bool> g_sampling{false};
std::atomic<uint32_t> g_samples_taken{0};
StackSample g_samples[kMaxSamples];
thread_local bool t_in_sample = false;

void maybe_sample(uint64_t count) {
  if (!g_sampling.load(std::memory_order_relaxed) || t_in_sample || (count & 15) != 0) return;
  t_in_sample = true;  // backtrace() may allocate (the first call loads the unwinder)
  const uint32_t i = g_samples_taken.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxSamples) g_samples[i].depth = ::backtrace(g_samples[i].pcs, kStackDepth);
  t_in_sample = false;
}

void print_alloc_stacks() {
  const uint32_t n = std::min(g_samples_taken.load(), kMaxSamples);
  std::map<std::vector<void*>, uint32_t> by_stack;
  for (uint32_t i = 0; i < n; ++i) {
    // Frame 0 is maybe_sample, 1 the interposed function: the caller's stack starts at 2.
    const StackSample& s = g_samples[i];
    if (s.depth <= 2) continue;
    ++by_stack[std::vector<void*>(s.pcs + 2, s.pcs + s.depth)];
  }
  std::vector<std::pair<uint32_t, const std::vector<void*>*>> top;
  for (const auto& [stack, count] : by_stack) top.emplace_back(count, &stack);
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::fprintf(stderr, "allocation stacks (%u samples, 1 in 16):\n", n);
  for (size_t i = 0; i < std::min<size_t>(top.size(), 25); ++i) {
    std::fprintf(stderr, "  %u:", top[i].first);
    for (void* pc : *top[i].second) {
      Dl_info info{};
      if (::dladdr(pc, &info) != 0 && info.dli_fname != nullptr) {
        const char* base = std::strrchr(info.dli_fname, '/');
        std::fprintf(stderr, " %s+%#lx", base ? base + 1 : info.dli_fname,
                     static_cast<unsigned long>(static_cast<char*>(pc) -
                                                static_cast<char*>(info.dli_fbase) - 1));
      } else {
        std::fprintf(stderr, " %p", pc);
      }
    }
    std::fprintf(stderr, "\n");
  }
}
}  // namespace

#if RINGCAST_BENCH_COUNT_ALLOCS
extern "C" {
void* __libc_malloc(size_t n);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t n);
// glibc's free() takes what its __libc_* functions return: only the counting is added.
void* malloc(size_t n) {
  maybe_sample(g_allocs.fetch_add(1, std::memory_order_relaxed));
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  maybe_sample(g_allocs.fetch_add(1, std::memory_order_relaxed));
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  maybe_sample(g_allocs.fetch_add(1, std::memory_order_relaxed));
  return __libc_realloc(p, n);
}
}
#endif

namespace ringcast::bench {
namespace {

using test::await;  // a bounded wait for an engine callback

struct Args {
  int trials = 5;
  int n = 30000;
  int conns = 32;
  int seconds = 2;
  std::string sink;
  std::string wrk = "/usr/bin/wrk";
  std::string only;        // rocks | memory | wrk: that peer alone, no ratios (for profiling)
  double max_allocs = -1;  // per delivery, median of each engine peer; < 0: not checked
  int ordered_keys = 0;    // > 0: the `ordered` peer, over this many ordering keys
};

[[noreturn]] void die(const std::string& what, const Error& e) {
  std::cerr << "bench_e2e_engine_store: " << what << ": " << e.message << "\n";
  std::exit(1);
}

// Counts the deliveries that finished (their result durable), from the shard thread. Only the
// last one wakes the waiting thread: a wake per delivery would cost the engine a futex call and
// a context switch on its own core each time.
struct Finished {
  std::atomic<uint64_t> delivered{0}, other{0}, wake_at{~uint64_t{0}};
  std::mutex mu;
  std::condition_variable cv;
  uint64_t total() const { return delivered.load() + other.load(); }
};

// With RINGCAST_BENCH_PERF_CTL=<fifo> (perf record -D -1 --control=fifo:<fifo>), the timed
// windows of the engine peers are the only parts profiled.
void perf_ctl(const char* command) {
  static const char* fifo = std::getenv("RINGCAST_BENCH_PERF_CTL");
  if (fifo == nullptr) return;
  if (FILE* f = std::fopen(fifo, "w")) {
    std::fprintf(f, "%s\n", command);
    std::fclose(f);
  }
}

// One engine peer: start on `store_kind`, pre-ingest `n` events behind a 1/s rate limit, lift
// it, and time the backlog's delivery.
PeerResult run_engine(const Args& a, const std::string& store_kind, uint16_t port,
                      const std::string& dir) {
  Config cfg;
  cfg.engine.shards = 1;
  cfg.storage.data_dir = dir;
  cfg.transport.allow_http = true;
  cfg.transport.allow_private = {"127.0.0.0/8"};
  cfg.transport.pool_size = static_cast<uint32_t>(a.conns);
  cfg.validate();
  engine::EngineOptions eopts = engine::engine_options(cfg);
  Finished fin;
  eopts.on_delivery_done = [&fin](const Delivery& d) {
    (d.status == DeliveryStatus::kDelivered ? fin.delivered : fin.other)++;
    if (fin.total() >= fin.wake_at.load()) {
      std::lock_guard lock(fin.mu);
      fin.cv.notify_all();
    }
  };

  std::unique_ptr<engine::Embedded> embedded;
  std::unique_ptr<test::LockedStore> memory;  // the MemoryStore behind one mutex
  std::unique_ptr<engine::EngineImpl> on_memory;
  Engine* api = nullptr;
  const bool ordered = store_kind == "ordered";
  if (store_kind == "rocks" || ordered) {
    auto opened = engine::Embedded::open(engine::store_options(cfg), std::move(eopts));
    if (!opened.ok()) die("open the RocksDB store", opened.error());
    embedded = std::move(*opened);
    api = &embedded->engine();
  } else {
    memory = std::make_unique<test::LockedStore>();
    auto started = engine::EngineImpl::start(std::move(eopts), *memory);
    if (!started.ok()) die("start on the memory store", started.error());
    on_memory = std::move(*started);
    api = on_memory.get();
  }

  const std::string tenant = "bench";
  EndpointSpec spec;
  spec.url = "http://127.0.0.1:" + std::to_string(port) + "/deliv";
  spec.secret = kSecret;
  spec.max_in_flight = static_cast<uint32_t>(a.conns);
  spec.rate_limit = RateLimit{1, 1};  // holds the backlog while it is taken in
  if (ordered) spec.ordering = Ordering::kPerKey;
  auto ep = await<Endpoint>([&](auto done) { api->create_endpoint(tenant, spec, done); });
  if (!ep.ok()) die("create endpoint", ep.error());

  const std::string body = make_body();
  constexpr int kBatch = 1000;
  for (int first = 0; first < a.n; first += kBatch) {
    std::vector<EventInput> batch;
    for (int i = first; i < std::min(a.n, first + kBatch); ++i) {
      batch.push_back({tenant, "evt-" + std::to_string(i), "bench.event", body});
      if (ordered) batch.back().ordering_key = "key-" + std::to_string(i % a.ordered_keys);
    }
    auto rs = await<std::vector<Result<SubmitResult>>>([&](auto done) {
      api->submit_batch(std::move(batch),
                        [done](std::vector<Result<SubmitResult>> r) { done(std::move(r)); });
    });
    if (!rs.ok()) die("submit", rs.error());
    for (const auto& r : *rs) {
      if (!r.ok()) die("submit", r.error());
    }
  }

  const uint64_t before = fin.total();
  fin.wake_at = static_cast<uint64_t>(a.n);
  rusage r0{}, r1{};
  perf_ctl("enable");
  ::getrusage(RUSAGE_SELF, &r0);
  const uint64_t allocs0 = g_allocs.load(std::memory_order_relaxed);
  static const bool stacks = std::getenv("RINGCAST_BENCH_ALLOC_STACKS") != nullptr;
  g_sampling = stacks;
  const auto start = std::chrono::steady_clock::now();
  EndpointPatch lift;
  lift.rate_limit = RateLimit{};
  auto patched =
      await<Endpoint>([&](auto done) { api->update_endpoint(tenant, ep->id, lift, done); });
  if (!patched.ok()) die("lift the rate limit", patched.error());
  {
    std::unique_lock lock(fin.mu);
    const bool all = fin.cv.wait_for(lock, std::chrono::seconds(300),
                                     [&] { return fin.total() >= static_cast<uint64_t>(a.n); });
    if (!all || fin.other > 0) {
      std::cerr << "bench_e2e_engine_store: " << store_kind << ": " << fin.delivered.load()
                << " delivered, " << fin.other.load() << " not, of " << a.n << "\n";
      std::exit(1);
    }
  }
  const auto stop = std::chrono::steady_clock::now();
  const uint64_t allocs1 = g_allocs.load(std::memory_order_relaxed);
  g_sampling = false;
  ::getrusage(RUSAGE_SELF, &r1);
  perf_ctl("disable");

  PeerResult r;
  r.requests = static_cast<uint64_t>(a.n) - before;
  const double cpu = cpu_seconds(r1) - cpu_seconds(r0);
  const double n = static_cast<double>(r.requests);
  r.wall_rps = n / std::chrono::duration<double>(stop - start).count();
  r.req_per_cpu_s = n / cpu;
  r.user_us_per_req = 1e6 * (user_seconds(r1) - user_seconds(r0)) / n;
  r.sys_us_per_req = 1e6 * cpu / n - r.user_us_per_req;
  r.allocs_per_req = static_cast<double>(allocs1 - allocs0) / n;
  if (embedded) embedded->close();
  if (on_memory) on_memory->stop();
  return r;
}

int run(const Args& a) {
  pin_to(0);  // before the engine starts a thread: all of them stay on this core
  char tmpl[] = "/tmp/ringcast-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  std::vector<std::string> kinds = {"rocks", "memory", "wrk"};
  if (a.ordered_keys > 0) kinds.push_back("ordered");
  const int peers = static_cast<int>(kinds.size());
  std::vector<std::vector<double>> per_cpu(4), wall(4), allocs(4);
  for (int t = 0; t < a.trials; ++t) {
    for (int k = 0; k < peers; ++k) {
      const size_t which = static_cast<size_t>((t + k) % peers);  // rotating order
      if (!a.only.empty() && kinds[which] != a.only) continue;
      const int id = t * peers + k;
      Sink s = start_sink(a.sink, dir, id, 1);
      PeerResult r;
      if (kinds[which] == "wrk") {
        r = run_wrk({a.wrk, a.conns, a.seconds, 0, s.port, false, dir});
      } else {
        r = run_engine(a, kinds[which], s.port, dir + "/data-" + std::to_string(id));
      }
      const std::string stats = stop_sink(s);
      const uint64_t seen = json_number(stats, "requests");
      const uint64_t bad = json_number(stats, "bad_signatures");
      if (bad > 0 || r.requests == 0 || (kinds[which] != "wrk" && seen < r.requests)) {
        std::cerr << "bench_e2e_engine_store: trial " << t << " " << kinds[which] << ": "
                  << r.requests << " counted, the sink saw " << seen << " (bad signatures " << bad
                  << "); see " << dir << "\n";
        return 1;
      }
      std::string allocs_text = "";
      if (kinds[which] != "wrk" && RINGCAST_BENCH_COUNT_ALLOCS) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "  allocs %.2f each", r.allocs_per_req);
        allocs_text = buf;
      }
      std::printf(
          "  trial %d %-7s wall %9.0f /s  %9.0f per CPU-s (user %.1f + sys %.1f us each)%s  "
          "sink saw %llu (bad signatures %llu)\n",
          t, kinds[which].c_str(), r.wall_rps, r.req_per_cpu_s, r.user_us_per_req, r.sys_us_per_req,
          allocs_text.c_str(), static_cast<unsigned long long>(seen),
          static_cast<unsigned long long>(bad));
      std::fflush(stdout);
      per_cpu[which].push_back(r.req_per_cpu_s);
      wall[which].push_back(r.wall_rps);
      allocs[which].push_back(r.allocs_per_req);
    }
  }
  // The hot path's allocations (see the top of the file), checked before the ratios.
  bool allocs_ok = true;
  if (RINGCAST_BENCH_COUNT_ALLOCS) {
    for (size_t k = 0; k < 2; ++k) {
      if (allocs[k].empty()) continue;
      const double m = median(allocs[k]);
      std::printf("  %s: %.2f heap allocations per delivery (median)\n", kinds[k].c_str(), m);
      if (a.max_allocs >= 0 && m > a.max_allocs) {
        std::fprintf(stderr,
                     "bench_e2e_engine_store: %s: %.2f allocations per delivery, more than "
                     "--max-allocs=%.2f\n",
                     kinds[k].c_str(), m, a.max_allocs);
        allocs_ok = false;
      }
    }
  }
  if (g_samples_taken.load() > 0) print_alloc_stacks();
  if (!allocs_ok) return 1;
  if (!a.only.empty()) return 0;
  // The three peers of a trial ran back to back: their ratios cancel the machine's drift.
  std::vector<double> rocks_wrk, memory_wrk, rocks_memory, ordered_rocks;
  for (int t = 0; t < a.trials; ++t) {
    const auto i = static_cast<size_t>(t);
    rocks_wrk.push_back(per_cpu[0][i] / per_cpu[2][i]);
    memory_wrk.push_back(per_cpu[1][i] / per_cpu[2][i]);
    rocks_memory.push_back(per_cpu[0][i] / per_cpu[1][i]);
    if (a.ordered_keys > 0) ordered_rocks.push_back(per_cpu[3][i] / per_cpu[0][i]);
  }
  if (a.ordered_keys > 0) {
    std::printf(
        "  ordered per key (%d keys): %9.0f deliveries/s  %9.0f per CPU-s; median of per-trial "
        "ratios ordered/rocks %.3fx\n",
        a.ordered_keys, median(wall[3]), median(per_cpu[3]), median(ordered_rocks));
  }
  std::printf(
      "engine delivering %d pre-ingested 1 KB events, %d in flight, %d trials (median):\n"
      "  engine on RocksDB   %9.0f deliveries/s  %9.0f per CPU-s\n"
      "  engine on memory    %9.0f deliveries/s  %9.0f per CPU-s\n"
      "  wrk -t1 -c%-3d       %9.0f requests/s    %9.0f per CPU-s\n"
      "  median of per-trial ratios per CPU-second: rocks/wrk %.3fx, memory/wrk %.3fx, "
      "rocks/memory %.3fx\n",
      a.n, a.conns, a.trials, median(wall[0]), median(per_cpu[0]), median(wall[1]),
      median(per_cpu[1]), a.conns, median(wall[2]), median(per_cpu[2]), median(rocks_wrk),
      median(memory_wrk), median(rocks_memory));
  std::string cleanup = "rm -rf " + dir;
  return std::system(cleanup.c_str()) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ringcast::bench

int main(int argc, char** argv) {
  ringcast::bench::Args a;
  a.sink = ringcast::bench::self_dir() + "/../tools/ringcast-sink";
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&](const char* k) -> const char* {
      const size_t n = std::strlen(k);
      return s.compare(0, n, k) == 0 ? s.c_str() + n : nullptr;
    };
    if (auto v = val("--trials=")) {
      a.trials = std::atoi(v);
    } else if (auto v2 = val("--n=")) {
      a.n = std::atoi(v2);
    } else if (auto v3 = val("--conns=")) {
      a.conns = std::atoi(v3);
    } else if (auto v4 = val("--seconds=")) {
      a.seconds = std::atoi(v4);
    } else if (auto v5 = val("--sink=")) {
      a.sink = v5;
    } else if (auto v6 = val("--wrk=")) {
      a.wrk = v6;
    } else if (auto v7 = val("--only=")) {
      a.only = v7;
    } else if (auto v8 = val("--max-allocs=")) {
      a.max_allocs = std::atof(v8);
    } else if (auto v9 = val("--ordered=")) {
      a.ordered_keys = std::atoi(v9);
    } else {
      std::cerr << "bench_e2e_engine_store: unknown argument " << s << "\n";
      return 2;
    }
  }
  if (!a.only.empty() && a.only != "rocks" && a.only != "memory" && a.only != "wrk" &&
      a.only != "ordered") {
    std::cerr << "bench_e2e_engine_store: --only must be rocks, memory, wrk or ordered\n";
    return 2;
  }
  if (a.trials < 1 || a.n < 1 || a.conns < 1 || a.seconds < 1) {
    std::cerr << "bench_e2e_engine_store: --trials, --n, --conns and --seconds must be >= 1\n";
    return 2;
  }
  if (::access(a.sink.c_str(), X_OK) != 0 || ::access(a.wrk.c_str(), X_OK) != 0) {
    std::cerr << "bench_e2e_engine_store: need " << a.sink << " and " << a.wrk << "\n";
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  return ringcast::bench::run(a);
}
