// End to end: the wall clock steps an hour back and an hour forward under a running daemon;
// docs/operations.md "Clock jumps" is the contract. libfaketime (LD_PRELOAD) moves only the
// CLOCK_REALTIME of the `ringcast serve` process, as an NTP step does: CLOCK_MONOTONIC, and with
// it the loop's sleeps, the transport deadlines and the kernel's io_uring timeouts, is untouched
// (FAKETIME_DONT_FAKE_MONOTONIC=1). The offset is read again from a file on every clock read
// (FAKETIME_TIMESTAMP_FILE, FAKETIME_NO_CACHE=1), so the test steps the running daemon's clock by
// rewriting that file. The test process and the sink keep the real clock.
//
//   CeilingsCountWallClockTime — one step forward (+1 h): the ceilings SPEC R3.2 (slow ceiling),
//     R3.3 (max age) and R4.7 (time held by the breaker) count wall-clock time, so the step ends
//     the deliveries whose ceiling is under an hour away (deadline_exceeded,
//     breaker_hold_expired) without one more attempt, and the ladders of the others go on.
//   StepsBackAndForwardUnderLoad — a producer submits events at a steady pace to a receiver that
//     fails half of the attempts while the clock steps -1 h, then +2 h (to real + 1 h), then
//     -1 h (back to real). Every acknowledged event ends delivered or failed within the ladder's
//     length once the clock is back, with at most the ladder's attempts (SPEC R5.1, R2.2), no
//     two attempts of one delivery closer than the ladder's pause (except the one a step forward
//     makes due at once), and no burst after a step beyond one attempt per waiting delivery.
//     The daemon's clock never runs backwards (net/loop.h): after a step back it runs on at half
//     speed until the system clock catches up, so nothing waits for the length of the step.
//
// Needs libfaketime (tools/install-deps.sh test: Debian package faketime); skipped without it,
// failed without it when CI=true.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;
using SteadyClock = std::chrono::steady_clock;

constexpr int64_t kHourMs = 3'600'000;

const char* const kLibFaketimeCandidates[] = {
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
};

std::string find_libfaketime() {
  for (const char* p : kLibFaketimeCandidates) {
    if (::access(p, R_OK) == 0) return p;
  }
  return "";
}

bool on_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

int64_t real_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The daemon's wall-clock offset from the real clock, set by rewriting the file libfaketime
// reads (its README, 4d: "+N" / "-N" seconds from the real time).
class FakeWallClock {
 public:
  FakeWallClock(std::string lib, const std::string& dir)
      : lib_(std::move(lib)), file_(dir + "/faketime.rc") {
    set(0);
  }

  // Steps the daemon's CLOCK_REALTIME to real time + offset_ms (whole seconds).
  void set(int64_t offset_ms) {
    const int64_t s = offset_ms / 1000;
    const std::string tmp = file_ + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << (s >= 0 ? "+" : "") << s << "\n";
      if (!f) throw std::runtime_error("cannot write " + tmp);
    }
    // rename(2): the daemon reads either the old offset or the new one, never a partial file.
    if (std::rename(tmp.c_str(), file_.c_str()) != 0)
      throw std::runtime_error("cannot rename " + tmp + " to " + file_);
  }

  // The environment of the daemon under the fake clock.
  std::vector<std::string> env() const {
    std::vector<std::string> e = {
        "LD_PRELOAD=" + lib_,
        "FAKETIME_TIMESTAMP_FILE=" + file_,
        "FAKETIME_NO_CACHE=1",             // every clock read sees the file as it is now
        "FAKETIME_DONT_FAKE_MONOTONIC=1",  // an NTP step moves CLOCK_REALTIME only
        "NO_FAKE_STAT=1",                  // file times stay the kernel's
    };
    if (kSanitized) {
      // libasan must come first in the library list unless told otherwise; keep the caller's
      // options (ProcessOptions::env replaces a variable whole).
      const char* asan = std::getenv("ASAN_OPTIONS");
      std::string opts = asan != nullptr ? asan : "";
      e.push_back("ASAN_OPTIONS=" + opts + (opts.empty() ? "" : ":") + "verify_asan_link_order=0");
    }
    return e;
  }

 private:
  std::string lib_;
  std::string file_;
};

