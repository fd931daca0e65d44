// End to end, SPEC R14 (docs/operations.md §5 "Logs": what is never logged): the daemon runs at
// debug level in the JSON format with every kind of secret it holds set to a value of its own —
// the admin token, tenant API keys made through the API, endpoint signing secrets (whsec_ base64
// and raw text, one rotated), endpoint header values (made, patched, refused), a portal link's
// token, portal.secret, the operator webhook's secret, the SMTP password, and cluster.secret in
// cluster mode (RINGCAST_E2E_BACKEND=cluster) — and is driven through what makes it log:
// deliveries that succeed, fail, are retried and auto-disable their endpoint, an operator
// notification, failed authentications presenting those secrets, bad requests carrying them, a
// rotation, keys made and revoked. Then its whole output (every node, every run) holds none of
// them, raw or in the base64 it was given in, and every line on stderr is one JSON object with
// time, level, event and message. A config with a secret in a bad shape is refused without
// echoing it.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/test_ca.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string whsec(std::string_view raw) {
  std::string s = "whsec_";
  s += base64(raw);
  return s;
}

// Every secret value, by what it is; each raw text is unique to this file.
constexpr const char* kPortalSecret = "portal-secret-lgq7-0123456789abcdef0123";
constexpr const char* kOpsKey = "ops-webhook-key-lgq7-marker-01";
constexpr const char* kSmtpPassword = "smtp-password-lgq7-marker-02";
constexpr const char* kEndpointKeyA = "endpoint-key-a-lgq7-marker-03";
constexpr const char* kEndpointKeyB = "endpoint-key-b-lgq7-marker-04";  // the rotated one
constexpr const char* kEndpointRawSecret = "endpoint-raw-secret-lgq7-marker-05";
constexpr const char* kHeaderApiKey = "header-api-key-lgq7-marker-06";
constexpr const char* kHeaderAuth = "header-auth-lgq7-marker-07";
constexpr const char* kHeaderPatched = "header-patched-lgq7-marker-08";
constexpr const char* kHeaderRefused = "header-refused-lgq7-marker-09";

DaemonOptions options(const SinkProcess& ops) {
  DaemonOptions o;
  o.extra_toml = "[log]\nlevel = \"debug\"\nformat = \"json\"\nrate_per_second = 0\n";
  o.extra_toml += "\n[portal]\nsecret = " + quote(kPortalSecret) + "\n";
  o.extra_toml += "\n[notifications]\nwebhook_url = " + quote(ops.base_url() + "/ops") + "\n";
  o.extra_toml += "webhook_secret = " + quote(whsec(kOpsKey)) + "\n";
  // A relay nobody listens at: the password is only held (no owner e-mail is due).
  o.extra_toml +=
      "\n[notifications.smtp]\nhost = \"127.0.0.1\"\nport = 9\nfrom = \"ops@example.com\"\n"
      "username = \"ops\"\nstarttls = \"off\"\nallow_auth_without_tls = true\npassword = " +
      quote(kSmtpPassword) + "\n";
  return o;
}

// The daemon's output files: stderr (the log) and stdout of every node and run.
std::vector<std::filesystem::path> output_files(const Daemon& d, const char* ext) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(d.dir())) {
    if (e.path().extension() == ext) out.push_back(e.path());
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from < text.size()) {
    size_t end = text.find('\n', from);
    if (end == std::string::npos) end = text.size();
    if (end > from) out.push_back(text.substr(from, end - from));
    from = end + 1;
  }
  return out;
}

