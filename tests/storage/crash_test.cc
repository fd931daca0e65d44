// Crash safety (SPEC R12.2, docs/durability.md): a child process writes and acknowledges batches
// (an ack is written only once durable_seq() covers the batch), the test SIGKILLs it at random
// points, reopens and checks that every acknowledged event and attempt is there, every batch is
// all-or-nothing, nothing is duplicated, and every open lease became exactly one lease_expired
// attempt.
// The child is this test binary re-executed (a fresh process: RocksDB's thread pools do not
// survive fork()), running CrashChild.DISABLED_Main with the parameters in its environment.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "storage/rocks_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/process.h"

namespace ringcast::storage::test {
namespace {

constexpr int kTenants = 3;
constexpr int kDeliveriesPerEvent = 2;
constexpr int kMaxBatches = 100'000;

std::string tenant_name(int j) {
  return "crash-tenant-" + std::to_string(j);
}

// Deterministic workload: incarnation k, batch i, tenant j, slot x (0 = event, 1.. = delivery).
uint64_t seq_of(int k, int i, int j, int x) {
  return 1000 + ((static_cast<uint64_t>(k) * kMaxBatches + i) * kTenants + j) * 3 + x;
}
EndpointId endpoint_of(int j, int m) {
  return make_id(partition_of(tenant_name(j)), 1 + m);
}
std::string event_id(int k, int i, int j) {
  return "k" + std::to_string(k) + "-b" + std::to_string(i) + "-t" + std::to_string(j);
}
std::string payload_of(int k, int i, int j) {
  std::string p = "{\"k\":" + std::to_string(k) + ",\"i\":" + std::to_string(i) +
                  ",\"j\":" + std::to_string(j) + ",\"pad\":\"";
  p.append(static_cast<size_t>((k * 31 + i * 7 + j) % 300), 'x');
  return p + "\"}";
}
Event event_of(int k, int i, int j) {
  return make_event(tenant_name(j), event_id(k, i, j), seq_of(k, i, j, 0), payload_of(k, i, j),
                    kT0 + seconds(i));
}
Delivery delivery_of(int k, int i, int j, int m, DeliveryStatus st) {
  Event ev = event_of(k, i, j);
  Delivery d;
  d.id = make_id(partition_of(tenant_name(j)), seq_of(k, i, j, 1 + m));
  d.event = ev.seq;
  d.endpoint = endpoint_of(j, m);
  d.created_at = ev.created_at;
  d.next_attempt_at = ev.created_at;
  d.status = st;
  return d;
}

// Batch i of incarnation k: new events (pending deliveries); the lease on batch i-1's
// deliveries (attempt 1 on the wire); attempt 1 recorded for batch i-2's, now delivered.
Mutations batch_of(int k, int i) {
  Mutations m;
  for (int j = 0; j < kTenants; ++j) {
    m.events.push_back(event_of(k, i, j));
    for (int x = 0; x < kDeliveriesPerEvent; ++x)
      m.deliveries.push_back(
          put_new(delivery_of(k, i, j, x, DeliveryStatus::kPending), tenant_name(j)));
    if (i >= 1) {
      for (int x = 0; x < kDeliveriesPerEvent; ++x) {
        Delivery d = delivery_of(k, i - 1, j, x, DeliveryStatus::kInFlight);
        d.attempts = 1;
        m.deliveries.push_back(put_update(d));
      }
    }
    if (i >= 2) {
      for (int x = 0; x < kDeliveriesPerEvent; ++x) {
        Delivery d = delivery_of(k, i - 2, j, x, DeliveryStatus::kDelivered);
        d.attempts = 1;
        m.deliveries.push_back(put_update(d));
        Attempt a = make_attempt(d.id, 1, Outcome::kSuccess);
        a.response_prefix = "ok " + std::to_string(i - 2);
        m.attempts.push_back(a);
      }
    }
  }
  if (i == 0) {
    for (int j = 0; j < kTenants; ++j) {
      for (int x = 0; x < kDeliveriesPerEvent; ++x) {
        Endpoint e = make_endpoint(tenant_name(j), 1 + x);
        m.endpoints.push_back(e);
      }
    }
  }
  return m;
}

struct NullVisitor final : RecoveryVisitor {
  void on_endpoint(const Endpoint&) override {}
  void on_tenant(const Tenant&) override {}
  void on_delivery(const Delivery&) override {}
};

void append_line(int fd, const std::string& line) {
  std::string l = line + "\n";
  ssize_t n = ::write(fd, l.data(), l.size());
  if (n != static_cast<ssize_t>(l.size())) std::_Exit(5);
}

// The child: recover like a restarting daemon, then write and acknowledge until killed.
TEST(CrashChild, DISABLED_Main) {
  const char* dir = std::getenv("RINGCAST_CRASH_DB");
  const char* ack = std::getenv("RINGCAST_CRASH_ACK");
  const char* inc = std::getenv("RINGCAST_CRASH_INCARNATION");
  if (!dir || !ack || !inc) GTEST_SKIP() << "only runs as the crash test's child";
  const int k = std::atoi(inc);
  int fd = ::open(ack, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) std::_Exit(6);
  auto r = RocksStore::open(options_for(dir));
  if (!r) std::_Exit(7);
  auto& store = **r;
  NullVisitor v;
  for (int j = 0; j < kTenants; ++j) {
    if (!store.recover(partition_of(tenant_name(j)), kT0 + hours(k), v)) std::_Exit(8);
  }
  append_line(fd, "S " + std::to_string(k));
  for (int i = 0; i < kMaxBatches; ++i) {
    auto seq = store.write(batch_of(k, i));
    if (!seq) std::_Exit(9);
    // write() returned: the batch's leases are in the lease log (a daemon sends only now).
    append_line(fd, "W " + std::to_string(k) + " " + std::to_string(i));
    if (!store.wait_durable(*seq, seconds(30))) std::_Exit(10);
    append_line(fd, "A " + std::to_string(k) + " " + std::to_string(i));
  }
  std::_Exit(11);  // never reached in practice: the parent kills us
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Acked batches per incarnation (acks are in order, so the count is max + 1); `written` gets
// the batches whose write() returned.
std::map<int, int> read_acks(const std::string& path, bool* started, int k,
                             std::map<int, int>* written = nullptr) {
  std::map<int, int> acked;
  std::istringstream in(ringcast::test::read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    char tag;
    int kk, i;
    if (!(ls >> tag >> kk)) continue;  // a torn last line
    if (tag == 'S' && kk == k) *started = true;
    if (tag == 'A' && (ls >> i)) acked[kk] = std::max(acked[kk], i + 1);
    if (tag == 'W' && written && (ls >> i)) (*written)[kk] = std::max((*written)[kk], i + 1);
  }
  return acked;
}

// How many batches of incarnation k were committed: batches are atomic and in order, so the
// first missing event marks the end. Checks the batches after it are wholly absent.
int committed_batches(RocksStore& s, int k) {
  int c = 0;
  while (c < kMaxBatches) {
    auto e = s.find_event(tenant_name(0), event_id(k, c, 0));
    EXPECT_TRUE(e.ok());
    if (!e.ok() || !e->has_value()) break;
    ++c;
  }
  for (int i = c; i < c + 3; ++i) {
    for (int j = 0; j < kTenants; ++j) {
      auto e = s.find_event_key(tenant_name(j), event_id(k, i, j));
      EXPECT_TRUE(e.ok() && !e->has_value()) << "batch " << i << " partially present";
    }
  }
  return c;
}

// Full check of incarnation k with c committed batches. `recovered`: a later recovery ran, so
// the lease of batch c-2 must have become exactly one lease_expired attempt. The leases of a
// batch are appended to the lease log after the batch is written, before write() returns: when
// the child was killed in between (`leased` false: write() of batch c-1 was not seen to
// return), the lease may be missing, and the delivery is then pending without attempts (its
// request was never sent).
void check_incarnation(RocksStore& s, int k, int c, bool recovered, bool leased = true) {
  for (int i = 0; i < c; ++i) {
    for (int j = 0; j < kTenants; ++j) {
      auto e = s.find_event(tenant_name(j), event_id(k, i, j));
      ASSERT_TRUE(e.ok());
      ASSERT_TRUE(e->has_value()) << "k" << k << " batch " << i << " tenant " << j;
      EXPECT_EQ((*e)->payload, payload_of(k, i, j));
      auto key = s.find_event_key(tenant_name(j), event_id(k, i, j));
      ASSERT_TRUE(key.ok() && key->has_value());
      EXPECT_EQ((*key)->deliveries, static_cast<uint32_t>(kDeliveriesPerEvent));
      for (int x = 0; x < kDeliveriesPerEvent; ++x) {
        const DeliveryId id = delivery_of(k, i, j, x, DeliveryStatus::kPending).id;
        auto det = s.get_delivery(id);
        ASSERT_TRUE(det.ok());
        ASSERT_TRUE(det->has_value()) << "delivery of k" << k << " batch " << i;
        const auto& d = (*det)->delivery;
        const auto& as = (*det)->attempts;
        if (i <= c - 3) {
          EXPECT_EQ(d.status, DeliveryStatus::kDelivered);
          ASSERT_EQ(as.size(), 1u) << "k" << k << " batch " << i;
          EXPECT_EQ(as[0].outcome, Outcome::kSuccess);
          EXPECT_EQ(as[0].response_prefix, "ok " + std::to_string(i));
        } else if (i == c - 2 && !leased && d.status == DeliveryStatus::kPending && as.empty()) {
          EXPECT_EQ(d.attempts, 0) << "k" << k << " batch " << i;
        } else if (i == c - 2) {
          if (recovered) {
            EXPECT_EQ(d.status, DeliveryStatus::kPending);
            ASSERT_EQ(as.size(), 1u) << "exactly one lease_expired, k" << k << " batch " << i;
            EXPECT_EQ(as[0].code.kind, ErrorCode::Kind::kLeaseExpired);
            EXPECT_EQ(as[0].number, 1);
          } else {
            EXPECT_EQ(d.status, DeliveryStatus::kInFlight);
            EXPECT_TRUE(as.empty());
          }
        } else {
          EXPECT_EQ(d.status, DeliveryStatus::kPending);
          EXPECT_TRUE(as.empty());
        }
      }
    }
  }
}

TEST(StoreCrash, SigkillAtRandomPointsLosesNothingAcknowledged) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kKills = 20;
#else
  constexpr int kKills = 24;
#endif
  ringcast::test::TempDir dir("ringcast-crash");
  const std::string db = dir.file("db");
  const std::string acks = dir.file("acks");
  const std::string exe = self_exe();
  ASSERT_FALSE(exe.empty());
  std::mt19937 rng(20260101);
  std::map<int, int> acked;    // incarnation -> acknowledged batches
  std::map<int, int> written;  // incarnation -> batches whose write() returned
  int total_acked = 0;
  for (int k = 0; k < kKills; ++k) {
    ringcast::test::ProcessOptions po;
    po.env = {"RINGCAST_CRASH_DB=" + db, "RINGCAST_CRASH_ACK=" + acks,
              "RINGCAST_CRASH_INCARNATION=" + std::to_string(k)};
    po.stdout_path = dir.file("child.out");
    po.stderr_path = dir.file("child.err");
    auto child = ringcast::test::Process::start(
        {exe, "--gtest_filter=CrashChild.DISABLED_Main", "--gtest_also_run_disabled_tests"}, po);
    // Wait until it has recovered, then kill it somewhere in the write loop.
    bool started = false;
    for (int w = 0; w < 6000 && !started && child.running(); ++w) {
      read_acks(acks, &started, k);
      if (!started) std::this_thread::sleep_for(milliseconds(5));
    }
    ASSERT_TRUE(started) << "child " << k
                         << " did not start: " << ringcast::test::read_file(dir.file("child.err"));
    std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<int>(0, 60)(rng)));
    auto status = child.kill();
    ASSERT_TRUE(status.signaled && status.signal == SIGKILL)
        << "child " << k << " ended on its own: " << status.str() << "\n"
        << ringcast::test::read_file(dir.file("child.err"));