// libfaketime keeps a shared-memory segment and a semaphore per process; a clean exit removes
// them, a SIGKILL (a failed test's teardown) leaves them behind for the next process of that pid.
void remove_faketime_leftovers(pid_t pid) {
  if (pid <= 0) return;
  for (const std::string name : {"faketime_shm_", "sem.faketime_sem_"}) {
    ::unlink(("/dev/shm/" + name + std::to_string(pid)).c_str());
  }
}

// Base for both tests: the daemon under the fake clock, a sink, and a probe tenant whose one
// endpoint matches no event type, so that its events only tell the daemon's wall clock.
class E2eClockJump : public ::testing::Test {
 protected:
  static constexpr const char* kProbeTenant = "cj-probe";

  void SetUp() override {
    RINGCAST_E2E_SINGLE_NODE_ONLY("libfaketime steps the clock of one process");
    lib_ = find_libfaketime();
    if (lib_.empty()) {
      if (on_ci()) FAIL() << "libfaketime.so.1 not found (tools/install-deps.sh test: faketime)";
      RINGCAST_SKIP_MISSING() << "libfaketime.so.1 not found: install the Debian package faketime "
                                 "(tools/install-deps.sh test)";
    }
    clock_ = std::make_unique<FakeWallClock>(lib_, dir_.path());
  }

  void TearDown() override {
    if (d_ == nullptr) return;
    const pid_t pid = daemon_pid_;
    if (d_->running()) {
      auto st = d_->terminate();
      EXPECT_TRUE(st.ok()) << st.str() << "\n" << d_->output();
    }
    d_.reset();
    remove_faketime_leftovers(pid);
  }

  void start_daemon(DaemonOptions o) {
    std::vector<std::string> env = clock_->env();
    env.insert(env.end(), o.env.begin(), o.env.end());
    o.env = std::move(env);
    d_ = std::make_unique<Daemon>(std::move(o));
    d_->start();
    daemon_pid_ = d_->pid();
  }

  void make_probe_endpoint(const SinkProcess& sink) {
    Reply r = create_endpoint(
        *d_, kProbeTenant,
        "{\"url\":" + quote(sink.base_url() + "/probe") + ",\"event_types\":[\"cj.never\"]}");
    ASSERT_EQ(r.status, 201) << r.describe();
  }

  // The daemon's wall clock minus the real one, in ms, from the created_at of a probe event;
  // INT64_MIN when the probe failed.
  int64_t daemon_offset_ms() {
    const std::string id = "probe-" + std::to_string(++probes_);
    const int64_t before = real_now_ms();
    Reply r = submit_event(*d_, kProbeTenant, id, "cj.probe", "{}");
    const int64_t after = real_now_ms();
    if (r.status != 202) return INT64_MIN;
    Reply ev = d_->call("GET", std::string("/v1/tenants/") + kProbeTenant + "/events/" + id);
    const int64_t created = rfc3339_ms(ev.json()["created_at"].str());
    if (created < 0) return INT64_MIN;
    return created - (before + after) / 2;
  }

