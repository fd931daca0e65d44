// Timer wheel micro benchmarks: schedule, cancel and expire at 1 M and 10 M pending timers, wheel
// bytes per pending timer, memory of 10 M pending deliveries (Delivery + TimerEntry in one
// contiguous slab), with same-run peers: std::priority_queue (no cancel), an indexed binary
// min-heap (libuv / libevent style, supports cancel) and std::multimap.
//
// Workload: expiries uniform over (now, now + 30 days], a fixed seed. Every phase is timed by
// hand (UseManualTime, thread CPU time) so set-up is excluded; each reports ns per timer for
// the wheel and for each peer on the same expiries, and peer/wheel ratios (> 1: the wheel is
// faster). At 10 M the heap peers time their first 1 M pops / cancels (heap size 10 M..9 M)
// and the multimap peer is skipped, to keep the run short.
//   build-*/bench/bench_core_timer_wheel [--benchmark_filter=10000000]
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <new>
#include <queue>
#include <utility>
#include <vector>

#include "core/timer_wheel.h"
#include "core/types.h"

namespace ringcast {
namespace {

constexpr int64_t kNowMs = 1'767'225'600'000;  // 2026-01-01
constexpr int64_t kHorizonMs = int64_t{30} * 24 * 3600 * 1000;
constexpr size_t kMaxFirePerTurn = 1024;     // the shard loop's per-turn bound (STYLE 5)
constexpr size_t kMultimapMaxN = 1'000'000;  // std::multimap peer only up to this size (time)
// Heap peers cancel / pop at most this many of their N timers (per-op cost at size ~N; keeps
// the 10 M cases short). The wheel always does all N.
constexpr size_t kPeerOpsMax = 1'000'000;

// One pending delivery: the timer entry first (so TimerEntry* converts back), then the record.
struct Pending {
  TimerEntry timer;
  Delivery delivery;
};
static_assert(sizeof(Pending) == sizeof(TimerEntry) + sizeof(Delivery));
Pending* pending_of(TimerEntry* e) {
  return reinterpret_cast<Pending*>(e);
}

uint64_t splitmix64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A contiguous slab of pending deliveries in one anonymous mapping, 2 MiB aligned with
// transparent huge pages requested (what a shard's delivery slab would do).
class Slab {
 public:
  explicit Slab(size_t n) : n_(n), bytes_(n * sizeof(Pending)) {
    constexpr size_t kHuge = size_t{2} << 20;
    map_bytes_ = bytes_ + kHuge;
    map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) std::abort();
    const auto base = (reinterpret_cast<uintptr_t>(map_) + kHuge - 1) & ~(kHuge - 1);
    madvise(reinterpret_cast<void*>(base), bytes_, MADV_HUGEPAGE);
    pending_ = reinterpret_cast<Pending*>(base);
    for (size_t i = 0; i < n_; ++i) {
      Pending* s = new (&pending_[i]) Pending{};
      s->delivery.id = i;
    }
  }
  ~Slab() { munmap(map_, map_bytes_); }
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;

  Pending& operator[](size_t i) { return pending_[i]; }
  size_t size() const { return n_; }
  size_t bytes() const { return bytes_; }
  void reset_timers() {
    for (size_t i = 0; i < n_; ++i) pending_[i].timer = TimerEntry{};
  }

 private:
  size_t n_;
  size_t bytes_;
  size_t map_bytes_ = 0;
  void* map_ = nullptr;
  Pending* pending_ = nullptr;
};

std::vector<int64_t> make_expiries(size_t n, uint64_t seed) {
  std::vector<int64_t> v(n);
  for (auto& e : v) e = kNowMs + 1 + static_cast<int64_t>(splitmix64(&seed) % kHorizonMs);
  return v;
}

std::vector<uint32_t> make_permutation(size_t n, uint64_t seed) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(i);
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[splitmix64(&seed) % i]);
  return v;
}

// Phases are timed in this thread's CPU time: the build machine is shared, and wall time
// would charge the wheel for other processes' time slices.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double seconds_since(double t0) {
  return cpu_now() - t0;
}

size_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0;
  unsigned long resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// What the delivery callback does in every variant: read the record's id (the scheduler
// looks the delivery up when its timer fires; the id shares the entry's cache line).
inline void touch(Pending* s, uint64_t* sum) {
  *sum += s->delivery.id;
}

// --- peers -----------------------------------------------------------------------------------

// Peers' containers are sized and their pages touched before timing, like the wheel's slab.
template <class V>
void prefault(V* v, size_t n) {
  v->resize(n);
  v->clear();
}

