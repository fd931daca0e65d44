// End to end (operations.md "Endpoints"): an endpoint's extra request headers and its
// Idempotency-Key option reach the receiver on the first attempt and on the retry, Idempotency-Key
// carrying the webhook id (the same on both, also when the first answer was lost: SPEC R12.9),
// after ringcast's own headers; a PATCH changes what the next delivery carries, and the headers
// survive a restart (they are in the store: RocksDB, or Redis in cluster mode). The judge is
// ringcast-sink's --headers-file, one JSON line per request with every header as received.
#include <gtest/gtest.h>

#include <sstream>

#include "tests/e2e/daemon.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

struct Seen {
  std::string id, status, target;
  std::vector<std::pair<std::string, std::string>> headers;  // in the order received

  // The first value of `name` (ASCII case-insensitive); nullopt when absent.
  std::optional<std::string> get(const std::string& name) const {
    for (const auto& [n, v] : headers) {
      if (n.size() == name.size() &&
          std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) ==
                   std::tolower(static_cast<unsigned char>(b));
          }))
        return v;
    }
    return std::nullopt;
  }
  // Position of `name` in the request (case-insensitive); -1 when absent.
  int index_of(const std::string& name) const {
    for (size_t i = 0; i < headers.size(); ++i) {
      std::string a = headers[i].first, b = name;
      for (auto& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (auto& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (a == b) return static_cast<int>(i);
    }
    return -1;
  }
  std::string describe() const {
    std::string s = status + " " + target + " " + id + ":";
    for (const auto& [n, v] : headers) s += " [" + n + ": " + v + "]";
    return s;
  }
};

std::vector<Seen> read_seen(const std::string& file, const std::string& target) {
  std::vector<Seen> out;
  std::istringstream in(test::read_file(file));
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line);
    if (!j.is_object() || j["target"].str() != target) continue;
    Seen s{j["id"].str(), j["status"].str(), j["target"].str(), {}};
    for (const Json& h : j["headers"].items()) s.headers.emplace_back(h[0].str(), h[1].str());
    out.push_back(std::move(s));
  }
  return out;
}

std::string describe(const std::vector<Seen>& v) {
  std::string s;
  for (const auto& x : v) s += x.describe() + "\n";
  return s;
}

