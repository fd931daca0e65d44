// End to end: delivered webhooks carry valid signatures in every header profile (SPEC R11), and
// both the old and the new secret sign during a rotation. The judge is ringcast-sink with
// --verify/--secret (its own HMAC code, tools/sink/verify.cc): a bad signature gets 401 and
// counts in bad_signatures.
#include <gtest/gtest.h>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

constexpr const char* kStandardSecret = "whsec_ZTJlLXN0YW5kYXJkLXNlY3JldC1rZXktMDE=";
constexpr const char* kXhubSecret = "whsec_ZTJlLXhodWItc2VjcmV0LWtleS0wMDAy";
constexpr const char* kSmengoSecret = "whsec_ZTJlLXNtZW5nby1zZWNyZXQta2V5LTAwMw==";
constexpr const char* kOldSecret = "whsec_ZTJlLXJvdGF0aW9uLW9sZC1rZXktMDAwNA==";
constexpr const char* kNewSecret = "whsec_ZTJlLXJvdGF0aW9uLW5ldy1rZXktMDAwNQ==";
constexpr const char* kWrongSecret = "whsec_ZTJlLXdyb25nLXNlY3JldC1rZXktMDAwNg==";

SinkProcess verifying_sink(const TempDir& dir, const std::string& name, const std::string& mode,
                           const std::string& secret) {
  return SinkProcess::start({"--verify", mode, "--secret", secret, "--ids-file",
                             dir.file("ids-" + name + ".txt"), "--quiet"},
                            dir.path());
}

// Creates an endpoint; returns its id ("" on failure, with a test failure recorded).
std::string make_endpoint(const Daemon& d, const std::string& tenant, const std::string& url,
                          const std::string& policy, const std::string& signature,
                          const std::string& secret) {
  Reply r = create_endpoint(d, tenant,
                            "{\"url\":" + quote(url) + ",\"policy\":" + quote(policy) +
                                ",\"signature\":" + quote(signature) +
                                ",\"secret\":" + quote(secret) + "}");
  EXPECT_EQ(r.status, 201) << r.describe();
  Json j = r.json();
  EXPECT_EQ(j["signature"].str(), signature) << r.body;
  EXPECT_EQ(j["secret"].str(), secret) << r.body;
  return j["id"].str();
}

TEST(E2eSignatures, EveryProfileVerifiesAndAWrongSecretIsCaught) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-sig");
  SinkProcess standard = verifying_sink(dir, "standard", "standard", kStandardSecret);
  SinkProcess xhub = verifying_sink(dir, "xhub", "xhub", kXhubSecret);
  SinkProcess smengo = verifying_sink(dir, "smengo", "smengo", kSmengoSecret);
  // Negative control: the endpoint signs with kStandardSecret, the sink expects another key.
  SinkProcess wrong = verifying_sink(dir, "wrong", "standard", kWrongSecret);

  const std::string t = "sig-tenant";
  make_endpoint(d, t, standard.base_url() + "/hooks/standard", "fast", "standard", kStandardSecret);
  make_endpoint(d, t, xhub.base_url() + "/hooks/xhub", "fast", "xhub", kXhubSecret);
  make_endpoint(d, t, smengo.base_url() + "/hooks/smengo", "fast", "smengo", kSmengoSecret);
  std::string wrong_ep =
      make_endpoint(d, t, wrong.base_url() + "/hooks/wrong", "quick", "standard", kStandardSecret);
  ASSERT_FALSE(wrong_ep.empty());

  std::vector<std::string> ids;
  std::vector<Reply> answers;
  for (int i = 0; i < 6; ++i) {
    std::string id = "sig-evt-" + std::to_string(i);
    // Payload bytes with spacing and unicode escapes: signed and delivered byte-for-byte (R1).
    Reply r = submit_event(d, t, id, "order.created",
                           "{\"n\": " + std::to_string(i) + ", \"note\":\"caf\\u00e9 \\\"q\\\"\"}");
    ASSERT_EQ(r.status, 202) << r.describe();
    ids.push_back(id);
    answers.push_back(r);
  }
  // Each went to the 4 endpoints (all taken before the wrong-key one is disabled).
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(deliveries_made(d, t, ids[i], answers[i]), 4) << answers[i].body;

  const std::vector<std::string> msg_ids = message_ids_of(d, t, ids);  // the webhook ids
  for (SinkProcess* s : {&standard, &xhub, &smengo}) {
    EXPECT_TRUE(wait_until([&] { return missing_ids(*s, msg_ids).empty(); }, scaled(15s)))
        << s->stats_json() << "\nmissing: " << sample(missing_ids(*s, msg_ids)) << "\n"
        << d.output();
    EXPECT_EQ(s->stats_value("bad_signatures"), 0) << s->stats_json();
    EXPECT_EQ(s->stats_value("status_401"), 0) << s->stats_json();
  }
  // SPEC R5.4: the smengo profile carries the attempt number (first try: 1).
  for (const auto& l : smengo.ids()) {
    EXPECT_GE(l.attempt, 1u) << l.id;
  }

  // The wrong-key sink rejects every request: the check is real and can fail. (The `quick`
  // policy disables that endpoint once one delivery spent its 3 attempts, SPEC R8.1.)
  EXPECT_TRUE(wait_until([&] { return wrong.stats_value("bad_signatures") >= 3; }, scaled(15s)))
      << wrong.stats_json();
  EXPECT_EQ(wrong.stats_value("unique_ids_ok"), 0) << wrong.stats_json();
  Json del = delivery_for_event(d, t, wrong_ep, ids[0]);
  ASSERT_TRUE(del["attempts"].is_array()) << "no delivery for " << ids[0];
  ASSERT_GE(del["attempts"].size(), 1u);
  EXPECT_EQ(del["attempts"][0]["http_status"].i64(), 401);
  EXPECT_EQ(del["attempts"][0]["code"].str(), "http_401");

  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