struct HeapItem {
  int64_t expiry_ms;
  uint32_t slot;
};
struct HeapLater {
  bool operator()(const HeapItem& a, const HeapItem& b) const { return a.expiry_ms > b.expiry_ms; }
};
using PriorityQueue = std::priority_queue<HeapItem, std::vector<HeapItem>, HeapLater>;

// Indexed binary min-heap: pos_[slot] is the slot's heap index, so cancel is O(log n).
class IndexedHeap {
 public:
  explicit IndexedHeap(size_t n) : pos_(n, kNone) { prefault(&heap_, n); }
  void push(uint32_t slot, int64_t expiry_ms) {
    heap_.push_back({expiry_ms, slot});
    pos_[slot] = static_cast<uint32_t>(heap_.size() - 1);
    sift_up(heap_.size() - 1);
  }
  void remove(uint32_t slot) {
    const size_t i = pos_[slot];
    if (i == kNone) return;
    pos_[slot] = kNone;
    const HeapItem last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    heap_[i] = last;
    pos_[last.slot] = static_cast<uint32_t>(i);
    sift_up(i);
    sift_down(pos_[last.slot]);
  }
  size_t size() const { return heap_.size(); }
  size_t bytes() const { return heap_.capacity() * sizeof(HeapItem) + pos_.size() * 4; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  void place(size_t i, const HeapItem& it) {
    heap_[i] = it;
    pos_[it.slot] = static_cast<uint32_t>(i);
  }
  void sift_up(size_t i) {
    const HeapItem it = heap_[i];
    while (i > 0) {
      const size_t p = (i - 1) / 2;
      if (heap_[p].expiry_ms <= it.expiry_ms) break;
      place(i, heap_[p]);
      i = p;
    }
    place(i, it);
  }
  void sift_down(size_t i) {
    const HeapItem it = heap_[i];
    const size_t n = heap_.size();
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && heap_[c + 1].expiry_ms < heap_[c].expiry_ms) ++c;
      if (heap_[c].expiry_ms >= it.expiry_ms) break;
      place(i, heap_[c]);
      i = c;
    }
    place(i, it);
  }
  std::vector<HeapItem> heap_;
  std::vector<uint32_t> pos_;
};

using Multimap = std::multimap<int64_t, uint32_t>;

// --- shared set-up ---------------------------------------------------------------------------

// Builds and frees a multimap of n nodes so the timed one reuses malloc's memory (no page
// faults inside the timing; main() keeps glibc from trimming the heap).
void warm_multimap(size_t n) {
  Multimap mm;
  for (size_t i = 0; i < n; ++i) mm.emplace(static_cast<int64_t>(i), static_cast<uint32_t>(i));
}

struct Fixture {
  explicit Fixture(size_t n) : slab(n), expiries(make_expiries(n, 42)) {}
  Slab slab;
  std::vector<int64_t> expiries;

  std::unique_ptr<TimerWheel> fresh_wheel() {
    slab.reset_timers();
    return std::make_unique<TimerWheel>(kNowMs);
  }
  void schedule_all(TimerWheel* w) {
    for (size_t i = 0; i < slab.size(); ++i) w->schedule(&slab[i].timer, expiries[i]);
  }
};

// One fixture at a time, reused by consecutive benchmarks of the same size (the 10 M slab
// alone is 916 MiB; building it once saves seconds per case).
std::unique_ptr<Fixture>& fixture_slot() {
  static std::unique_ptr<Fixture> fx;
  return fx;
}
Fixture& fixture(size_t n) {
  auto& fx = fixture_slot();
  if (fx == nullptr || fx->slab.size() != n) {
    fx.reset();
    fx = std::make_unique<Fixture>(n);
  }
  return *fx;
}

void report(benchmark::State& state, const char* name, double seconds, size_t ops) {
  state.counters[name] = seconds * 1e9 / static_cast<double>(ops);
}
void report_ratio(benchmark::State& state, const char* name, double peer_s, double wheel_s) {
  state.counters[name] = peer_s / wheel_s;
}

// --- benchmarks ------------------------------------------------------------------------------

