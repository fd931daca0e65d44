// End to end: the data dir's filesystem fills up, turns read-only, or fails an fsync, under a real
// `ringcast serve` whose data dir is on the power-cut filesystem (tests/support/powercut,
// docs/powercut-fs.md); docs/operations.md "Disk full, read-only and failed syncs" is the
// contract. A full or read-only disk: intake answers 503 storage_full with Retry-After, /healthz
// says degraded, the process keeps running, nothing answered 202 is lost, and intake resumes by
// itself once space (write access) returns. A failed fsync: nothing it covered is acknowledged
// (SPEC R12.2), the daemon exits for a restart, and after a power cut and the restart every
// event answered 202 is delivered, byte for byte (the sink checks each body's signature).
#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/e2e/powercut_mount.h"

namespace ringcast::e2e {
namespace {

using test::PowerCutFs;
using test::SinkProcess;
using test::TempDir;

constexpr const char* kTenant = "disk";
constexpr const char* kSecret = "disk-full-test-signing-secret";

// The payload of event i: ~1.5 KiB, different for every i (the byte-exact check).
std::string payload_of(int i) {
  std::string pad;
  for (int k = 0; k < 48; ++k) pad += std::to_string((i * 7919 + k * 104729) % 1000003) + "-";
  return "{\"i\": " + std::to_string(i) + ", \"pad\": \"" + pad + "\"}";
}

std::string event_body(int i) {
  return "{\"id\":\"df-" + std::to_string(i) +
         "\",\"type\":\"disk.event\",\"payload\":" + payload_of(i) + "}";
}

Reply post_event(const Daemon& d, int i, Millis timeout = 5s) {
  return http_request(d.port(), "POST", std::string("/v1/tenants/") + kTenant + "/events",
                      event_body(i), {std::string("Authorization: Bearer ") + Daemon::kToken},
                      timeout);
}

Reply get_plain(const Daemon& d, const std::string& path) {
  return http_request(d.port(), "GET", path, "", {}, 5s);
}

// Bytes in use on a mounted filesystem (statfs: the budget or the default capacity minus free).
uint64_t used_bytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return 0;
  return (st.f_blocks - st.f_bfree) * st.f_frsize;
}

uint64_t free_bytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return 0;
  return st.f_bavail * st.f_frsize;
}

class E2eDiskFull : public ::testing::Test {
 protected:
  void SetUp() override {
    RINGCAST_E2E_SINGLE_NODE_ONLY("the data dir of one node on a FUSE filesystem");
    PowerCutFs::Options fo;
    fo.journaled_namespace = true;  // ext4 / xfs as they behave in practice
    mount_powercut_or_skip(mnt_.path(), fo, fs_);
    if (fs_ == nullptr) return;
    DaemonOptions o;
    o.env = {"RINGCAST_STORAGE_DATA_DIR=" + fs_->path("data")};
    d_ = std::make_unique<Daemon>(o);
    ASSERT_NO_THROW(d_->start());
    sink_ = std::make_unique<SinkProcess>(SinkProcess::start(
        {"--quiet", "--secret", kSecret, "--verify", "standard"}, sink_dir_.path()));
    Reply cr = create_endpoint(*d_, kTenant,
                               "{\"url\":" + quote(sink_->base_url() + "/disk") +
                                   ",\"policy\":\"steady\",\"secret\":" + quote(kSecret) + "}");
    ASSERT_EQ(cr.status, 201) << cr.describe();
  }

  void TearDown() override {
    d_.reset();  // the daemon goes before the filesystem it writes to
    sink_.reset();
    if (fs_) fs_->unmount();
  }

  // Submits event i; a 202 or 200 answer is recorded as acknowledged.
  Reply submit(int i) {
    Reply r = post_event(*d_, i);
    if (r.status == 202 || r.status == 200) acked_[i] = payload_of(i);
    return r;
  }

  // Every acknowledged event is in the store with its exact payload bytes and reaches the sink
  // with a 200 (the sink verified its signature, so the body is the one ringcast signed).
  void expect_every_acknowledged_event_delivered() {
    std::vector<std::string> ids;
    for (const auto& [i, payload] : acked_) ids.push_back("df-" + std::to_string(i));
    std::vector<std::string> msg_ids = message_ids_of(*d_, kTenant, ids);
    size_t k = 0;
    for (const auto& [i, payload] : acked_) {
      EXPECT_FALSE(msg_ids[k].empty()) << "acknowledged but unknown: df-" << i;
      Reply ev = d_->call(
          "GET", std::string("/v1/tenants/") + kTenant + "/events/df-" + std::to_string(i));
      EXPECT_NE(ev.body.find("\"payload\":" + payload), std::string::npos)
          << "df-" << i << " is not stored byte for byte: " << ev.describe();
      ++k;
    }
    EXPECT_TRUE(
        wait_until([&] { return missing_ids(*sink_, msg_ids).empty(); }, scaled(30s), 100ms))
        << "acknowledged but never delivered: " << sample(missing_ids(*sink_, msg_ids)) << "\n"
        << d_->output();
    for (const auto& l : sink_->ids()) {
      EXPECT_NE(l.status, "401") << "a body that does not match its signature: " << l.id;
    }
  }