TEST(E2eEndpointHeaders, SentOnEveryAttemptWithAStableIdempotencyKey) {
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-hdr");
  const std::string headers_file = dir.file("headers.jsonl");
  // /a: the first request gets 503; /b: the first is read and reset (the receiver acted, the
  // answer was lost); both retried by the `fast` ladder.
  SinkProcess sink =
      SinkProcess::start({"--headers-file", headers_file, "--fault", "/a=status=503;limit=1",
                          "--fault", "/b=reset;limit=1", "--quiet"},
                         dir.path());
  const std::string t = "hdr-tenant";

  Reply r = create_endpoint(d, t,
                            "{\"url\":" + quote(sink.base_url() + "/a") +
                                ",\"policy\":\"fast\",\"headers\":{\"X-Tenant-Token\":\"tok-123\","
                                "\"X-Trace\":\" a b\\tc \"},\"idempotency_key\":true}");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string ep_a = r.json()["id"].str();
  // A receiver credential (a name with "token") is write-only (SPEC R14.5): named, null.
  EXPECT_TRUE(r.json()["headers"]["X-Tenant-Token"].is_null()) << r.body;
  EXPECT_EQ(r.body.find("tok-123"), std::string::npos) << r.body;
  EXPECT_EQ(r.json()["headers"]["X-Trace"].str(), "a b\tc") << r.body;  // trimmed
  EXPECT_TRUE(r.json()["idempotency_key"].boolean()) << r.body;
  r = create_endpoint(d, t,
                      "{\"url\":" + quote(sink.base_url() + "/b") +
                          ",\"policy\":\"fast\",\"signature\":\"xhub\",\"headers\":{"
                          "\"Authorization\":\"Bearer zzz\"},\"idempotency_key\":true}");
  ASSERT_EQ(r.status, 201) << r.describe();
  // Control: an endpoint with neither gets neither.
  r = create_endpoint(d, t, "{\"url\":" + quote(sink.base_url() + "/c") + ",\"policy\":\"fast\"}");
  ASSERT_EQ(r.status, 201) << r.describe();
  EXPECT_FALSE(r.json()["idempotency_key"].boolean());
  EXPECT_EQ(r.json()["headers"].size(), 0u);
  // A reserved name is refused, naming it.
  r = create_endpoint(d, t,
                      "{\"url\":" + quote(sink.base_url() + "/d") +
                          ",\"headers\":{\"X-Ok\":\"1\",\"content-LENGTH\":\"0\"}}");
  EXPECT_EQ(r.status, 400) << r.describe();
  EXPECT_EQ(r.json()["error"]["code"].str(), "reserved_header") << r.body;
  EXPECT_EQ(r.json()["error"]["field"].str(), "headers.content-LENGTH") << r.body;

  ASSERT_EQ(submit_event(d, t, "hdr-1", "order.created", "{\"n\":1}").status, 202);
  const std::string msg = message_id_of(d, t, "hdr-1");
  ASSERT_FALSE(msg.empty());

  auto done = [&](const std::string& target, size_t n) {
    auto v = read_seen(headers_file, target);
    return v.size() >= n && v.back().status == "200";
  };
  ASSERT_TRUE(
      wait_until([&] { return done("/a", 2) && done("/b", 2) && done("/c", 1); }, scaled(15s)))
      << describe(read_seen(headers_file, "/a")) << describe(read_seen(headers_file, "/b"))
      << describe(read_seen(headers_file, "/c")) << d.output();

  std::vector<Seen> a = read_seen(headers_file, "/a");
  ASSERT_EQ(a.size(), 2u) << describe(a);
  EXPECT_EQ(a[0].status, "503");
  for (const Seen& s : a) {
    SCOPED_TRACE(s.describe());
    EXPECT_EQ(s.get("X-Tenant-Token"), "tok-123");
    EXPECT_EQ(s.get("X-Trace"), "a b\tc");
    EXPECT_EQ(s.get("Idempotency-Key"), msg);  // the webhook id, on both attempts
    EXPECT_EQ(s.get("webhook-id"), msg);
    // After ringcast's own headers: the signature first, then Idempotency-Key, then the
    // endpoint's in the order given.
    EXPECT_LT(s.index_of("webhook-signature"), s.index_of("Idempotency-Key"));
    EXPECT_LT(s.index_of("Idempotency-Key"), s.index_of("X-Tenant-Token"));
    EXPECT_LT(s.index_of("X-Tenant-Token"), s.index_of("X-Trace"));
    EXPECT_EQ(s.get("Content-Type"), "application/json");
  }
  std::vector<Seen> b = read_seen(headers_file, "/b");
  ASSERT_EQ(b.size(), 2u) << describe(b);
  EXPECT_EQ(b[0].status, "reset");
  for (const Seen& s : b) {
    SCOPED_TRACE(s.describe());
    EXPECT_EQ(s.get("Authorization"), "Bearer zzz");
    EXPECT_EQ(s.get("Idempotency-Key"), msg);  // R12.9: the resend carries the same key
    EXPECT_EQ(s.get("X-Webhook-Id"), msg);
    EXPECT_EQ(s.get("X-Tenant-Token"), std::nullopt);  // another endpoint's headers stay there
  }
  std::vector<Seen> c = read_seen(headers_file, "/c");
  ASSERT_EQ(c.size(), 1u) << describe(c);
  EXPECT_EQ(c[0].get("Idempotency-Key"), std::nullopt) << c[0].describe();
  EXPECT_EQ(c[0].get("X-Tenant-Token"), std::nullopt) << c[0].describe();
  // The log agrees: two attempts to /a, the first a 503.
  Json det = delivery_for_event(d, t, ep_a, "hdr-1");
  ASSERT_EQ(det["attempts"].size(), 2u) << d.output();
  EXPECT_EQ(det["attempts"][0]["http_status"].i64(), 503);

  // PATCH replaces the set and turns the option off: the next delivery carries only X-New.
  r = d.call("PATCH", "/v1/tenants/" + t + "/endpoints/" + ep_a,
             "{\"headers\":{\"X-New\":\"n1\"},\"idempotency_key\":false}");
  ASSERT_EQ(r.status, 200) << r.describe();
  EXPECT_EQ(r.json()["headers"].size(), 1u) << r.body;
  ASSERT_EQ(submit_event(d, t, "hdr-2", "order.created", "{\"n\":2}").status, 202);
  ASSERT_TRUE(wait_until([&] { return done("/a", 3); }, scaled(15s)))
      << describe(read_seen(headers_file, "/a")) << d.output();
  a = read_seen(headers_file, "/a");
  ASSERT_EQ(a.size(), 3u) << describe(a);
  EXPECT_EQ(a[2].get("X-New"), "n1") << a[2].describe();
  EXPECT_EQ(a[2].get("X-Tenant-Token"), std::nullopt) << a[2].describe();
  EXPECT_EQ(a[2].get("Idempotency-Key"), std::nullopt) << a[2].describe();

  // Persisted: after a restart the endpoint still shows and sends them.
  auto st = d.terminate();
  ASSERT_TRUE(st.ok()) << st.str() << "\n" << d.output();
  ASSERT_NO_THROW(d.start());
  Json ep = get_endpoint(d, t, ep_a);
  EXPECT_EQ(ep["headers"]["X-New"].str(), "n1") << d.output();
  EXPECT_FALSE(ep["idempotency_key"].boolean());
  r = d.call("PATCH", "/v1/tenants/" + t + "/endpoints/" + ep_a, "{\"idempotency_key\":true}");
  ASSERT_EQ(r.status, 200) << r.describe();
  ASSERT_EQ(submit_event(d, t, "hdr-3", "order.created", "{\"n\":3}").status, 202);
  const std::string msg3 = message_id_of(d, t, "hdr-3");
  ASSERT_TRUE(wait_until([&] { return done("/a", 4); }, scaled(15s)))
      << describe(read_seen(headers_file, "/a")) << d.output();
  a = read_seen(headers_file, "/a");
  ASSERT_EQ(a.size(), 4u) << describe(a);
  EXPECT_EQ(a[3].get("X-New"), "n1") << a[3].describe();
  EXPECT_EQ(a[3].get("Idempotency-Key"), msg3) << a[3].describe();

  st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