TEST(E2eLogSecrets, NoSecretReachesTheLogAtDebugAndEveryLineIsJson) {
  TempDir ops_dir("e2e-log-secrets-ops");
  SinkProcess ops = SinkProcess::start(
      {"--quiet", "--secret", whsec(kOpsKey), "--verify", "standard"}, ops_dir.path());
  TempDir sink_dir("e2e-log-secrets-sink");
  // /ok answers 2xx; /once a 503 first; /down always 500 (its endpoint is auto-disabled).
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/once=status=503;limit=1", "--fault", "/down=status=500"},
      sink_dir.path());
  Daemon d(options(ops));
  ASSERT_NO_THROW(d.start());
  const std::string t = "logsec";
  const std::string base = "/v1/tenants/" + t;

  // Endpoints with secrets and receiver credentials in their headers.
  Reply r = create_endpoint(
      d, t,
      "{\"url\":" + quote(sink.base_url() + "/ok") + ",\"policy\":\"fast\",\"secret\":" +
          quote(whsec(kEndpointKeyA)) + ",\"headers\":{\"X-Api-Key\":" + quote(kHeaderApiKey) +
          ",\"Authorization\":" + quote(std::string("Bearer ") + kHeaderAuth) + "}}");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string ep_ok = r.json()["id"].str();
  r = create_endpoint(d, t,
                      "{\"url\":" + quote(sink.base_url() + "/once") +
                          ",\"policy\":\"fast\",\"secret\":" + quote(kEndpointRawSecret) + "}");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string ep_once = r.json()["id"].str();
  r = create_endpoint(d, t,
                      "{\"url\":" + quote(sink.base_url() + "/down") +
                          ",\"policy\":\"quick\",\"secret\":" + quote(whsec(kEndpointKeyA)) + "}");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string ep_down = r.json()["id"].str();

  // Keys: one to submit with, one revoked and then presented.
  r = d.call("POST", base + "/keys", R"({"name":"producer"})");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string key = r.json()["key"].str();
  r = d.call("POST", base + "/keys", R"({"name":"old","scope":"read_only"})");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string revoked = r.json()["key"].str();
  const std::string revoked_id = r.json()["record"]["id"].str();
  ASSERT_EQ(d.call("DELETE", base + "/keys/" + revoked_id).status, 204);
  ASSERT_FALSE(key.empty());
  ASSERT_FALSE(revoked.empty());
  r = d.call("POST", base + "/portal-links", R"({"scope":"view"})");
  ASSERT_EQ(r.status, 201) << r.describe();
  const std::string link_token = r.json()["token"].str();
  ASSERT_FALSE(link_token.empty());

  // Events submitted with the tenant's key (in cluster mode the key reaches every node within
  // server.key_refresh: asked again until it does).
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    const std::string id = "ls-" + std::to_string(i);
    const std::string body = "{\"id\":" + quote(id) + R"(,"type":"invoice.paid","payload":{"n":)" +
                             std::to_string(i) + "}}";
    int status = 0;
    ASSERT_TRUE(wait_until(
        [&] {
          status = d.call_with_auth("POST", base + "/events", body, "Bearer " + key).status;
          return status == 202 || status == 200;
        },
        scaled(5s), 100ms))
        << status;
    ids.push_back(id);
  }

  // Failed authentications presenting secrets (each a 401, logged as auth_failed).
  const std::vector<std::optional<std::string>> bad_auth = {
      "Bearer " + revoked,
      std::string("Bearer ") + Daemon::kToken + "x",
      std::string("Basic ") + Daemon::kToken,
      "Bearer " + link_token,
      "Bearer " + whsec(kEndpointKeyA),
      std::string("Bearer ") + kPortalSecret,
  };
  for (const auto& auth : bad_auth) {
    // (A revocation reaches node 0 within server.key_refresh in cluster mode.)
    EXPECT_TRUE(wait_until(
        [&] { return d.call_with_auth("GET", base + "/endpoints", "", auth).status == 401; },
        scaled(5s), 100ms))
        << *auth;
  }
  EXPECT_EQ(
      http_request(d.port(), "GET", base + "/endpoints", "", {"Cookie: rc_portal=" + link_token})
          .status,
      401);
  EXPECT_EQ(http_request(d.port(), "GET", "/metrics", "", {"Authorization: Bearer " + key}).status,
            401);

  // A rotation (the old secret still signs for the overlap), a patch of a header's value.
  r = d.call("POST", base + "/endpoints/" + ep_ok + "/secret/rotate",
             "{\"secret\":" + quote(whsec(kEndpointKeyB)) + "}");
  ASSERT_EQ(r.status, 200) << r.describe();
  r = d.call("PATCH", base + "/endpoints/" + ep_ok,
             "{\"headers\":{\"X-Api-Key\":" + quote(kHeaderPatched) + "}}");
  ASSERT_EQ(r.status, 200) << r.describe();

  // Bad requests that carry secrets (each a 400).
  EXPECT_EQ(create_endpoint(d, t,
                            "{\"url\":" + quote(sink.base_url() + "/x") +
                                ",\"headers\":{\"Content-Length\":" + quote(kHeaderRefused) + "}}")
                .status,
            400);
  EXPECT_EQ(create_endpoint(d, t,
                            "{\"url\":" + quote(sink.base_url() + "/x") + ",\"secret\":" +
                                quote(kEndpointKeyB) + ",\"bogus\":" + quote(kHeaderRefused) + "}")
                .status,
            400);
  EXPECT_EQ(d.call("POST", base + "/endpoints/" + ep_ok + "/secret/rotate",
                   "{\"secret\":[" + quote(kEndpointKeyB) + "]}")
                .status,
            400);
  EXPECT_EQ(d.call("PATCH", base + "/endpoints/" + ep_ok,
                   "{\"headers\":{\"X-Api-Key\":" + quote(kHeaderRefused) + "}")  // cut short
                .status,
            400);
  EXPECT_EQ(d.call_with_auth("POST", base + "/events", "{\"id\":" + quote(kHeaderRefused) + ",",
                             "Bearer " + key)
                .status,
            400);

  // More traffic after the rotation, then wait for the outcomes: delivered (after a 503 for
  // /once), and /down auto-disabled with the operator webhook told.
  for (int i = 4; i < 6; ++i) {
    const std::string id = "ls-" + std::to_string(i);
    r = submit_event(d, t, id, "invoice.paid", "{\"n\":" + std::to_string(i) + "}");
    ASSERT_TRUE(r.status == 202 || r.status == 200) << r.describe();
    ids.push_back(id);
  }
  for (const std::string& id : ids) {
    for (const std::string& ep : {ep_ok, ep_once}) {
      Json got = wait_delivery(
          d, t, ep, id, [](const Json& j) { return j["delivery"]["status"].str() == "delivered"; },
          scaled(15s));
      EXPECT_EQ(got["delivery"]["status"].str(), "delivered") << id << " to " << ep;
    }
  }
  ASSERT_TRUE(wait_until([&] { return get_endpoint(d, t, ep_down)["state"].str() == "disabled"; },
                         scaled(15s)))
      << get_endpoint(d, t, ep_down).str() << "\n"
      << d.output();
  ASSERT_TRUE(wait_until([&] { return !sink_ids_with_status(ops, "200").empty(); }, scaled(15s)))
      << test::read_file(ops.ids_file);
  const Metrics m = scrape_metrics(d);
  EXPECT_GE(metric(m, "ringcast_log_lines_dropped_total"), 0);

  const auto st = d.terminate();  // the log is drained before the exit
  ASSERT_TRUE(st.ok()) << st.str() << "\n" << d.output();

  // What must not appear, raw and as given (whsec_ base64).
  std::vector<std::pair<std::string, std::string>> secrets = {
      {"admin token", Daemon::kToken},
      {"portal.secret", kPortalSecret},
      {"operator webhook secret", kOpsKey},
      {"operator webhook secret (base64)", base64(kOpsKey)},
      {"SMTP password", kSmtpPassword},
      {"endpoint secret", kEndpointKeyA},
      {"endpoint secret (base64)", base64(kEndpointKeyA)},
      {"rotated endpoint secret", kEndpointKeyB},
      {"rotated endpoint secret (base64)", base64(kEndpointKeyB)},
      {"raw endpoint secret", kEndpointRawSecret},
      {"header value", kHeaderApiKey},
      {"Authorization header value", kHeaderAuth},
      {"patched header value", kHeaderPatched},
      {"refused header value", kHeaderRefused},
      {"tenant key", key},
      {"revoked tenant key", revoked},
      {"portal link token", link_token},
  };
  if (cluster_mode()) secrets.emplace_back("cluster.secret", Daemon::kClusterSecret);

  std::set<std::string> events;
  size_t json_lines = 0;
  for (const char* ext : {".err", ".out"}) {
    const auto files = output_files(d, ext);
    ASSERT_FALSE(files.empty()) << ext;
    for (const auto& f : files) {
      const std::string text = test::read_file(f.string());
      for (const auto& [what, value] : secrets) {
        ASSERT_FALSE(value.empty()) << what;
        const size_t at = text.find(value);
        EXPECT_EQ(at, std::string::npos) << "the " << what << " is in " << f.filename().string()
                                         << ": " << text.substr(at > 300 ? at - 300 : 0, 600);
      }
      if (std::string(ext) != ".err") continue;
      for (const std::string& line : lines_of(text)) {
        const Json j = Json::parse(line);
        ASSERT_TRUE(j.is_object()) << f.filename().string() << ": " << line;
        const std::string& time = j["time"].str();
        EXPECT_TRUE(time.size() == 27 && time[10] == 'T' && time.back() == 'Z') << line;
        const std::string& level = j["level"].str();
        EXPECT_TRUE(level == "debug" || level == "info" || level == "warn" || level == "error")
            << line;
        EXPECT_FALSE(j["event"].str().empty()) << line;
        EXPECT_TRUE(j["message"].is_string()) << line;
        events.insert(j["event"].str());
        ++json_lines;
      }
    }
  }
  // The traffic did log: the test looked at the lines that handle the secrets.
  for (const char* want :
       {"listening", "delivery_attempt", "endpoint_disabled", "auth_failed", "request_rejected",
        "api_key_created", "api_key_revoked", "portal_link_created", "endpoint_secret_rotated",
        "config_warning", "stopping", "stopped"}) {
    EXPECT_TRUE(events.count(want)) << "no " << want << " line among " << json_lines;
  }
}