  // Submits new events until one is not acknowledged (at most `max_events`); returns that answer.
  Reply submit_until_refused(int& next, int max_events) {
    Reply r;
    for (int n = 0; n < max_events; ++n) {
      r = submit(next++);
      if (r.status != 202 && r.status != 200) break;
    }
    return r;
  }

  void expect_storage_full(const Reply& r) {
    EXPECT_EQ(r.status, 503) << r.describe() << "\n" << d_->output();
    EXPECT_NE(r.body.find("\"storage_full\""), std::string::npos) << r.describe();
    EXPECT_NE(r.headers.find("Retry-After:"), std::string::npos) << r.headers;
  }

  void expect_degraded_health() {
    Reply h = get_plain(*d_, "/healthz");
    EXPECT_EQ(h.status, 200) << h.describe();
    EXPECT_NE(h.body.find("\"degraded\""), std::string::npos) << h.describe();
    EXPECT_NE(h.body.find("storage_full"), std::string::npos) << h.describe();
    Reply ready = get_plain(*d_, "/readyz");
    EXPECT_EQ(ready.status, 503) << ready.describe();
  }

  // Intake accepts again by itself (no restart): the next new event is answered 202.
  void expect_resumes(int& next) {
    Reply r;
    EXPECT_TRUE(wait_until(
        [&] {
          r = submit(next++);
          return r.status == 202;
        },
        scaled(20s), 200ms))
        << r.describe() << "\n"
        << d_->output();
    Reply h = get_plain(*d_, "/healthz");
    EXPECT_EQ(h.status, 200) << h.describe();
    EXPECT_NE(h.body.find("\"ok\""), std::string::npos) << h.describe();
    EXPECT_EQ(get_plain(*d_, "/readyz").status, 200);
    for (int k = 0; k < 20; ++k) {
      Reply more = submit(next++);
      EXPECT_EQ(more.status, 202) << more.describe();
    }
  }

  TempDir mnt_{"e2e-disk-mnt"};
  TempDir sink_dir_{"e2e-disk-sink"};
  std::unique_ptr<PowerCutFs> fs_;
  std::unique_ptr<SinkProcess> sink_;
  std::unique_ptr<Daemon> d_;
  std::map<int, std::string> acked_;  // event number → its payload
};

TEST_F(E2eDiskFull, FullDiskAnswers503StorageFullAndResumesByItselfWhenSpaceReturns) {
  int next = 0;
  for (; next < 20; ++next) ASSERT_EQ(submit(next).status, 202);
  // About 300 more events fit.
  fs_->enospc_after(used_bytes(fs_->mount_point()) + (512 << 10));
  Reply refused = submit_until_refused(next, 5000);
  expect_storage_full(refused);
  ASSERT_TRUE(d_->running()) << d_->output();
  // Refused when the disk was (nearly) full: ringcast keeps a floor free (1/32 of the
  // filesystem) so that RocksDB itself never meets ENOSPC on its WAL.
  EXPECT_LT(free_bytes(fs_->mount_point()), uint64_t{160} << 10);

  // Still full: every intake route refuses, nothing crashes, reads and health still answer.
  for (int k = 0; k < 5; ++k) expect_storage_full(submit(next++));
  std::string bulk;
  for (int k = 0; k < 3; ++k) {
    bulk += "{\"tenant\":\"disk\",\"id\":\"df-" + std::to_string(next + k) +
            "\",\"type\":\"disk.event\",\"payload\":" + payload_of(next + k) + "}\n";
  }
  Reply b = d_->call("POST", "/v1/events/bulk", bulk);
  ASSERT_EQ(b.status, 200) << b.describe();
  EXPECT_EQ(b.json()["accepted"].i64(), 0) << b.body;
  EXPECT_NE(b.body.find("storage_full"), std::string::npos) << b.body;
  next += 3;
  expect_degraded_health();
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(d_->running()) << d_->output();
  EXPECT_EQ(d_->call("GET", std::string("/v1/tenants/") + kTenant + "/events/df-0").status, 200);

  fs_->lift_enospc();
  expect_resumes(next);
  expect_every_acknowledged_event_delivered();
  EXPECT_EQ(d_->runs(), 1);
  auto st = d_->terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d_->output();
}

