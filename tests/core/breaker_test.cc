// Circuit breaker per tenant (SPEC R4): window, thresholds, pauses, probes, reset, snapshot.
#include "core/breaker.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/classify.h"

namespace ringcast {
namespace {

using State = Breaker::State;
using Admit = Breaker::Admit;
const WallTime kT0 = WallTime::from_ms(1'767'225'600'000);

TransportResult http(int status) {
  TransportResult r;
  r.response_received = r.request_written = r.connect_attempted = true;
  r.http_status = static_cast<uint16_t>(status);
  return r;
}
TransportResult net(ErrorCode code, bool written, bool connect = true) {
  TransportResult r;
  r.connect_attempted = connect;
  r.request_written = written;
  r.code = code;
  return r;
}
BreakerSignal sig(const TransportResult& r) {
  return breaker_signal(classify(r, kT0));
}

constexpr BreakerSignal F = BreakerSignal::kFailure;
constexpr BreakerSignal S = BreakerSignal::kSuccess;

TEST(BreakerSignal, OnlyUnavailabilityCounts) {
  using K = ErrorCode::Kind;
  // SPEC R4.5: network, timeout, 5xx → failure; 4xx never; our own refusals are ignored.
  EXPECT_EQ(sig(http(500)), F);
  EXPECT_EQ(sig(http(502)), F);
  EXPECT_EQ(sig(http(503)), F);
  EXPECT_EQ(sig(http(504)), F);
  EXPECT_EQ(sig(net(ErrorCode::of(K::kTimeout), true)), F);
  EXPECT_EQ(sig(net(ErrorCode::network(111), false)), F);  // ECONNREFUSED
  EXPECT_EQ(sig(net(ErrorCode::network(104), true)), F);   // ECONNRESET after write
  EXPECT_EQ(sig(net(ErrorCode::of(K::kDnsFailed), false, false)), F);
  for (int s : {200, 204, 301, 400, 401, 403, 404, 409, 410, 422, 429}) {
    EXPECT_EQ(sig(http(s)), S) << s;
  }
  EXPECT_EQ(sig(net(ErrorCode::of(K::kPrivateAddress), false, false)), BreakerSignal::kIgnore);
  EXPECT_EQ(sig(net(ErrorCode::of(K::kNotHttps), false, false)), BreakerSignal::kIgnore);
}

TEST(Breaker, OpensAtFiveDeliveriesAndEightyPercent) {
  BreakerConfig cfg;
  struct Row {
    std::vector<BreakerSignal> seq;
    bool opens;  // after the whole sequence
  };
  const Row rows[] = {
      {{F, F, F, F}, false},              // 4 deliveries: too few
      {{F, F, F, F, F}, true},            // 5/5
      {{S, F, F, F, F}, true},            // 4/5 = 80 %
      {{S, S, F, F, F, F}, false},        // 4/6
      {{S, S, F, F, F, F, F}, false},     // 5/7 = 71 %
      {{S, S, F, F, F, F, F, F}, false},  // 6/8 = 75 %
  };
  for (size_t i = 0; i < std::size(rows); ++i) {
    Breaker b(cfg);
    WallTime t = kT0;
    for (BreakerSignal s : rows[i].seq) {
      b.record(s, false, t);
      t += seconds(1);
    }
    EXPECT_EQ(b.state() == State::kOpen, rows[i].opens) << "row " << i;
  }
  // 8/10 exactly 80 %, reached on the last failure.
  Breaker b(cfg);
  for (BreakerSignal s : {S, S, F, F, F, F, F, F, F}) b.record(s, false, kT0);
  EXPECT_EQ(b.state(), State::kClosed);  // 7/9 = 77.8 %
  EXPECT_TRUE(b.record(F, false, kT0));  // 8/10
  EXPECT_EQ(b.state(), State::kOpen);
}

TEST(Breaker, SuccessNeverOpens) {
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(b.record(S, false, kT0 + seconds(i)));
  EXPECT_EQ(b.state(), State::kClosed);
}

TEST(Breaker, FourxxNeverOpens) {
  // SPEC R4.5: a tenant answering 4xx to everything is available.
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 50; ++i) b.record(sig(http(400 + i % 29)), false, kT0 + seconds(i));
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_EQ(b.window_failed(kT0 + seconds(50)), 0u);
}

TEST(Breaker, WindowSlidesOverFiveMinutes) {
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 4; ++i) b.record(F, false, kT0 + seconds(i));
  EXPECT_EQ(b.window_total(kT0 + minutes(4)), 4u);
  // Six minutes later the four are out of the window: one more failure is 1/1, too few.
  EXPECT_EQ(b.window_total(kT0 + minutes(6)), 0u);
  b.record(F, false, kT0 + minutes(6));
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_EQ(b.window_total(kT0 + minutes(6)), 1u);
  // Within the window they add up.
  Breaker c{BreakerConfig{}};
  for (int i = 0; i < 4; ++i) c.record(F, false, kT0 + minutes(i));  // 0..3 min
  c.record(F, false, kT0 + minutes(4));
  EXPECT_EQ(c.state(), State::kOpen);
}