  // Steps the clock and checks what the daemon's clock did: a step forward is taken at once
  // (libfaketime took effect); after a step back the daemon's clock goes on from where it was
  // (docs/operations.md "Clock jumps": it never runs backwards).
  void step(int64_t offset_ms) {
    const int64_t before = daemon_offset_ms();
    ASSERT_NE(before, INT64_MIN) << "the probe event was not accepted\n" << d_->output();
    clock_->set(offset_ms);
    const int64_t seen = daemon_offset_ms();
    ASSERT_NE(seen, INT64_MIN) << "the probe event was not accepted\n" << d_->output();
    if (offset_ms >= before) {
      ASSERT_LT(std::abs(seen - offset_ms), 60'000)
          << "the daemon's wall clock is " << seen << " ms off the real one, the fake clock says "
          << offset_ms << " ms: libfaketime did not take effect (LD_PRELOAD " << lib_ << ")";
    } else {
      ASSERT_LT(std::abs(seen - before), 60'000)
          << "the system clock stepped back to " << offset_ms << " ms off real time; the "
          << "daemon's went from " << before << " to " << seen << " ms: it ran backwards";
    }
  }

  TempDir dir_{"e2e-clock"};
  std::string lib_;
  std::unique_ptr<FakeWallClock> clock_;
  std::unique_ptr<Daemon> d_;
  pid_t daemon_pid_ = -1;
  int probes_ = 0;
};

// Lines of the sink's ids file per webhook id (every request the receiver saw).
std::map<std::string, size_t> sink_lines_by_id(const SinkProcess& sink) {
  std::map<std::string, size_t> out;
  for (const auto& l : sink.ids()) ++out[l.id];
  return out;
}

// Deliveries of one endpoint by event id.
std::map<std::string, Json> deliveries_by_event(const Daemon& d, const std::string& tenant,
                                                const std::string& endpoint) {
  std::map<std::string, Json> out;
  const Json list = list_deliveries(d, tenant, endpoint);
  for (const Json& del : list.items()) out[del["event_id"].str()] = del;
  return out;
}

bool ended(const Json& del) {
  const std::string& s = del["status"].str();
  return s == "delivered" || s == "failed" || s == "dead" || s == "unknown";
}

// ---------------------------------------------------------------------------------------------
// SPEC R3.2, R3.3, R4.7 across a step forward.

constexpr int kCeilingEvents = 3;
constexpr int kHeldEvents = 5;
constexpr int kCeilingLadderPauses = 20;  // 1 s each: longer than the test

std::string ladder_of_1s(int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += std::string(i ? ", " : "") + "\"1s\"";
  return out + "]";
}

TEST_F(E2eClockJump, CeilingsCountWallClockTime) {
  const std::string ladder = ladder_of_1s(kCeilingLadderPauses);
  DaemonOptions o;
  // R4.7's ceiling under an hour; the fixture's breaker opens after 3 failing deliveries and
  // probes every 400–800 ms (tests/e2e/daemon.cc).
  o.env = {"RINGCAST_ENGINE_BREAKER_HOLD_CEILING=30m"};
  // SPEC R3.3 (max_age) and R3.2 (slow_ceiling: from the first slow step), each once under the
  // one-hour step and once over it. The xhub base keeps the preset's money rules (R3.5):
  // refund.completed answered 4xx goes to the slow ladder.
  o.extra_toml = "[policies.cj-age30m]\nbase = \"smengo\"\nladder = " + ladder +
                 "\njitter = 0.0\nauto_disable = false\nmax_age = \"30m\"\n"
                 "\n[policies.cj-age2h]\nbase = \"smengo\"\nladder = " +
                 ladder +
                 "\njitter = 0.0\nauto_disable = false\nmax_age = \"2h\"\n"
                 "\n[policies.cj-slow30m]\nbase = \"xhub\"\nladder = [\"100ms\"]\nslow_ladder = " +
                 ladder +
                 "\njitter = 0.0\nbreaker = false\nslow_ceiling = \"30m\"\n"
                 "\n[policies.cj-slow2h]\nbase = \"xhub\"\nladder = [\"100ms\"]\nslow_ladder = " +
                 ladder + "\njitter = 0.0\nbreaker = false\nslow_ceiling = \"2h\"\n";
  ASSERT_NO_THROW(start_daemon(std::move(o)));
  TempDir sink_dir("e2e-clock-sink");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/age=status=503", "--fault",
                                         "/slow=status=400", "--fault", "/down=status=503"},
                                        sink_dir.path());
  ASSERT_NO_FATAL_FAILURE(make_probe_endpoint(sink));

  struct Case {
    std::string tenant, path, policy;
    int events;
    std::string endpoint;
  };
  std::vector<Case> cases = {
      {"cj-age30m", "/age", "cj-age30m", kCeilingEvents, ""},
      {"cj-age2h", "/age", "cj-age2h", kCeilingEvents, ""},
      {"cj-slow30m", "/slow", "cj-slow30m", kCeilingEvents, ""},
      {"cj-slow2h", "/slow", "cj-slow2h", kCeilingEvents, ""},
      {"cj-held", "/down", "hub", kHeldEvents, ""},  // fixture policy: xhub, breaker on
  };
  for (Case& c : cases) {
    c.endpoint = endpoint_with_policy(*d_, c.tenant, sink.base_url() + c.path, c.policy);
    ASSERT_FALSE(c.endpoint.empty());
    for (int i = 0; i < c.events; ++i) {
      Reply r = submit_event(*d_, c.tenant, c.tenant + "-" + std::to_string(i), "refund.completed",
                             "{\"status\":\"completed\"}");
      ASSERT_EQ(r.status, 202) << r.describe();
    }
  }
  auto list = [&](const Case& c) { return deliveries_by_event(*d_, c.tenant, c.endpoint); };
  auto breaker_state = [&] {
    return d_->call("GET", "/v1/tenants/cj-held/breaker").json()["state"].str();
  };

