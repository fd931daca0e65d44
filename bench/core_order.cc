// What ordered delivery costs in the scheduler (SPEC R13; docs/benchmarks.md "Ordered
// delivery"), each against a same-run peer:
//
//   bench_core_order [--trials=5] [--keys=10000] [--n=200000] [--memory-keys=1000000]
//
// 1. Memory: `memory-keys` distinct keys waiting on a per_key endpoint (each a head and one
//    delivery behind it) against the same deliveries on an unordered endpoint, each filled in a
//    child process of its own: the growth of the heap in use (mallinfo2) and of the resident
//    set (/proc/self/statm), per key. What a waiting key costs beyond its deliveries.
// 2. Throughput: `n` deliveries over `keys` active keys on a per_key endpoint against the same
//    on an unordered endpoint (the events carry the same keys): the scheduler's loop — fan-out,
//    poll, a 200 for every send — in deliveries per CPU-second of this thread; the ratio
//    ordered / unordered, median of interleaved trials.
// 3. Isolation: the ordered run again, with one more key whose head fails every attempt (503;
//    that key also gets 5 % of the events, which wait behind it) against the ordered run without
//    it: deliveries of the other keys per CPU-second; the ratio.
// Pure scheduler: no store, no sockets (their costs are in bench_e2e_engine_store --ordered).
#include <malloc.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/policy.h"
#include "core/scheduler.h"
#include "tests/core/scheduler_test_util.h"

