// HttpTransport against real peers on loopback: nginx (Debian nginx-light) over HTTP and TLS,
// and ringcast-sink's fault modes, including "receiver acted, response lost" (SPEC R12.9).
// Skipped when the peer binary is not there.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/classify.h"
#include "net/http_client.h"
#include "tests/support/process.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::net {
namespace {

using K = ErrorCode::Kind;

struct Op final : SendOp {
  bool done = false;
  void on_complete() override { done = true; }
};

class Client {
 public:
  explicit Client(HttpTransportOptions o) {
    loop = std::move(Loop::create({})).value();
    auto t = HttpTransport::create(*loop, o);
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    transport = std::move(t).value();
  }
  TransportResult send(const std::string& url, const std::string& id = "msg_peer",
                       uint16_t attempt = 1, std::chrono::milliseconds budget = seconds(10)) {
    Op op;
    op.request.url = url;
    op.request.message_id = id;
    op.request.attempt = attempt;
    op.request.profile = SignatureProfile::kSmengo;
    op.request.secrets = {"peer-secret"};
    op.request.body = R"({"event":"payment.status_changed","status":"paid"})";
    transport->send(&op);
    const auto end = std::chrono::steady_clock::now() + budget;
    while (!op.done && std::chrono::steady_clock::now() < end) loop->run_once(milliseconds(5));
    EXPECT_TRUE(op.done);
    return op.result;
  }
  std::unique_ptr<Loop> loop;
  std::unique_ptr<HttpTransport> transport;
};

HttpTransportOptions loopback_options() {
  HttpTransportOptions o;
  o.url_policy.allow_http = true;
  o.allow_list = {*parse_cidr("127.0.0.0/8")};
  o.exchange_timeout = seconds(3);
  return o;
}

// --- nginx ------------------------------------------------------------------------------------

class TransportNginxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kNginx, X_OK) != 0) RINGCAST_SKIP_MISSING() << "no " << kNginx;
  }
  // Starts nginx with one plain and one TLS server answering every POST from its config.
  bool start(const test::LeafCert& leaf) {
    test::write_file(dir.file("cert.pem"), leaf.cert_pem);
    test::write_file(dir.file("key.pem"), leaf.key_pem);
    test::write_file(dir.file("ca.pem"), ca.ca_pem);
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = test::free_tcp_port();
      tls_port = test::free_tcp_port();
      const std::string d = dir.path();
      test::write_file(
          dir.file("nginx.conf"),
          "daemon off; master_process off; worker_processes 1; pid " + d +
              "/nginx.pid; error_log " + d +
              "/error.log warn;\n"
              "events { worker_connections 256; }\n"
              "http {\n"
              "  access_log off; client_body_temp_path " +
              d + "/body; proxy_temp_path " + d + "/proxy; fastcgi_temp_path " + d +
              "/fcgi; uwsgi_temp_path " + d + "/uwsgi; scgi_temp_path " + d +
              "/scgi;\n"
              "  keepalive_timeout 30s;\n"
              "  server {\n"
              "    listen 127.0.0.1:" +
              std::to_string(port) +
              ";\n"
              "    location /ok { return 200 'nginx ok'; }\n"
              "    location /busy { add_header Retry-After 30 always; return 503 'busy'; }\n"
              "    location /moved { return 301 http://127.0.0.1:1/elsewhere; }\n"
              "    location /gone { return 410; }\n"
              "  }\n"
              "  server {\n"
              "    listen 127.0.0.1:" +
              std::to_string(tls_port) +
              " ssl;\n"
              "    ssl_certificate " +
              d + "/cert.pem; ssl_certificate_key " + d +
              "/key.pem;\n"
              "    location / { return 200 'tls ok'; }\n"
              "  }\n"
              "}\n");
      test::ProcessOptions po;
      po.stdout_path = dir.file("nginx.out");
      po.stderr_path = dir.file("nginx.err");
      nginx = test::Process::start({kNginx, "-p", d, "-c", dir.file("nginx.conf")}, po);
      if (test::wait_for_port("127.0.0.1", port, seconds(5)) &&
          test::wait_for_port("127.0.0.1", tls_port, seconds(5))) {
        return true;
      }
      nginx.kill();  // a port race: try other ports
    }
    return false;
  }
  static constexpr const char* kNginx = "/usr/sbin/nginx";
  test::TempDir dir;
  test::TestCa ca = test::TestCa::create();
  test::Process nginx;
  uint16_t port = 0, tls_port = 0;
};

TEST_F(TransportNginxTest, PlainStatusesKeepAliveAndNoRedirects) {
  ASSERT_TRUE(start(ca.issue({"localhost"}, {"127.0.0.1"})));
  Client c(loopback_options());
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  for (int i = 0; i < 5; ++i) {
    auto r = c.send(base + "/ok");
    EXPECT_EQ(r.http_status, 200) << r.code.str();
    EXPECT_EQ(r.body_prefix, "nginx ok");
    EXPECT_EQ(r.reused_connection, i > 0);
  }
  auto r = c.send(base + "/busy");
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.retry_after, "30");
  r = c.send(base + "/moved");
  EXPECT_EQ(r.http_status, 301);
  EXPECT_EQ(classify(r, WallTime::from_ms(0)).code.kind, K::kRedirectNotAllowed);
  r = c.send(base + "/gone");
  EXPECT_EQ(r.http_status, 410);
  EXPECT_EQ(c.transport->stats().connections_opened, 1u);
}