TEST(Breaker, PauseDoublesPerFailedProbeCappedAt30Min) {
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  ASSERT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.hold_since(), kT0);
  WallTime t = kT0;
  const Duration pauses[] = {minutes(5),  minutes(10), minutes(20),
                             minutes(30), minutes(30), minutes(30)};
  for (Duration pause : pauses) {
    EXPECT_EQ(b.reopen_at(), t + pause);
    EXPECT_EQ(b.admit(t + pause - milliseconds(1)), Admit::kHold);
    EXPECT_FALSE(b.advance(t + pause - milliseconds(1)));
    EXPECT_EQ(b.state(), State::kOpen);
    t = t + pause;
    EXPECT_TRUE(b.advance(t));
    ASSERT_EQ(b.state(), State::kHalfOpen);
    // SPEC R4.3: one probe per cycle.
    ASSERT_EQ(b.admit(t), Admit::kProbe);
    b.on_probe_sent(t);
    EXPECT_EQ(b.admit(t), Admit::kHold);
    EXPECT_EQ(b.admit(t + seconds(30)), Admit::kHold);
    t += seconds(3);
    EXPECT_TRUE(b.record(F, /*probe=*/true, t));  // probe failed → open, doubled
    EXPECT_EQ(b.state(), State::kOpen);
    EXPECT_EQ(b.hold_since(), kT0);  // the episode started at the first opening
  }
  EXPECT_EQ(b.failed_probes(), 6u);
}

TEST(Breaker, ProbeSuccessClosesAndResets) {
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  WallTime t = kT0 + minutes(5);
  b.advance(t);
  b.on_probe_sent(t);
  b.record(F, true, t);  // one failed probe: pause 10 min
  t += minutes(10);
  b.advance(t);
  ASSERT_EQ(b.admit(t), Admit::kProbe);
  b.on_probe_sent(t);
  EXPECT_TRUE(b.record(S, true, t + seconds(1)));
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_EQ(b.failed_probes(), 0u);
  EXPECT_EQ(b.window_total(t + seconds(1)), 0u);
  EXPECT_EQ(b.admit(t), Admit::kAllow);
  // Counters reset: it takes five fresh failures again, and the pause starts at 5 min.
  for (int i = 0; i < 4; ++i) b.record(F, false, t + seconds(2));
  EXPECT_EQ(b.state(), State::kClosed);
  b.record(F, false, t + seconds(2));
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.reopen_at(), t + seconds(2) + minutes(5));
  EXPECT_EQ(b.hold_since(), t + seconds(2));
}

TEST(Breaker, FourxxProbeCloses) {
  // The probe reached an answering receiver: available (R4.5).
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  b.advance(kT0 + minutes(5));
  b.on_probe_sent(kT0 + minutes(5));
  b.record(sig(http(404)), true, kT0 + minutes(5));
  EXPECT_EQ(b.state(), State::kClosed);
}

TEST(Breaker, StragglersDoNotMoveAnOpenBreaker) {
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  EXPECT_FALSE(b.record(S, false, kT0 + seconds(1)));  // in flight before it opened
  EXPECT_FALSE(b.record(F, false, kT0 + seconds(1)));
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.reopen_at(), kT0 + minutes(5));
  b.advance(kT0 + minutes(5));
  EXPECT_FALSE(b.record(S, false, kT0 + minutes(5)));  // not the probe
  EXPECT_EQ(b.state(), State::kHalfOpen);
}

TEST(Breaker, LostOrRefusedProbeFreesTheSlot) {
  BreakerConfig cfg;
  Breaker b(cfg);
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  WallTime t = kT0 + minutes(5);
  b.advance(t);
  b.on_probe_sent(t);
  EXPECT_EQ(b.admit(t + cfg.probe_timeout - milliseconds(1)), Admit::kHold);
  EXPECT_EQ(b.admit(t + cfg.probe_timeout), Admit::kProbe);  // never answered
  b.on_probe_sent(t + cfg.probe_timeout);
  b.record(BreakerSignal::kIgnore, true, t + cfg.probe_timeout);  // refused before sending
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_EQ(b.admit(t + cfg.probe_timeout), Admit::kProbe);
}

TEST(Breaker, ManualReset) {
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  b.advance(kT0 + minutes(5));
  b.on_probe_sent(kT0 + minutes(5));
  b.record(F, true, kT0 + minutes(5));
  ASSERT_EQ(b.state(), State::kOpen);
  b.reset(kT0 + minutes(6));
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_EQ(b.admit(kT0 + minutes(6)), Admit::kAllow);
  EXPECT_EQ(b.failed_probes(), 0u);
  EXPECT_EQ(b.window_total(kT0 + minutes(6)), 0u);
  EXPECT_FALSE(b.next_transition().has_value());
}