namespace ringcast {
namespace {

const WallTime kT0 = test::kSchedT0;
using test::SeqIds;

double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

size_t resident_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

size_t heap_in_use() {
  struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct World {
  PolicyRegistry reg;
  std::unique_ptr<Scheduler> s;
  SeqIds ids;
  Mutations m;
  WallTime now = kT0;
  EndpointId ep = 0;
  EventSeq next_event = 0;

  World(Ordering o, uint32_t max_in_flight) {
    SchedulerOptions opts;
    opts.max_sends_per_poll = 4096;
    s = std::make_unique<Scheduler>(opts, reg, 7, now);
    Endpoint e;
    e.id = make_id(partition_of("bench"), 1);
    e.tenant = "bench";
    e.url = "https://example.com/hook";
    e.policy = "xhub";
    e.ordering = o;
    e.max_in_flight = max_in_flight;
    if (!s->create_endpoint(e, now, m).ok()) std::abort();
    ep = e.id;
    m.clear();
  }
  void submit(const std::string& key) {
    Event ev = proto;  // copies: GCC 12's -Wrestrict misfires on assigning short literals here
    ev.seq = make_id(partition_of("bench"), 1'000'000'000 + ++next_event);
    ev.ordering_key = key;
    s->fan_out(std::move(ev), now, ids, m);
  }
  const Event proto = [] {
    Event e;
    e.tenant = std::string("bench");
    e.id = std::string("e");
    e.type = std::string("order.updated");
    return e;
  }();
};

// 1. Heap bytes per waiting key beyond its deliveries.
void memory(size_t keys) {
  struct Grown {
    size_t heap = 0, rss = 0;
    uint64_t table = 0;
  };
  // In a child of its own, so that one fill's freed memory does not flatter the next one's RSS.
  auto in_child = [&](auto fill) -> Grown {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const Grown g = fill();
      if (::write(fds[1], &g, sizeof g) != static_cast<ssize_t>(sizeof g)) ::_exit(1);
      ::_exit(0);
    }
    ::close(fds[1]);
    Grown g;
    if (::read(fds[0], &g, sizeof g) != static_cast<ssize_t>(sizeof g)) std::abort();
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return g;
  };
  auto fill = [&](Ordering o) -> Grown {
    const size_t before = heap_in_use();
    const size_t rss_before = resident_bytes();
    auto w = std::make_unique<World>(o, 1);
    std::string key;
    for (int round = 0; round < 2; ++round) {
      for (size_t k = 0; k < keys; ++k) {
        key = "order-";
        key += std::to_string(k);
        w->submit(key);
        if (w->m.events.size() >= 4096) w->m.clear();
      }
    }
    w->m.clear();
    w->m.events.shrink_to_fit();
    w->m.deliveries.shrink_to_fit();
    Grown g;
    g.heap = heap_in_use() - before;
    g.rss = resident_bytes() - rss_before;
    g.table = w->s->stats().order_bytes;
    if (o == Ordering::kPerKey && w->s->stats().order_waiting != keys) std::abort();
    return g;
  };
  const Grown plain = in_child([&] { return fill(Ordering::kNone); });
  const Grown ordered = in_child([&] { return fill(Ordering::kPerKey); });
  auto per_key = [&](size_t a, size_t b) {
    return (static_cast<double>(b) - static_cast<double>(a)) / static_cast<double>(keys);
  };
  std::printf(
      "memory: %zu keys waiting (%zu deliveries): heap %zu B unordered, %zu B ordered: %.1f B "
      "per waiting key (key table %.1f B of it); RSS %zu B unordered, %zu B ordered: %.1f B "
      "per waiting key\n",
      keys, 2 * keys, plain.heap, ordered.heap, per_key(plain.heap, ordered.heap),
      static_cast<double>(ordered.table) / static_cast<double>(keys), plain.rss, ordered.rss,
      per_key(plain.rss, ordered.rss));
}

// 2 and 3: `n` deliveries over `keys` keys; `bad`: one more key that always fails, with n/20
// more events of its own. Deliveries of the good keys per CPU-second: of the whole run (fan-out
// included), and of the sending loop alone (after the fan-out: what the failing key could slow).
struct Rates {
  double all = 0, sending = 0;
};
Rates throughput(Ordering o, size_t keys, size_t n, bool bad) {
  World w(o, 64);
  std::vector<std::string> names(keys);
  for (size_t k = 0; k < keys; ++k) {
    names[k] = "order-";  // appended: GCC 12's -Wrestrict misfires on literal + string
    names[k] += std::to_string(k);
  }
  const double c0 = thread_cpu_s();
  size_t good = 0, bad_sent = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bad && i % 20 == 0) w.submit("failing");
    w.submit(names[i % keys]);
    ++good;
    if (w.m.events.size() >= 4096) w.m.clear();
  }
  const double c1 = thread_cpu_s();
  std::vector<SendCommand> out;
  size_t delivered = 0;
  TransportResult ok;
  ok.connect_attempted = ok.request_written = ok.response_received = true;
  ok.http_status = 200;
  TransportResult fail = ok;
  fail.http_status = 503;
  for (int turns = 0; delivered < good && turns < 10'000'000; ++turns) {
    out.clear();
    w.s->poll(w.now, out, w.m);
    for (const SendCommand& c : out) {
      // The failing key's events: one before every 20th good one (World::submit numbers them).
      const bool is_bad =
          bad && (c.event - make_id(partition_of("bench"), 1'000'000'000)) % 21 == 1;
      if (is_bad) ++bad_sent;
      if (w.s->on_result(c, is_bad ? fail : ok, w.now, w.now, w.m).ended_as ==
              DeliveryStatus::kDelivered &&
          !is_bad)
        ++delivered;
    }
    if (w.m.deliveries.size() >= 4096) w.m.clear();
    w.now += milliseconds(1);  // the failing head's retries come due now and then
  }
  (void)bad_sent;
  const double c2 = thread_cpu_s();
  if (delivered < good) {
    std::fprintf(stderr, "bench_core_order: %zu of %zu delivered\n", delivered, good);
    std::exit(1);
  }
  return Rates{static_cast<double>(good) / (c2 - c0), static_cast<double>(good) / (c2 - c1)};
}

int run(int argc, char** argv) {
  int trials = 5;
  size_t keys = 10000, n = 200000, memory_keys = 1000000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto num = [&](const char* flag) -> long {
      return a.rfind(flag, 0) == 0 ? std::atol(a.c_str() + std::string(flag).size()) : -1;
    };
    if (long v = num("--trials="); v > 0) {
      trials = static_cast<int>(v);
    } else if (long v2 = num("--keys="); v2 > 0) {
      keys = static_cast<size_t>(v2);
    } else if (long v3 = num("--n="); v3 > 0) {
      n = static_cast<size_t>(v3);
    } else if (long v4 = num("--memory-keys="); v4 > 0) {
      memory_keys = static_cast<size_t>(v4);
    } else {
      std::fprintf(stderr,
                   "usage: bench_core_order [--trials=5] [--keys=10000] [--n=200000] "
                   "[--memory-keys=1000000]\n");
      return 2;
    }
  }
  memory(memory_keys);
  std::vector<double> ratio, isolation;
  for (int t = 0; t < trials; ++t) {
    Rates plain, ordered, with_bad;
    for (int k = 0; k < 3; ++k) {  // rotating order
      switch ((t + k) % 3) {
        case 0:
          plain = throughput(Ordering::kNone, keys, n, false);
          break;
        case 1:
          ordered = throughput(Ordering::kPerKey, keys, n, false);
          break;
        default:
          with_bad = throughput(Ordering::kPerKey, keys, n, true);
          break;
      }
    }
    std::printf(
        "  trial %d: unordered %.0f, per_key (%zu keys) %.0f deliveries per CPU-s; sending only: "
        "per_key %.0f, with a failing key %.0f\n",
        t, plain.all, keys, ordered.all, ordered.sending, with_bad.sending);
    ratio.push_back(ordered.all / plain.all);
    isolation.push_back(with_bad.sending / ordered.sending);
  }
  std::printf(
      "per_key / unordered: %.3f (median of %d); sending with one failing key / without: %.3f\n",
      median(ratio), trials, median(isolation));
  return 0;
}

}  // namespace
}  // namespace ringcast

int main(int argc, char** argv) {
  return ringcast::run(argc, argv);
}