// SPEC R11.2 ("several space-separated during secret rotation"; secret/rotate keeps the old secret
// valid for a configurable overlap and signs with both): a receiver that still knows only the old
// key and one that already knows only the new key both accept.
TEST(E2eSignatures, RotationSignsWithOldAndNewSecret) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-rot");
  SinkProcess std_old = verifying_sink(dir, "std-old", "standard", kOldSecret);
  SinkProcess std_new = verifying_sink(dir, "std-new", "standard", kNewSecret);
  SinkProcess hub_old = verifying_sink(dir, "hub-old", "xhub", kOldSecret);
  SinkProcess hub_new = verifying_sink(dir, "hub-new", "xhub", kNewSecret);

  const std::string t = "rot-tenant";
  std::vector<std::string> eps;
  eps.push_back(make_endpoint(d, t, std_old.base_url() + "/a", "fast", "standard", kOldSecret));
  eps.push_back(make_endpoint(d, t, std_new.base_url() + "/b", "fast", "standard", kOldSecret));
  eps.push_back(make_endpoint(d, t, hub_old.base_url() + "/c", "fast", "xhub", kOldSecret));
  eps.push_back(make_endpoint(d, t, hub_new.base_url() + "/d", "fast", "xhub", kOldSecret));
  for (const auto& ep : eps) {
    ASSERT_FALSE(ep.empty());
    Reply r = d.call("POST", "/v1/tenants/" + t + "/endpoints/" + ep + "/secret/rotate",
                     "{\"secret\":" + quote(kNewSecret) + "}");
    ASSERT_EQ(r.status, 200) << r.describe();
    Json j = r.json();
    EXPECT_EQ(j["secret"].str(), kNewSecret) << r.body;
    EXPECT_EQ(j["secrets_active"].i64(), 2) << r.body;
    EXPECT_FALSE(j["previous_secret_expires_at"].is_null()) << r.body;
  }

  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    std::string id = "rot-evt-" + std::to_string(i);
    Reply r = submit_event(d, t, id, "invoice.paid", "{\"i\":" + std::to_string(i) + "}");
    ASSERT_EQ(r.status, 202) << r.describe();
    ids.push_back(id);
  }
  const std::vector<std::string> msg_ids = message_ids_of(d, t, ids);  // the webhook ids
  for (SinkProcess* s : {&std_old, &std_new, &hub_old, &hub_new}) {
    EXPECT_TRUE(wait_until([&] { return missing_ids(*s, msg_ids).empty(); }, scaled(15s)))
        << s->stats_json() << "\nmissing: " << sample(missing_ids(*s, msg_ids)) << "\n"
        << d.output();
    EXPECT_EQ(s->stats_value("bad_signatures"), 0) << s->stats_json();
  }
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