// A config that gives a secret in a bad shape is refused naming the key, never echoing it.
TEST(E2eLogSecrets, AConfigErrorNamesTheKeyNotTheSecret) {
  TempDir dir("e2e-log-secrets-config");
  const std::string marker = "cfg-secret-lgq7-marker-10-0123456789abcdef";
  struct Case {
    std::string toml;
    const char* key;
  };
  const std::vector<Case> cases = {
      {"[server]\nlisten = \"127.0.0.1:0\"\napi_token = [" + quote(marker) + "]\n",
       "server.api_token"},
      {"[portal]\nsecret = t" + marker + "\n", "test.toml"},  // a TOML syntax error
      {"[portal]\nsecret = \"has space " + marker + "\"\n", "portal.secret"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("test.toml");
    test::write_file(path, cases[i].toml);
    test::ProcessOptions po;
    po.stdout_path = dir.file("out-" + std::to_string(i) + ".txt");
    po.stderr_path = dir.file("err-" + std::to_string(i) + ".txt");
    po.cwd = dir.path();
    test::Process p = test::Process::start({ringcast_binary(), "serve", "--config", path}, po);
    const auto st = p.wait(scaled(10s));
    ASSERT_TRUE(st.has_value()) << cases[i].toml;
    EXPECT_FALSE(st->ok()) << cases[i].toml;
    const std::string err = test::read_file(po.stderr_path) + test::read_file(po.stdout_path);
    EXPECT_NE(err.find(cases[i].key), std::string::npos) << err;
    EXPECT_EQ(err.find(marker.substr(0, 10)), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace ringcast::e2e