TEST(Breaker, SnapshotRoundTrip) {
  BreakerConfig cfg;
  Breaker b(cfg);
  for (int i = 0; i < 5; ++i) b.record(F, false, kT0);
  b.advance(kT0 + minutes(5));
  b.on_probe_sent(kT0 + minutes(5));
  b.record(F, true, kT0 + minutes(5));
  BreakerSnapshot s = b.snapshot();
  EXPECT_EQ(s.state, State::kOpen);
  EXPECT_EQ(s.failed_probes, 1u);
  EXPECT_EQ(s.opened_at, kT0);
  EXPECT_EQ(s.reopen_at, kT0 + minutes(15));

  Breaker r(cfg);
  r.restore(s, kT0 + minutes(6));
  EXPECT_EQ(r.state(), State::kOpen);
  EXPECT_EQ(r.reopen_at(), kT0 + minutes(15));
  EXPECT_EQ(r.hold_since(), kT0);
  r.advance(kT0 + minutes(15));
  r.on_probe_sent(kT0 + minutes(15));
  r.record(F, true, kT0 + minutes(15));
  EXPECT_EQ(r.reopen_at(), kT0 + minutes(35));  // doubling carried over: 20 min

  // A half-open snapshot lost its probe with the process: probe again at once.
  BreakerSnapshot h = s;
  h.state = State::kHalfOpen;
  Breaker q(cfg);
  q.restore(h, kT0 + hours(1));
  EXPECT_EQ(q.state(), State::kOpen);
  EXPECT_TRUE(q.advance(kT0 + hours(1)));
  EXPECT_EQ(q.admit(kT0 + hours(1)), Admit::kProbe);
}

TEST(Breaker, MemoryIsBoundedPerTenant) {
  static_assert(sizeof(Breaker) <= 320, "fixed per-tenant footprint");
  Breaker b{BreakerConfig{}};
  for (int i = 0; i < 1'000'000; ++i) b.record(S, false, kT0 + milliseconds(i));
  EXPECT_GT(b.window_total(kT0 + milliseconds(999'999)), 0u);
  EXPECT_LE(b.window_total(kT0 + milliseconds(999'999)), 1'000'000u);
}

// SPEC R4.1, from the seed's wording: "≥ 5 deliveries in a sliding 5-minute window and ≥ 80 % of
// them failed". A delivery is one sample however often it is retried: its latest result there.
struct DeliveryRow {
  const char* name;
  std::vector<std::vector<BreakerSignal>> deliveries;  // each delivery's results, in order
  bool opens;
};

TEST(Breaker, CountsDeliveriesNotAttempts) {
  const std::vector<DeliveryRow> rows = {
      {"one delivery, ten failed attempts", {{F, F, F, F, F, F, F, F, F, F}}, false},
      {"four deliveries failing five times each",
       {{F, F, F, F, F}, {F, F, F, F, F}, {F, F, F, F, F}, {F, F, F, F, F}},
       false},
      {"five deliveries, each failed once", {{F}, {F}, {F}, {F}, {F}}, true},
      {"five deliveries, four failed: exactly 80 %", {{S}, {F}, {F}, {F}, {F}}, true},
      {"five deliveries, three failed: 60 %", {{F}, {F}, {F}, {S}, {S}}, false},
      {"a retry that succeeded counts as a success", {{F, F, F, F, S}, {F}, {F}, {F}}, false},
      {"a success that later failed counts as a failure", {{S, F}, {F}, {F}, {F}, {F}}, true},
      {"six deliveries, five failed: 83 %", {{S}, {F}, {F}, {F}, {F}, {F}}, true},
  };
  for (const DeliveryRow& row : rows) {
    Breaker b;
    WallTime t = kT0;
    bool opened = false;
    std::vector<uint32_t> marks(row.deliveries.size(), 0);
    // One delivery's results, then the next one's (the order decides nothing but when the
    // check runs: it runs when a failure comes in).
    for (size_t d = 0; d < row.deliveries.size() && !opened; ++d) {
      for (BreakerSignal sample : row.deliveries[d]) {
        opened = b.record(sample, false, t, &marks[d]);
        t = t + seconds(2);  // well inside the window
        if (opened) break;
      }
    }
    EXPECT_EQ(opened, row.opens) << row.name;
    EXPECT_EQ(b.state() == State::kOpen, row.opens) << row.name;
    if (!row.opens) {
      EXPECT_EQ(b.window_total(t), row.deliveries.size()) << row.name;
    }
  }
}

TEST(Breaker, ASampleOutsideTheWindowIsNotTakenBackTwice) {
  Breaker b;
  uint32_t mark = 0;
  WallTime t = kT0;
  EXPECT_FALSE(b.record(F, false, t, &mark));
  t = t + minutes(6);  // the first sample rolled out of the window
  uint32_t other = 0;
  EXPECT_FALSE(b.record(S, false, t, &other));
  EXPECT_FALSE(b.record(F, false, t, &mark));  // the same delivery again: a new sample
  EXPECT_EQ(b.window_total(t), 2u);
  EXPECT_EQ(b.window_failed(t), 1u);
  b.reset(t);  // a cleared window voids every mark
  EXPECT_FALSE(b.record(S, false, t, &other));
  EXPECT_FALSE(b.record(S, false, t, &mark));
  EXPECT_EQ(b.window_total(t), 2u);
  EXPECT_EQ(b.window_failed(t), 0u);
}

}  // namespace
}  // namespace ringcast
