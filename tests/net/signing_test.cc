// Signature profiles (SPEC R11): known vectors, header layout, rotation, verification.
#include "net/signing.h"

#include <gtest/gtest.h>

namespace ringcast::net {
namespace {

TEST(SigningTest, HmacSha256Rfc4231Case2) {
  auto d = hmac_sha256("Jefe", {"what do ya want ", "for nothing?"});
  EXPECT_EQ(hex_encode({reinterpret_cast<const char*>(d.data()), d.size()}),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(SigningTest, Base64RoundTripAndSecretDecoding) {
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  EXPECT_EQ(base64_decode("aGVsbG8=").value(), "hello");
  EXPECT_FALSE(base64_decode("a$==").has_value());
  EXPECT_EQ(decode_secret("whsec_aGVsbG8=").value(), "hello");
  EXPECT_EQ(decode_secret("plain").value(), "plain");
  EXPECT_FALSE(decode_secret("whsec_!!").has_value());
}

// The Standard Webhooks reference example (standard-webhooks spec, svix libraries).
TEST(SigningTest, StandardWebhooksReferenceVector) {
  const std::string key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").value();
  const std::string sig = standard_signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330",
                                             R"({"test": 2432232314})");
  EXPECT_EQ(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(SigningTest, StandardHeadersOnePerSecret) {
  std::vector<std::string> secrets = {"new-key", "old-key"};
  SignInput in;
  in.message_id = "msg_1";
  in.timestamp_s = 1700000000;
  in.body = R"({"a":1})";
  in.secrets = &secrets;
  std::string out;
  append_signature_headers(in, out);
  const std::string s1 = standard_signature("new-key", "msg_1", "1700000000", in.body);
  const std::string s2 = standard_signature("old-key", "msg_1", "1700000000", in.body);
  EXPECT_EQ(out, "webhook-id: msg_1\r\nwebhook-timestamp: 1700000000\r\nwebhook-signature: " + s1 +
                     " " + s2 + "\r\n");
  EXPECT_TRUE(verify_standard(s1 + " " + s2, {"old-key"}, "msg_1", "1700000000", in.body));
  EXPECT_TRUE(verify_standard(s2, {"old-key", "x"}, "msg_1", "1700000000", in.body));
  EXPECT_FALSE(verify_standard(s1, {"old-key"}, "msg_1", "1700000000", in.body));
  EXPECT_FALSE(verify_standard(s1, {"new-key"}, "msg_1", "1700000001", in.body));
  EXPECT_FALSE(verify_standard(s1, {"new-key"}, "msg_2", "1700000000", in.body));
  EXPECT_FALSE(verify_standard("", {"new-key"}, "msg_1", "1700000000", in.body));
}

TEST(SigningTest, XhubHexOverTimestampDotBody) {
  std::vector<std::string> secrets = {"k"};
  SignInput in;
  in.profile = SignatureProfile::kXhub;
  in.message_id = "evt-9";
  in.timestamp_s = 42;
  in.body = "{}";
  in.secrets = &secrets;
  std::string out;
  append_signature_headers(in, out);
  auto d = hmac_sha256("k", {"42.{}"});
  const std::string hex = hex_encode({reinterpret_cast<const char*>(d.data()), d.size()});
  EXPECT_EQ(out, "X-Webhook-Id: evt-9\r\nX-Webhook-Timestamp: 42\r\nX-Webhook-Signature: " + hex +
                     "\r\n");
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_TRUE(verify_xhub(hex, {"k"}, "42", "{}"));
  EXPECT_FALSE(verify_xhub(hex, {"k"}, "43", "{}"));
  EXPECT_FALSE(verify_xhub(hex, {"k"}, "42", "{ }"));
}

TEST(SigningTest, SmengoCarriesAttemptAndStandardHeaders) {
  std::vector<std::string> secrets;  // unsigned endpoint: ids only
  SignInput in;
  in.profile = SignatureProfile::kSmengo;
  in.message_id = "d-77";
  in.attempt = 3;
  in.timestamp_s = 5;
  in.body = "x";
  in.secrets = &secrets;
  std::string out;
  append_signature_headers(in, out);
  EXPECT_EQ(out, "Smengo-Delivery-Id: d-77:3\r\nwebhook-id: d-77\r\nwebhook-timestamp: 5\r\n");
}

}  // namespace
}  // namespace ringcast::net