  // Before the step: the age cases retried at least once, the slow cases are on the slow
  // ladder, the held tenant's breaker is open; nothing has ended (their ceilings are 30 min
  // away in wall-clock time).
  const bool ready = wait_until(
      [&] {
        for (const Case& c : cases) {
          auto dels = list(c);
          if (static_cast<int>(dels.size()) != c.events) return false;
          for (const auto& [id, del] : dels) {
            if (del["status"].str() != "pending") return false;
            if (c.path == "/age" && del["attempts"].i64() < 2) return false;
            if (c.path == "/slow" && del["slow_attempts"].i64() < 1) return false;
          }
        }
        const std::string st = breaker_state();
        return st == "open" || st == "half_open";
      },
      scaled(15s), 50ms);
  ASSERT_TRUE(ready) << "not in place before the step: breaker " << breaker_state() << "\n"
                     << d_->output();

  // The step: the daemon's wall clock an hour ahead, its monotonic clock unmoved. An attempt
  // started after it has a started_at past `after_step` (the daemon's clock is then an hour
  // ahead of the real one), one started before it a started_at before that.
  const int64_t after_step = real_now_ms() + kHourMs / 2;
  ASSERT_NO_FATAL_FAILURE(step(kHourMs));

  auto find = [&](const std::string& tenant) -> const Case& {
    for (const Case& c : cases) {
      if (c.tenant == tenant) return c;
    }
    throw std::logic_error("no case " + tenant);
  };
  auto count_ended = [&](const Case& c, const std::string& code) {
    int n = 0;
    for (const auto& [id, del] : list(c)) n += ended(del) && del["last_code"].str() == code;
    return n;
  };
  // Start times (the daemon's wall clock, ms) of a delivery's attempts.
  auto attempt_starts = [&](const Case& c, const Json& del) {
    std::vector<int64_t> out;
    const Json detail = get_delivery(*d_, c.tenant, del["id"].str());
    for (const Json& a : detail["attempts"].items()) {
      if (a["kind"].str() == "attempt") out.push_back(rfc3339_ms(a["started_at"].str()));
    }
    return out;
  };
  auto attempts_after_step = [&](const Case& c, const Json& del) {
    int n = 0;
    for (int64_t t : attempt_starts(c, del)) n += t >= after_step;
    return n;
  };
  // The ceilings under an hour end at the deliveries' next turn; the held ones when the
  // breaker's pause (wall clock, 400–800 ms) is over. One held delivery may be the half-open
  // probe's, out of the queue at the step: its wait did not span the step (R4.7 counts time
  // held in the queue), so it goes on.
  const bool all_ended = wait_until(
      [&] {
        return count_ended(find("cj-age30m"), "deadline_exceeded") == kCeilingEvents &&
               count_ended(find("cj-slow30m"), "deadline_exceeded") == kCeilingEvents &&
               count_ended(find("cj-held"), "breaker_hold_expired") >= kHeldEvents - 1;
      },
      scaled(10s), 50ms);
  // The ladders with a ceiling over an hour go on: a step forward makes their next attempt due
  // at once, then the ladder's pauses hold again. Wait for an attempt after the step each.
  const bool controls_moved = wait_until(
      [&] {
        for (const char* t : {"cj-age2h", "cj-slow2h"}) {
          const Case& c = find(t);
          for (const auto& [id, del] : list(c)) {
            if (attempts_after_step(c, del) == 0) return false;
          }
        }
        return true;
      },
      scaled(5s), 50ms);
  EXPECT_TRUE(all_ended) << "the ceilings under an hour did not end their deliveries after a "
                            "one-hour step forward\n"
                         << d_->output();
  EXPECT_TRUE(controls_moved) << "a delivery whose ceiling is over an hour away made no attempt "
                                 "after the step";