TEST_F(TransportNginxTest, TlsWithTheTestCa) {
  ASSERT_TRUE(start(ca.issue({"localhost"}, {"127.0.0.1"})));
  auto o = loopback_options();
  o.url_policy.allow_http = false;
  o.tls.ca_file = "";
  o.tls.extra_ca_file = dir.file("ca.pem");
  Client c(o);
  const std::string url = "https://127.0.0.1:" + std::to_string(tls_port) + "/hook";
  for (int i = 0; i < 3; ++i) {
    auto r = c.send(url);
    EXPECT_EQ(r.http_status, 200) << r.code.str();
    EXPECT_EQ(r.body_prefix, "tls ok");
  }
  c.transport->close_idle();
  auto r = c.send(url);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(c.transport->tls_stats().full_handshakes, 1u);
  EXPECT_EQ(c.transport->tls_stats().resumed_handshakes, 1u);  // nginx issues tickets
}

// --- ringcast-sink -------------------------------------------------------------------------------

class TransportSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(sink_path().c_str(), X_OK) != 0) RINGCAST_SKIP_MISSING() << "no " << sink_path();
  }
  static std::string sink_path() {
    return std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast-sink";
  }
  test::TempDir dir;
};

TEST_F(TransportSinkTest, FaultModesMapToCodesAndOutcomes) {
  auto sink = test::SinkProcess::start(
      {"--secret", "peer-secret", "--verify", "smengo", "--fault", "/s503=status=503:1", "--fault",
       "/ra=status=429:1;retry_after=7", "--fault", "/reset=reset", "--fault", "/hang=hang",
       "--fault", "/redirect=redirect=http://127.0.0.1:1/x", "--fault", "/big=big_headers=80",
       "--fault", "/endless=endless_chunked"},
      dir.path());
  auto o = loopback_options();
  o.exchange_timeout = milliseconds(500);
  Client c(o);
  const std::string base = sink.base_url();
  const WallTime now = WallTime::from_ms(0);

  auto r = c.send(base + "/ok");
  EXPECT_EQ(r.http_status, 200) << r.code.str();  // the signature verified (else 401)
  EXPECT_EQ(classify(r, now).outcome, Outcome::kSuccess);

  r = c.send(base + "/s503");
  EXPECT_EQ(classify(r, now).code, ErrorCode::http(503));
  EXPECT_EQ(classify(r, now).outcome, Outcome::kRetryable);

  r = c.send(base + "/redirect");
  EXPECT_EQ(classify(r, now).code.kind, K::kRedirectNotAllowed);

  r = c.send(base + "/reset");
  EXPECT_EQ(r.code, ErrorCode::network(ECONNRESET)) << r.code.str();
  EXPECT_EQ(classify(r, now).outcome, Outcome::kUnknown);  // R12.1: it may have acted

  r = c.send(base + "/hang");
  EXPECT_EQ(r.code.kind, K::kTimeout);
  EXPECT_EQ(classify(r, now).outcome, Outcome::kUnknown);

  r = c.send(base + "/big");
  EXPECT_EQ(r.code, ErrorCode::network(EMSGSIZE)) << r.code.str();

  r = c.send(base + "/endless");
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body_prefix.size(), 512u);

  // Last: a 429 with Retry-After is passed up for the scheduler (SPEC R7, per endpoint) and
  // does not pause the host: the next path on it is sent at once (R12.6).
  r = c.send(base + "/ra");
  EXPECT_EQ(r.http_status, 429);
  EXPECT_EQ(r.retry_after, "7");
  EXPECT_EQ(classify(r, now).retry_after, seconds(7));
  r = c.send(base + "/ok");
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.deferred, DeferReason::kNone);
}

// SPEC R12.9: the receiver records the id, then the connection drops; the retry (a new
// send() by the scheduler) carries the same id with the next attempt number.
TEST_F(TransportSinkTest, ReceiverActedResponseLostRetryCarriesTheSameId) {
  auto sink = test::SinkProcess::start({"--fault", "/hook=reset;limit=1"}, dir.path());
  Client c(loopback_options());
  const std::string url = sink.base_url() + "/hook";
  auto first = c.send(url, "evt-acted", 1);
  EXPECT_TRUE(first.request_written);
  EXPECT_FALSE(first.response_received);
  EXPECT_EQ(classify(first, WallTime::from_ms(0)).outcome, Outcome::kUnknown);
  auto second = c.send(url, "evt-acted", 2);
  EXPECT_EQ(second.http_status, 200) << second.code.str();
  auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].id, "evt-acted");
  EXPECT_EQ(ids[0].attempt, 1u);
  EXPECT_EQ(ids[0].status, "reset");
  EXPECT_EQ(ids[1].id, "evt-acted");
  EXPECT_EQ(ids[1].attempt, 2u);
}

// --- connect deadline
// ------------------------------------------------------------------------------

// A listener whose accept queue is full drops further SYNs, so a connect neither succeeds nor
// fails: the connect deadline ends it with network_ETIMEDOUT.
TEST(ConnectDeadlineTest, UnansweredSynTimesOut) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  // Fill the accept queue (never accepted).
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fillers.push_back(f);
  }
  std::this_thread::sleep_for(milliseconds(50));
  auto o = loopback_options();
  o.connect_timeout = milliseconds(300);
  Client c(o);
  auto r =
      c.send("http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/", "x", 1, seconds(5));
  if (r.code.kind == K::kNone) {
    GTEST_SKIP() << "the kernel accepted the connection anyway (syncookies)";
  }
  EXPECT_EQ(r.code.str(), "network_ETIMEDOUT");
  EXPECT_TRUE(r.connect_attempted);
  EXPECT_FALSE(r.request_written);
  for (int f : fillers) ::close(f);
  ::close(lfd);
}

}  // namespace
}  // namespace ringcast::net