void BM_Schedule(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  Fixture& fx = fixture(n);
  double wheel_s = 0, pq_s = 0, mm_s = 0;
  size_t rounds = 0;
  for (auto _ : state) {
    auto w = fx.fresh_wheel();
    auto t0 = cpu_now();
    fx.schedule_all(w.get());
    const double s = seconds_since(t0);
    benchmark::DoNotOptimize(w->size());
    state.SetIterationTime(s);
    wheel_s += s;
    w.reset();

    std::vector<HeapItem> storage;
    prefault(&storage, n);
    PriorityQueue pq(HeapLater{}, std::move(storage));
    t0 = cpu_now();
    for (size_t i = 0; i < n; ++i) pq.push({fx.expiries[i], static_cast<uint32_t>(i)});
    pq_s += seconds_since(t0);
    benchmark::DoNotOptimize(pq.size());

    if (n <= kMultimapMaxN) {
      warm_multimap(n);
      Multimap mm;
      t0 = cpu_now();
      for (size_t i = 0; i < n; ++i) mm.emplace(fx.expiries[i], static_cast<uint32_t>(i));
      mm_s += seconds_since(t0);
      benchmark::DoNotOptimize(mm.size());
    }
    ++rounds;
  }
  const size_t ops = n * rounds;
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  report(state, "wheel_ns", wheel_s, ops);
  report(state, "pq_ns", pq_s, ops);
  report_ratio(state, "pq/wheel", pq_s, wheel_s);
  if (n <= kMultimapMaxN) {
    report(state, "multimap_ns", mm_s, ops);
    report_ratio(state, "multimap/wheel", mm_s, wheel_s);
  }
}

void BM_Cancel(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  Fixture& fx = fixture(n);
  const std::vector<uint32_t> order = make_permutation(n, 7);
  double wheel_s = 0, heap_s = 0, mm_s = 0;
  size_t rounds = 0;
  for (auto _ : state) {
    auto w = fx.fresh_wheel();
    fx.schedule_all(w.get());
    auto t0 = cpu_now();
    for (uint32_t i : order) w->cancel(&fx.slab[i].timer);
    const double s = seconds_since(t0);
    if (!w->empty()) state.SkipWithError("wheel not empty after cancelling everything");
    state.SetIterationTime(s);
    wheel_s += s;
    w.reset();

    {
      IndexedHeap heap(n);
      for (size_t i = 0; i < n; ++i) heap.push(static_cast<uint32_t>(i), fx.expiries[i]);
      const size_t k = std::min(n, kPeerOpsMax);
      t0 = cpu_now();
      for (size_t j = 0; j < k; ++j) heap.remove(order[j]);
      heap_s += seconds_since(t0) * static_cast<double>(n) / static_cast<double>(k);
      if (heap.size() != n - k) state.SkipWithError("heap size wrong");
    }
    if (n <= kMultimapMaxN) {
      warm_multimap(n);
      Multimap mm;
      std::vector<Multimap::iterator> its(n);
      for (size_t i = 0; i < n; ++i) its[i] = mm.emplace(fx.expiries[i], static_cast<uint32_t>(i));
      t0 = cpu_now();
      for (uint32_t i : order) mm.erase(its[i]);
      mm_s += seconds_since(t0);
    }
    ++rounds;
  }
  const size_t ops = n * rounds;
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  report(state, "wheel_ns", wheel_s, ops);
  report(state, "heap_ns", heap_s, ops);
  report_ratio(state, "heap/wheel", heap_s, wheel_s);
  if (n <= kMultimapMaxN) {
    report(state, "multimap_ns", mm_s, ops);
    report_ratio(state, "multimap/wheel", mm_s, wheel_s);
  }
}

// Drains every timer the way an idle shard loop does: sleep until next_expiry_ms(), advance
// there with the per-turn bound. The cost includes all cascading (amortised) and the slot
// searches of every wake-up.
void BM_Expire(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  Fixture& fx = fixture(n);
  double wheel_s = 0, pq_s = 0, mm_s = 0;
  size_t rounds = 0;
  uint64_t sum = 0;
  size_t wakeups = 0;
  uint64_t moves = 0;
  for (auto _ : state) {
    auto w = fx.fresh_wheel();
    fx.schedule_all(w.get());
    auto t0 = cpu_now();
    size_t fired = 0;
    while (!w->empty()) {
      const int64_t t = w->next_expiry_ms();
      fired += w->advance(t, kMaxFirePerTurn, [&](TimerEntry* e) { touch(pending_of(e), &sum); });
      ++wakeups;
    }
    const double s = seconds_since(t0);
    if (fired != n) state.SkipWithError("wheel fired the wrong count");
    moves += w->moves_total();
    state.SetIterationTime(s);
    wheel_s += s;
    w.reset();

    {
      std::vector<HeapItem> storage;
      prefault(&storage, n);
      PriorityQueue pq(HeapLater{}, std::move(storage));
      for (size_t i = 0; i < n; ++i) pq.push({fx.expiries[i], static_cast<uint32_t>(i)});
      const size_t k = std::min(n, kPeerOpsMax);
      t0 = cpu_now();
      for (size_t j = 0; j < k; ++j) {
        touch(&fx.slab[pq.top().slot], &sum);
        pq.pop();
      }
      pq_s += seconds_since(t0) * static_cast<double>(n) / static_cast<double>(k);
    }
    if (n <= kMultimapMaxN) {
      warm_multimap(n);
      Multimap mm;
      for (size_t i = 0; i < n; ++i) mm.emplace(fx.expiries[i], static_cast<uint32_t>(i));
      t0 = cpu_now();
      while (!mm.empty()) {
        touch(&fx.slab[mm.begin()->second], &sum);
        mm.erase(mm.begin());
      }
      mm_s += seconds_since(t0);
    }
    ++rounds;
  }
  benchmark::DoNotOptimize(sum);
  const size_t ops = n * rounds;
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  report(state, "wheel_ns", wheel_s, ops);
  report(state, "pq_ns", pq_s, ops);
  report_ratio(state, "pq/wheel", pq_s, wheel_s);
  if (n <= kMultimapMaxN) {
    report(state, "multimap_ns", mm_s, ops);
    report_ratio(state, "multimap/wheel", mm_s, wheel_s);
  }
  state.counters["moves/timer"] = static_cast<double>(moves) / static_cast<double>(ops);
  state.counters["wakeups"] = static_cast<double>(wakeups) / static_cast<double>(rounds);
}