  const std::map<std::string, size_t> lines = sink_lines_by_id(sink);
  for (const Case& c : cases) {
    for (const auto& [id, del] : list(c)) {
      const std::string what = c.tenant + " " + id + " (" + del["status"].str() + ", " +
                               del["last_code"].str() + ", " +
                               std::to_string(del["attempts"].i64()) + " attempts)";
      // Every attempt the receiver saw is in the log, and no more.
      auto it = lines.find(del["message_id"].str());
      EXPECT_EQ(it == lines.end() ? 0 : static_cast<int64_t>(it->second), del["attempts"].i64())
          << what;
      if (c.tenant == "cj-age30m" || c.tenant == "cj-slow30m") {
        // SPEC R3.3 / R3.2: counted in wall-clock time, so the step passed them: FAILED, with
        // attempts of the ladder left, and not one attempt after the step.
        EXPECT_EQ(del["status"].str(), "failed") << what;
        EXPECT_EQ(del["last_code"].str(), "deadline_exceeded") << what;
        EXPECT_LT(del["attempts"].i64(), kCeilingLadderPauses + 1) << what;
        EXPECT_EQ(attempts_after_step(c, del), 0)
            << what << ": an attempt went out after the ceiling had passed";
        if (c.tenant == "cj-slow30m") {
          EXPECT_GE(del["slow_attempts"].i64(), 1) << what;
        }
      } else if (c.tenant == "cj-held") {
        // SPEC R4.7: the hour of the step counts as held (Delivery::held, wall clock).
        if (del["last_code"].str() == "breaker_hold_expired") {
          EXPECT_EQ(del["status"].str(), "failed") << what;
          EXPECT_GE(del["held_ms"].num(), static_cast<double>(kHourMs - 60'000)) << what;
        } else {
          EXPECT_EQ(del["status"].str(), "pending") << what << ": ended otherwise than by R4.7";
        }
      } else {
        // Ceilings 2 h away: the one-hour step does not reach them.
        EXPECT_EQ(del["status"].str(), "pending") << what;
        EXPECT_EQ(del["last_code"].str(), c.path == "/age" ? "http_503" : "http_400") << what;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// -1 h, +2 h, -1 h under load.

constexpr int kLadderPauses = 6;
constexpr int64_t kPauseMs = 500;
constexpr int kBudget = kLadderPauses + 1;  // SPEC R5.1 shape: n pauses = n + 1 attempts
constexpr const char* kLoadTenant = "cj-load";

// Submits one event every `every` from its own thread; remembers the acknowledged ones.
class Producer {
 public:
  Producer(const Daemon& d, Millis every) : d_(d), every_(every) {
    thread_ = std::thread([this] { run(); });
  }
  ~Producer() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<std::string> acked() {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_;
  }
  int refused() const { return refused_.load(); }

 private:
  void run() {
    auto next = SteadyClock::now();
    for (int n = 0; !stop_.load() && n < 2000; ++n) {
      const std::string id = "cj-" + std::to_string(n);
      Reply r = submit_event(d_, kLoadTenant, id, "cj.load", "{\"n\":" + std::to_string(n) + "}");
      if (r.status == 202 || r.status == 200) {
        std::lock_guard<std::mutex> lock(mu_);
        acked_.push_back(id);
      } else {
        refused_++;
      }
      next += every_;
      std::this_thread::sleep_until(next);
    }
  }

  const Daemon& d_;
  Millis every_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> acked_;
  std::atomic<int> refused_{0};
};

// Counts the requests the sink recorded (its ids file) every 50 ms, on the real monotonic clock.
class SinkSampler {
 public:
  explicit SinkSampler(const SinkProcess& sink) : path_(sink.ids_file) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const std::string text = test::read_file(path_);
        const size_t n = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
        {
          std::lock_guard<std::mutex> lock(mu_);
          samples_.emplace_back(SteadyClock::now(), n);
        }
        std::this_thread::sleep_for(50ms);
      }
    });
  }
  ~SinkSampler() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Requests recorded by `t` (the first sample at or after it).
  size_t at(SteadyClock::time_point t) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [when, n] : samples_) {
      if (when >= t) return n;
    }
    return samples_.empty() ? 0 : samples_.back().second;
  }

 private:
  std::string path_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<SteadyClock::time_point, size_t>> samples_;
};

