// Endpoint state machine (SPEC R8, R9): transitions, send/enqueue gates, disable notification.
#include "core/endpoint_rules.h"

#include <gtest/gtest.h>

namespace ringcast {
namespace {

const WallTime kT0 = WallTime::from_ms(1'767'225'600'000);
using S = EndpointState;
using A = EndpointAction;

Endpoint ep(S s) {
  Endpoint e;
  e.id = 7;
  e.tenant = "acme";
  e.url = "https://hooks.example.com/x";
  e.state = s;
  if (s == S::kDisabled) e.disabled_reason = ErrorCode::of(ErrorCode::Kind::kGone);
  return e;
}

TEST(EndpointRules, TransitionTable) {
  struct Row {
    S from;
    A action;
    bool ok;
    S to;
    bool changed;
  };
  const Row rows[] = {
      {S::kEnabled, A::kPause, true, S::kPaused, true},
      {S::kPaused, A::kPause, true, S::kPaused, false},
      {S::kDisabled, A::kPause, false, S::kDisabled, false},
      {S::kPaused, A::kResume, true, S::kEnabled, true},
      {S::kEnabled, A::kResume, true, S::kEnabled, false},
      {S::kDisabled, A::kResume, false, S::kDisabled, false},
      {S::kDisabled, A::kEnable, true, S::kEnabled, true},
      {S::kPaused, A::kEnable, true, S::kEnabled, true},
      {S::kEnabled, A::kEnable, true, S::kEnabled, false},
  };
  for (const Row& r : rows) {
    Result<ActionResult> got = apply_endpoint_action(ep(r.from), r.action, kT0);
    SCOPED_TRACE(std::string(endpoint_state_name(r.from)) + " " + endpoint_action_name(r.action));
    ASSERT_EQ(got.ok(), r.ok);
    if (!r.ok) {
      EXPECT_STREQ(got.error().reason, "endpoint_disabled");
      continue;
    }
    EXPECT_EQ(got->endpoint.state, r.to);
    EXPECT_EQ(got->changed, r.changed);
    EXPECT_TRUE(got->endpoint.disabled_reason.is_none());
    if (r.changed) {
      EXPECT_EQ(got->endpoint.updated_at, kT0);
    }
  }
}

TEST(EndpointRules, Gates) {
  // SPEC R9.1: only enabled endpoints take new deliveries.
  EXPECT_TRUE(accepts_new_deliveries(ep(S::kEnabled)));
  EXPECT_FALSE(accepts_new_deliveries(ep(S::kPaused)));
  EXPECT_FALSE(accepts_new_deliveries(ep(S::kDisabled)));
  // R9.2 queued ones wait while paused; R9.3/R8.5 tests go out while paused or disabled.
  EXPECT_TRUE(may_send(ep(S::kEnabled), false));
  EXPECT_FALSE(may_send(ep(S::kPaused), false));
  EXPECT_FALSE(may_send(ep(S::kDisabled), false));
  EXPECT_TRUE(may_send(ep(S::kPaused), true));
  EXPECT_TRUE(may_send(ep(S::kDisabled), true));
}

TEST(EndpointRules, DisableAndNotify) {
  const ErrorCode gone = ErrorCode::of(ErrorCode::Kind::kGone);
  Endpoint d = disabled_endpoint(ep(S::kEnabled), gone, kT0);
  EXPECT_EQ(d.state, S::kDisabled);
  EXPECT_EQ(d.disabled_reason, gone);
  EXPECT_EQ(d.updated_at, kT0);
  Notification n = disable_notification(d, gone, 99, 1, kT0);
  EXPECT_EQ(n.kind, "endpoint_disabled");
  EXPECT_EQ(n.tenant, "acme");
  EXPECT_EQ(n.endpoint, 7u);
  EXPECT_EQ(n.reason, gone);
  EXPECT_NE(n.message.find("410"), std::string::npos);
  Notification x = disable_notification(d, ErrorCode::http(500), 5, 8, kT0);
  EXPECT_NE(x.message.find("exhausted 8 attempts"), std::string::npos);
  EXPECT_NE(x.message.find("http_500"), std::string::npos);
}

}  // namespace
}  // namespace ringcast