// Memory of N pending deliveries: the slab (Delivery + TimerEntry per pending delivery) plus the
// wheel. Counters in bytes: wheel overhead per pending timer ((sizeof(TimerWheel) + N * 24) / N),
// pending-delivery size (slot_B), total MiB (computed), and the resident-set growth actually
// measured.
void BM_Memory(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  fixture_slot().reset();
  double total_mib = 0, rss_mib = 0;
  for (auto _ : state) {
    const auto t0 = cpu_now();
    const size_t rss0 = rss_bytes();
    auto slab = std::make_unique<Slab>(n);
    auto w = std::make_unique<TimerWheel>(kNowMs);
    uint64_t seed = 42;
    for (size_t i = 0; i < n; ++i) {
      (*slab)[i].timer = TimerEntry{};
      w->schedule(&(*slab)[i].timer,
                  kNowMs + 1 + static_cast<int64_t>(splitmix64(&seed) % kHorizonMs));
    }
    const size_t rss1 = rss_bytes();
    state.SetIterationTime(seconds_since(t0));
    total_mib = static_cast<double>(slab->bytes() + sizeof(TimerWheel)) / (1 << 20);
    rss_mib = static_cast<double>(rss1 - rss0) / (1 << 20);
    benchmark::DoNotOptimize(w->size());
  }
  const double nd = static_cast<double>(n);
  state.counters["wheel_B/timer"] =
      (static_cast<double>(sizeof(TimerWheel)) + nd * sizeof(TimerEntry)) / nd;
  state.counters["slot_B"] = static_cast<double>(sizeof(Pending));
  state.counters["total_MiB"] = total_mib;
  state.counters["rss_MiB"] = rss_mib;
  state.counters["total/1GiB"] = total_mib / 1024.0;
  state.counters["wheel_struct_B"] = static_cast<double>(sizeof(TimerWheel));
  // Peers' per-timer bytes for context (container only, before allocator overhead):
  // a priority_queue item 16 B (no cancel); an indexed heap 16 B + 4 B position;
  // a multimap node 48 B (+ ~16 B malloc) + 8 B stored iterator for cancel.
  state.counters["pq_B/timer"] = static_cast<double>(sizeof(HeapItem));
  state.counters["heap_B/timer"] = static_cast<double>(sizeof(HeapItem) + 4);
}

constexpr int64_t k1M = 1'000'000;
constexpr int64_t k10M = 10'000'000;

// All 1 M cases first, then all 10 M cases: consecutive cases share the fixture.
#define RINGCAST_WHEEL_BENCH(fn, n, iters) \
  BENCHMARK(fn)->Arg(n)->Iterations(iters)->UseManualTime()->Unit(benchmark::kMillisecond)
RINGCAST_WHEEL_BENCH(BM_Schedule, k1M, 2);
RINGCAST_WHEEL_BENCH(BM_Cancel, k1M, 2);
RINGCAST_WHEEL_BENCH(BM_Expire, k1M, 2);
RINGCAST_WHEEL_BENCH(BM_Schedule, k10M, 1);
RINGCAST_WHEEL_BENCH(BM_Cancel, k10M, 1);
RINGCAST_WHEEL_BENCH(BM_Expire, k10M, 1);
RINGCAST_WHEEL_BENCH(BM_Memory, k10M, 1);

}  // namespace
}  // namespace ringcast

int main(int argc, char** argv) {
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // keep freed peer nodes for reuse (see warm_multimap)
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