// Deliveries that are live in the daemon: waiting for their time, queued, or on the wire.
int64_t live_deliveries(const Daemon& d) {
  const Metrics m = scrape_metrics(d);
  int64_t n = 0;
  for (const char* g : {"ringcast_deliveries_pending", "ringcast_deliveries_ready",
                        "ringcast_deliveries_in_flight"})
    n += std::max<int64_t>(0, static_cast<int64_t>(metric(m, g)));
  return n;
}

TEST_F(E2eClockJump, StepsBackAndForwardUnderLoad) {
  DaemonOptions o;
  std::string ladder = "[";
  for (int i = 0; i < kLadderPauses; ++i)
    ladder += std::string(i ? ", " : "") + "\"" + std::to_string(kPauseMs) + "ms\"";
  ladder += "]";
  // No ceiling within reach (max_age stays the preset's 30 days, R3.3): a delivery ends
  // delivered, or failed with its 7 attempts spent.
  o.extra_toml = "[policies.cj-jump]\nbase = \"smengo\"\nladder = " + ladder +
                 "\njitter = 0.0\nauto_disable = false\n";
  ASSERT_NO_THROW(start_daemon(std::move(o)));
  TempDir sink_dir("e2e-clock-load-sink");
  SinkProcess sink =
      SinkProcess::start({"--quiet", "--fault", "/jump=status=503:0.5"}, sink_dir.path());
  ASSERT_NO_FATAL_FAILURE(make_probe_endpoint(sink));
  const std::string ep =
      endpoint_with_policy(*d_, kLoadTenant, sink.base_url() + "/jump", "cj-jump");
  ASSERT_FALSE(ep.empty());

  // The steps, on the real monotonic clock from the start of the load.
  struct Step {
    Millis at;
    int64_t offset_ms;
    const char* name;
  };
  const std::vector<Step> steps = {
      {3000ms, -kHourMs, "-1h (back 1 h)"},
      {7000ms, kHourMs, "+1h (forward 2 h)"},
      {11000ms, 0, "+0 (back 1 h)"},
  };
  const Millis load_for = 13000ms;

  SinkSampler sampler(sink);
  const auto t0 = SteadyClock::now();
  Producer producer(*d_, 60ms);  // ~16 events/s
  std::vector<SteadyClock::time_point> step_times;
  std::vector<int64_t> live_at_step;
  for (const Step& s : steps) {
    std::this_thread::sleep_until(t0 + s.at);
    live_at_step.push_back(live_deliveries(*d_));
    step_times.push_back(SteadyClock::now());
    ASSERT_NO_FATAL_FAILURE(step(s.offset_ms)) << s.name;
  }
  std::this_thread::sleep_until(t0 + load_for);
  producer.stop();
  const std::vector<std::string> acked = producer.acked();
  ASSERT_GT(acked.size(), 100u) << "the producer got " << producer.refused() << " refusals\n"
                                << d_->output();

  // No stuck retry: with the clock back at real time, every acknowledged event ends within the
  // ladder's length (6 × 500 ms), twice that while the daemon's clock runs at half speed after
  // the last step back, and some slack.
  std::map<std::string, Json> dels;
  wait_until(
      [&] {
        dels = deliveries_by_event(*d_, kLoadTenant, ep);
        for (const std::string& id : acked) {
          auto it = dels.find(id);
          if (it == dels.end() || !ended(it->second)) return false;
        }
        return true;
      },
      scaled(12s), 100ms);
  sampler.stop();
  const std::map<std::string, size_t> lines = sink_lines_by_id(sink);

  std::vector<std::string> lost, stuck, over_budget, bad_end;
  int delivered = 0, failed = 0;
  for (const std::string& id : acked) {
    auto it = dels.find(id);
    if (it == dels.end()) {
      lost.push_back(id);
      continue;
    }
    const Json& del = it->second;
    const int64_t attempts = del["attempts"].i64();
    const std::string what = id + " (" + del["status"].str() + ", " + std::to_string(attempts) +
                             " attempts, last " + del["last_code"].str() + ", next " +
                             del["next_attempt_at"].str() + ")";
    auto l = lines.find(del["message_id"].str());
    const int64_t seen = l == lines.end() ? 0 : static_cast<int64_t>(l->second);
    if (attempts > kBudget || seen > kBudget) over_budget.push_back(what);
    if (!ended(del)) {
      stuck.push_back(what);
      continue;
    }
    EXPECT_EQ(seen, attempts) << what << ": the receiver saw " << seen << " requests";
    if (del["status"].str() == "delivered") {
      ++delivered;
    } else if (del["status"].str() == "failed" && attempts == kBudget &&
               del["last_code"].str() == "http_503") {
      ++failed;  // the ladder used up (SPEC R5.1); no ceiling ends anything here
    } else {
      bad_end.push_back(what);
    }
  }
  EXPECT_TRUE(lost.empty()) << lost.size()
                            << " acknowledged events have no delivery: " << sample(lost);
  // SPEC R2.2 / R5.1: the budget holds whatever the clock does.
  EXPECT_TRUE(over_budget.empty())
      << "more than " << kBudget << " attempts: " << sample(over_budget);
  EXPECT_TRUE(bad_end.empty()) << "ended otherwise than delivered or failed with the ladder "
                                  "used up: "
                               << sample(bad_end);
  // No stuck retry: the scheduler keeps due times in the loop's wall clock, which a step back
  // does not take back (net/loop.h), so a waiting retry is late by at most its own pause (the
  // half speed), never by the length of the step.
  EXPECT_TRUE(stuck.empty()) << stuck.size() << " of " << acked.size()
                             << " acknowledged events did not end within twice the ladder's "
                                "length after the clock stepped back: "
                             << sample(stuck) << "; the daemon's clock is now "
                             << daemon_offset_ms() << " ms off real time";
  EXPECT_GT(delivered, 0);
  RecordProperty("delivered", delivered);
  RecordProperty("failed_ladder_used_up", failed);
  RecordProperty("stuck", static_cast<int>(stuck.size()));

  // No retry storm, per delivery: two attempts of one delivery are at least the ladder's pause
  // apart. started_at is the daemon's wall clock; a pair on both sides of a step differs by
  // about an hour or more and is left out (a step forward makes a waiting attempt due at once,
  // which is documented). Within one clock phase the difference is the daemon's clock: real
  // time, or half of it while the system clock is behind (pauses then last twice as long, and
  // none is skipped: SPEC R5.1).
  std::vector<std::string> too_close;
  int checked_pairs = 0;
  for (const std::string& id : acked) {
    auto it = dels.find(id);
    if (it == dels.end() || it->second["attempts"].i64() < 2) continue;
    const Json detail = get_delivery(*d_, kLoadTenant, it->second["id"].str());
    std::vector<int64_t> starts;
    for (const Json& a : detail["attempts"].items()) {
      if (a["kind"].str() == "attempt") starts.push_back(rfc3339_ms(a["started_at"].str()));
    }
    for (size_t k = 0; k + 1 < starts.size(); ++k) {
      const int64_t gap = starts[k + 1] - starts[k];
      if (gap < -10 * 60'000 || gap > 10 * 60'000) continue;  // a step lies between them
      ++checked_pairs;
      if (gap < kPauseMs - 5) {
        too_close.push_back(id + " attempts " + std::to_string(k + 1) + "→" +
                            std::to_string(k + 2) + " " + std::to_string(gap) + " ms apart");
      }
    }
  }
  EXPECT_GT(checked_pairs, 20) << "too few retries to judge the pauses";
  EXPECT_TRUE(too_close.empty()) << too_close.size() << " of " << checked_pairs
                                 << " retries came sooner than the ladder's " << kPauseMs
                                 << " ms pause: " << sample(too_close);

  // No retry storm, in all: in the 2 s after a step the receiver gets at most 3× what it got in
  // the 2 s before the first step, plus one attempt per delivery live at the step (a step
  // forward makes every waiting one due at once, never more than one attempt each).
  const auto base_from = step_times[0] - 2s;
  const size_t baseline = sampler.at(step_times[0]) - sampler.at(base_from);
  for (size_t i = 0; i < steps.size(); ++i) {
    const size_t after = sampler.at(step_times[i] + 2s) - sampler.at(step_times[i]);
    const size_t allowed =
        3 * std::max<size_t>(baseline, 20) + static_cast<size_t>(live_at_step[i]);
    EXPECT_LE(after, allowed) << "step " << steps[i].name << ": " << after
                              << " requests in the 2 s after it, " << baseline
                              << " in the 2 s before the first step, " << live_at_step[i]
                              << " deliveries live at the step";
  }
}

}  // namespace
}  // namespace ringcast::e2e