TEST_F(E2eDiskFull, ReadOnlyFilesystemAnswers503StorageFullAndResumesByItselfWhenWritable) {
  int next = 0;
  for (; next < 20; ++next) ASSERT_EQ(submit(next).status, 202);
  fs_->read_only(true);
  Reply refused = submit_until_refused(next, 50);
  expect_storage_full(refused);
  for (int k = 0; k < 5; ++k) expect_storage_full(submit(next++));
  expect_degraded_health();
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(d_->running()) << d_->output();
  EXPECT_GT(fs_->counters().erofs_errors, 0u);

  fs_->read_only(false);
  expect_resumes(next);
  expect_every_acknowledged_event_delivered();
  EXPECT_EQ(d_->runs(), 1);
  auto st = d_->terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d_->output();
}

TEST_F(E2eDiskFull, StartingOnAFullDiskExitsWithAClearMessageAndStartsOnceSpaceReturns) {
  int next = 0;
  for (; next < 20; ++next) ASSERT_EQ(submit(next).status, 202);
  auto st = d_->terminate();
  ASSERT_TRUE(st.ok()) << st.str() << "\n" << d_->output();
  fs_->enospc_after(used_bytes(fs_->mount_point()) + 4096);
  EXPECT_THROW(d_->start(), std::runtime_error);
  const std::string out = d_->output();
  EXPECT_NE(out.find("cannot start on the store at"), std::string::npos) << out;
  EXPECT_NE(out.find("the data dir is full"), std::string::npos) << out;
  EXPECT_EQ(out.find("Assertion"), std::string::npos) << out;
  fs_->lift_enospc();
  ASSERT_NO_THROW(d_->start());
  for (int k = 0; k < 5; ++k) ASSERT_EQ(submit(next++).status, 202);
  expect_every_acknowledged_event_delivered();
}

TEST_F(E2eDiskFull, FailedFsyncIsNeverAcknowledgedAndTheDaemonExitsForARestart) {
  int next = 0;
  for (; next < 20; ++next) ASSERT_EQ(submit(next).status, 202);
  fs_->make_durable();
  // A producer keeps submitting while one fsync fails: the events that sync covered are being
  // answered at that moment.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<int, std::string> acked_late;
  std::vector<std::string> refusals;
  std::atomic<int> produced{0};
  std::thread producer([&] {
    for (int i = 100000; !stop.load(); ++i) {
      Reply r = post_event(*d_, i, 3s);
      std::lock_guard<std::mutex> lock(mu);
      if (r.status == 202 || r.status == 200) acked_late[i] = payload_of(i);
      if (r.status == 503) refusals.push_back(r.body);
      produced.fetch_add(1);
      if (r.status == 0) std::this_thread::sleep_for(20ms);
    }
  });
  ASSERT_TRUE(wait_until([&] { return produced.load() >= 30; }, scaled(10s)));
  fs_->fail_next_fsync(1, EIO);
  const bool exited = wait_until([&] { return !d_->running(); }, scaled(30s), 50ms);
  stop.store(true);
  producer.join();
  ASSERT_TRUE(exited) << "the daemon went on after a failed fsync\n" << d_->output();
  auto st = d_->terminate();
  EXPECT_TRUE(st.exited) << st.str() << "\n" << d_->output();
  EXPECT_EQ(st.code, 75) << st.str() << "\n" << d_->output();
  EXPECT_NE(d_->output().find("an fsync of the data dir failed"), std::string::npos)
      << d_->output();
  EXPECT_EQ(fs_->counters().failed_syncs, 1u);
  for (const std::string& body : refusals) {
    EXPECT_NE(body.find("storage_"), std::string::npos) << body;
  }
  std::printf("[ fsync    ] %zu events acknowledged while the fsync failed, %zu refused 503\n",
              acked_late.size(), refusals.size());

  // What the failed sync covered is gone for good: a power cut drops it. Every event answered
  // 202 must not have depended on it.
  test::CutReport cut = fs_->cut_power();
  ASSERT_TRUE(cut.ok()) << cut.error;
  acked_.insert(acked_late.begin(), acked_late.end());
  ASSERT_NO_THROW(d_->start());
  expect_every_acknowledged_event_delivered();
  Reply again = submit(next++);
  EXPECT_EQ(again.status, 202) << again.describe();
  auto st2 = d_->terminate();
  EXPECT_TRUE(st2.ok()) << st2.str() << "\n" << d_->output();
}

}  // namespace
}  // namespace ringcast::e2e