    bool dummy = false;
    acked = read_acks(acks, &dummy, k, &written);
    // Every few kills, look at the state the crash left before any recovery (an open lease
    // is still kInFlight); the final checks below cover every incarnation after recovery.
    if (k % 4 == 1) {
      auto store = open_store(options_for(db));
      ASSERT_NE(store, nullptr);
      const int c = committed_batches(*store, k);
      EXPECT_GE(c, acked[k]) << "an acknowledged batch of incarnation " << k << " is missing";
      check_incarnation(*store, k, c, /*recovered=*/false, written[k] >= c);
      if (k > 0) {
        const int c1 = committed_batches(*store, k - 1);
        check_incarnation(*store, k - 1, c1, true, written[k - 1] >= c1);
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
  for (const auto& [k, n] : acked) total_acked += n;
  EXPECT_GT(total_acked, kKills);  // the kills did land inside the write loop

  // A final restart: recovery turns the last incarnation's lease into lease_expired; a second
  // one adds nothing. Then everything is checked once more.
  std::map<int, int> committed;
  for (int round = 0; round < 2; ++round) {
    auto store = open_store(options_for(db));
    ASSERT_NE(store, nullptr);
    if (round == 0) {
      for (int k = 0; k < kKills; ++k) {
        committed[k] = committed_batches(*store, k);
        EXPECT_GE(committed[k], acked[k])
            << "acknowledged batches of incarnation " << k << " are missing";
      }
    }
    uint64_t leases = 0;
    for (int j = 0; j < kTenants; ++j) {
      NullVisitor v;
      auto st = store->recover(partition_of(tenant_name(j)), kT0 + days(1), v);
      ASSERT_TRUE(st.ok());
      leases += st->leases_expired;
    }
    const int c = committed[kKills - 1];
    const uint64_t open_leases = c >= 2 ? kTenants * kDeliveriesPerEvent : 0;
    if (round == 0 && written[kKills - 1] < c) {
      EXPECT_LE(leases, open_leases);  // killed between the batch and its leases
    } else {
      EXPECT_EQ(leases, round == 0 ? open_leases : 0u);
    }
    for (int k = 0; k < kKills; ++k)
      check_incarnation(*store, k, committed[k], true, written[k] >= committed[k]);
  }
}

}  // namespace
}  // namespace ringcast::storage::test
