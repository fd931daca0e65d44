// api/forward_auth: what one node signs for another (SPEC R14.4). A signature covers every part
// of the call; a call is accepted once, inside the clock window; the principal's text has one
// form; the replay cache is bounded and refuses rather than forgets.
#include "api/forward_auth.h"

#include <gtest/gtest.h>

#include <string>

namespace ringcast::api {
namespace {

constexpr const char* kSecret = "auth-test-cluster-secret-0123456789abcdef";
const WallTime kT0 = WallTime::from_ms(1'800'000'000'000);

const Principal kKey{Principal::Kind::kKey, "acme", true, "00112233aabbccdd"};

ForwardVerdict check(ForwardAuth& a, const SignedHeaders& h, WallTime at, Principal& out,
                     std::string_view origin = "node-a", std::string_view method = "PATCH",
                     std::string_view target = "/v1/tenants/acme/endpoints/1",
                     std::string_view body = "{\"x\":1}") {
  return a.verify_parts(origin, method, target, body, h.principal, h.signature, at, out);
}

TEST(ForwardAuth, ASignedCallIsAcceptedOnceWithItsPrincipal) {
  ForwardAuth a(kSecret);
  const SignedHeaders h =
      a.sign(kKey, "node-a", "PATCH", "/v1/tenants/acme/endpoints/1", "{\"x\":1}", kT0);
  Principal got;
  ASSERT_EQ(check(a, h, kT0 + seconds(2), got), ForwardVerdict::kOk);
  EXPECT_EQ(got.kind, Principal::Kind::kKey);
  EXPECT_EQ(got.tenant, "acme");
  EXPECT_TRUE(got.read_only);
  EXPECT_EQ(got.key_id, "00112233aabbccdd");
  EXPECT_EQ(check(a, h, kT0 + seconds(3), got), ForwardVerdict::kReplayed);
  EXPECT_EQ(a.remembered(), 1u);
}

TEST(ForwardAuth, EveryPartIsCovered) {
  ForwardAuth a(kSecret);
  const SignedHeaders h =
      a.sign(kKey, "node-a", "PATCH", "/v1/tenants/acme/endpoints/1", "{\"x\":1}", kT0);
  Principal got;
  EXPECT_EQ(check(a, h, kT0, got, "node-c"), ForwardVerdict::kBadSignature);
  EXPECT_EQ(check(a, h, kT0, got, "node-a", "DELETE"), ForwardVerdict::kBadSignature);
  EXPECT_EQ(check(a, h, kT0, got, "node-a", "PATCH", "/v1/tenants/zeta/endpoints/1"),
            ForwardVerdict::kBadSignature);
  EXPECT_EQ(check(a, h, kT0, got, "node-a", "PATCH", "/v1/tenants/acme/endpoints/1", "{}"),
            ForwardVerdict::kBadSignature);
  // Another principal under the same signature: a view key made a writer, another tenant.
  SignedHeaders p = h;
  p.principal = "v1 key rw 00112233aabbccdd acme";
  EXPECT_EQ(check(a, p, kT0, got), ForwardVerdict::kBadSignature);
  p.principal = "v1 admin rw - -";
  EXPECT_EQ(check(a, p, kT0, got), ForwardVerdict::kBadSignature);
  // Another timestamp or nonce.
  SignedHeaders t = h;
  t.signature.replace(2, 13, std::to_string(kT0.ms() + 1));
  EXPECT_EQ(check(a, t, kT0, got), ForwardVerdict::kBadSignature);
  // Another secret.
  ForwardAuth other("another-cluster-secret-0123456789abcdef");
  EXPECT_EQ(check(other, h, kT0, got), ForwardVerdict::kBadSignature);
  // None of the refusals used the nonce up.
  EXPECT_EQ(check(a, h, kT0, got), ForwardVerdict::kOk);
}

TEST(ForwardAuth, OutsideTheWindowIsStaleEitherWay) {
  ForwardAuth a(kSecret, seconds(30));
  Principal got;
  const auto sign_at = [&](WallTime t) {
    return a.sign(kKey, "node-a", "PATCH", "/v1/tenants/acme/endpoints/1", "{\"x\":1}", t);
  };
  EXPECT_EQ(check(a, sign_at(kT0), kT0 + seconds(31), got), ForwardVerdict::kStale);
  EXPECT_EQ(check(a, sign_at(kT0 + seconds(31)), kT0, got), ForwardVerdict::kStale);
  EXPECT_EQ(check(a, sign_at(kT0), kT0 + seconds(30), got), ForwardVerdict::kOk);
  EXPECT_EQ(check(a, sign_at(kT0 + seconds(29)), kT0, got), ForwardVerdict::kOk);
}

TEST(ForwardAuth, TheReplayCacheForgetsOnlyWhatCanNoLongerBeFreshAndRefusesWhenFull) {
  ForwardAuth a(kSecret, seconds(30), 2);
  Principal got;
  const auto call = [&](WallTime signed_at, WallTime at, const std::string& nonce) {
    const SignedHeaders h = a.sign_with_nonce(
        kKey, "node-a", "PATCH", "/v1/tenants/acme/endpoints/1", "{\"x\":1}", signed_at, nonce);
    return check(a, h, at, got);
  };
  const std::string n1(32, '1'), n2(32, '2'), n3(32, '3');
  EXPECT_EQ(call(kT0, kT0, n1), ForwardVerdict::kOk);
  EXPECT_EQ(call(kT0, kT0, n2), ForwardVerdict::kOk);
  EXPECT_EQ(call(kT0, kT0, n3), ForwardVerdict::kBusy);  // full of live nonces
  // 59 s on, n1 could still be fresh for a sender whose clock runs 29 s ahead: remembered.
  EXPECT_EQ(call(kT0 + seconds(59), kT0 + seconds(59), n1), ForwardVerdict::kReplayed);
  // Past 2 × window they are forgotten (a call carrying them is stale anyway).
  EXPECT_EQ(call(kT0 + seconds(61), kT0 + seconds(61), n3), ForwardVerdict::kOk);
  EXPECT_EQ(call(kT0, kT0 + seconds(61), n1), ForwardVerdict::kStale);
}

TEST(ForwardAuth, MalformedHeadersAreRefusedBeforeAnyMac) {
  ForwardAuth a(kSecret);
  Principal got;
  const SignedHeaders h =
      a.sign(kKey, "node-a", "PATCH", "/v1/tenants/acme/endpoints/1", "{\"x\":1}", kT0);
  const std::string n(32, '0'), m(64, '0');
  for (const std::string& sig :
       {std::string(), std::string("t=1"), std::string("t=1,n=2"), "n=" + n + ",t=1,s=" + m,
        "t=-1,n=" + n + ",s=" + m, "t=1,n=" + n.substr(1) + "z,s=" + m, "t=x,n=" + n + ",s=" + m,
        "t=1,n=" + n + ",s=" + m.substr(1), "t=1,n=" + n + ",s=" + m + ",x=1"}) {
    SignedHeaders bad = h;
    bad.signature = sig;
    EXPECT_EQ(check(a, bad, kT0, got), ForwardVerdict::kMalformed) << sig;
  }
  for (const char* p :
       {"", "v1", "v2 key ro 00112233aabbccdd acme", "v1 key ro - acme", "v1 admin rw - acme",
        "v1 admin ro - -", "v1 key xx 00 acme", "v1 session rw - -", "v1 key ro 0011 acme extra",
        "v1 key ro ZZ acme", "v1  key ro 00 acme"}) {
    Principal out;
    EXPECT_FALSE(decode_principal(p, out)) << p;
  }
  for (const Principal& p :
       {Principal{}, kKey, Principal{Principal::Kind::kSession, "acme", false, ""},
        Principal{Principal::Kind::kSession, "acme", true, "0a0b"}}) {
    Principal out;
    ASSERT_TRUE(decode_principal(encode_principal(p), out)) << encode_principal(p);
    EXPECT_EQ(out.kind, p.kind);
    EXPECT_EQ(out.tenant, p.tenant);
    EXPECT_EQ(out.read_only, p.read_only);
    EXPECT_EQ(out.key_id, p.key_id);
  }
}

}  // namespace
}  // namespace ringcast::api
