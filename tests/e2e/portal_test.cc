// End to end, the merchant portal (operations.md "The portal") in a real browser: the daemon, a
// sink and a hostile receiver on loopback; one tenant with a healthy endpoint, one that a 410
// auto-disables (SPEC R6, R8.1), one whose receiver answers a body of <img onerror> and
// <script>, and an ordered one (SPEC R13, per_key) whose key "cart-7" is held behind a failed
// delivery; then tests/portal/walkthrough.mjs (playwright-core driving Debian's /usr/bin/chromium
// headless) opens a portal link and walks through the cards, pause/resume, a test send, the
// disabled banner, the ordered endpoint's held key, a delivery's attempt history, the hostile body
// rendered as text, edit, rotate, enable, recover and resend, a view-only link, a refused link, an
// iframe on another site (allowed by portal.frame_ancestors), 375 px and 1440 px, with no console
// error and no CSP violation. Screenshots go to <build>/portal-screenshots[-cluster]/.
//
// Needs node, /usr/bin/chromium and the npm packages that tests/portal/setup.sh installs into
// <build>/portal-node (tools/test.sh runs it before ctest; the install script installs chromium,
// nodejs and npm). When one of them is missing the test is skipped with the command to run; in
// CI all are there, so it runs.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::Process;
using test::ProcessOptions;
using test::SinkProcess;
using test::TempDir;

// What the hostile receiver answers (200, text/html): markup that would run if the portal
// rendered it as HTML; the walkthrough checks it shows as this exact text.
constexpr const char* kHostileBody =
    R"(<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script> & "quoted")";

// A receiver on 127.0.0.1 that answers every request 200 with `body` (Connection: close). The
// sink answers only "ok" or N filler bytes; this one answers markup.
class FixedBodyServer {
 public:
  explicit FixedBodyServer(std::string body) : body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("FixedBodyServer: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~FixedBodyServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  FixedBodyServer(const FixedBodyServer&) = delete;
  FixedBodyServer& operator=(const FixedBodyServer&) = delete;

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_.load(); }

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      serve(c);
      ::close(c);
    }
  }
  // Reads one request (head, then Content-Length bytes), answers, closes.
  void serve(int c) {
    timeval tv{2, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string got;
    char buf[8192];
    size_t want = std::string::npos;
    for (;;) {
      size_t he = got.find("\r\n\r\n");
      if (he != std::string::npos && want == std::string::npos) {
        std::string head = got.substr(0, he);
        for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        size_t cl = head.find("\r\ncontent-length:");
        want = he + 4 +
               (cl == std::string::npos ? 0 : std::strtoull(head.c_str() + cl + 17, nullptr, 10));
      }
      if (want != std::string::npos && got.size() >= want) break;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
    requests_++;
    std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n";
    resp += "Content-Length: ";
    resp += std::to_string(body_.size());
    resp += "\r\nConnection: close\r\n\r\n";
    resp += body_;
    size_t off = 0;
    while (off < resp.size()) {
      ssize_t n = ::send(c, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  std::string body_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

std::string chromium_path() {
  const char* e = std::getenv("RINGCAST_PORTAL_CHROMIUM");
  return e && *e ? e : "/usr/bin/chromium";
}

// The first "node" on PATH ("" when there is none).
std::string find_node() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    std::string dir =
        p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string cand = (dir.empty() ? "." : dir) + "/node";
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

std::string create(const Daemon& d, const std::string& t, const std::string& body) {
  Reply r = create_endpoint(d, t, body);
  EXPECT_EQ(r.status, 201) << r.describe();
  return r.status == 201 ? r.json()["id"].str() : "";
}

TEST(E2ePortal, BrowserWalkthrough) {
  namespace fs = std::filesystem;
  const std::string node_dir = std::string(RINGCAST_BINARY_DIR) + "/portal-node";
  const std::string script = std::string(RINGCAST_SOURCE_DIR) + "/tests/portal/walkthrough.mjs";
  const std::string node = find_node();
  const std::string how =
      " (bash tools/install-deps.sh test installs chromium, nodejs and npm; then "
      "tests/portal/setup.sh <build>/portal-node — tools/test.sh does both, so CI runs this test)";
  if (node.empty()) RINGCAST_SKIP_MISSING() << "node is not installed" << how;
  if (::access(chromium_path().c_str(), X_OK) != 0) {
    RINGCAST_SKIP_MISSING() << chromium_path() << " is not installed" << how;
  }
  if (!fs::exists(node_dir + "/node_modules/playwright-core/package.json")) {
    RINGCAST_SKIP_MISSING() << "playwright-core is not installed in " << node_dir << how;
  }

  // The embedding platform's page (served by the walkthrough) is on another site: localhost.
  const uint16_t embed_port = test::free_tcp_port();
  DaemonOptions o;
  // [policies.held]: two attempts and no auto-disable (SPEC R8.1), so the ordered endpoint stays
  // enabled with its key held (docs/operations.md "Ordered delivery").
  o.extra_toml = "[portal]\nframe_ancestors = [\"http://localhost:" + std::to_string(embed_port) +
                 "\"]\n" +
                 "\n[policies.held]\nbase = \"smengo\"\nladder = [\"50ms\"]\njitter = 0.0\n"
                 "auto_disable = false\n";
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-portal");
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "/gone=status=410", "--fault", "/held=status=500"}, dir.path());
  FixedBodyServer hostile(kHostileBody);

  const std::string t = "portal-shop";
  const std::string healthy =
      create(d, t,
             R"({"url":")" + sink.base_url() +
                 R"(/orders","policy":"fast","event_types":["order.*","payment.status_changed"],)"
                 R"("rate_limit":{"per_second":50,"burst":100}})");
  const std::string gone =
      create(d, t, R"({"url":")" + sink.base_url() + R"(/gone","policy":"fast"})");
  const std::string evil = create(
      d, t, R"({"url":")" + hostile.base_url() + R"(/hooks","policy":"fast","signature":"xhub"})");
  ASSERT_FALSE(healthy.empty() || gone.empty() || evil.empty());

  // One event reaches all three: 200 (sink), 410 (sink: the endpoint is disabled at once, R8.1),
  // 200 with the hostile body. Its payload carries markup too (shown as the body sent).
  Reply in = submit_event(d, t, "portal-1", "order.created",
                          R"({"order":"A-1","note":"<img src=x onerror=\"window.__pwned=1\">"})");
  ASSERT_TRUE(in.status == 202 || in.status == 200) << in.describe();
  Json ok = wait_delivery(d, t, healthy, "portal-1", delivery_ended, scaled(15s));
  ASSERT_EQ(ok["delivery"]["status"].str(), "delivered");
  Json evil_d = wait_delivery(d, t, evil, "portal-1", delivery_ended, scaled(15s));
  ASSERT_EQ(evil_d["delivery"]["status"].str(), "delivered");
  ASSERT_GE(evil_d["attempts"].size(), 1u);
  ASSERT_EQ(evil_d["attempts"][0]["response_prefix"].str(), kHostileBody);
  Json dead = wait_delivery(d, t, gone, "portal-1", delivery_ended, scaled(15s));
  ASSERT_EQ(dead["delivery"]["status"].str(), "dead");
  ASSERT_TRUE(wait_until([&] { return get_endpoint(d, t, gone)["state"].str() == "disabled"; },
                         scaled(10s)))
      << get_endpoint(d, t, gone)["state"].str();
  ASSERT_EQ(get_endpoint(d, t, gone)["disabled_reason"].str(), "gone");

  // An ordered endpoint (SPEC R13: per_key, on_head_failure block by default) whose receiver
  // answers 500: the first of two events of key "cart-7" ends failed and holds the key, the
  // second waits behind it until that delivery is resent (docs/operations.md "Ordered
  // delivery"). The hostile endpoint (no filter) gets both too; the disabled one gets none.
  const std::string ordered =
      create(d, t,
             R"({"url":")" + sink.base_url() +
                 R"(/held","policy":"held","ordering":"per_key","event_types":["state.*"]})");
  ASSERT_FALSE(ordered.empty());
  for (const char* id : {"portal-held-1", "portal-held-2"}) {
    Reply r = d.call("POST", "/v1/tenants/" + t + "/events",
                     std::string(R"({"id":")") + id +
                         R"(","type":"state.changed","payload":{},"ordering_key":"cart-7"})");
    ASSERT_TRUE(r.status == 202 || r.status == 200) << r.describe();
  }
  Json held = wait_delivery(d, t, ordered, "portal-held-1", delivery_ended, scaled(15s));
  ASSERT_EQ(held["delivery"]["status"].str(), "failed") << held["delivery"]["status"].str();
  const std::string held_by = held["delivery"]["id"].str();
  // What the card shows: the ordering route names the key held by that delivery, one waiting.
  Reply keys;
  ASSERT_TRUE(wait_until(
      [&] {
        keys = d.call("GET", "/v1/tenants/" + t + "/endpoints/" + ordered + "/ordering");
        const Json k = keys.json()["keys"];
        return keys.status == 200 && k.size() == 1 && k[0]["blocked"].boolean() &&
               k[0]["blocked_by"].str() == held_by && k[0]["waiting"].i64() == 1;
      },
      scaled(5s)))
      << keys.describe();

  const std::string shots =
      std::string(RINGCAST_BINARY_DIR) +
      (cluster_mode() ? "/portal-screenshots-cluster" : "/portal-screenshots");
  std::error_code ec;
  fs::remove_all(shots, ec);
  ProcessOptions po;
  po.cwd = node_dir;
  po.stdout_path = dir.path() + "/walkthrough.out";
  po.stderr_path = dir.path() + "/walkthrough.err";
  po.env = {
      "RINGCAST_PORTAL_BASE_URL=http://127.0.0.1:" + std::to_string(d.port()),
      std::string("RINGCAST_PORTAL_ADMIN_TOKEN=") + Daemon::kToken,
      "RINGCAST_PORTAL_TENANT=" + t,
      "RINGCAST_PORTAL_HEALTHY_ID=" + healthy,
      "RINGCAST_PORTAL_GONE_ID=" + gone,
      "RINGCAST_PORTAL_HOSTILE_ID=" + evil,
      "RINGCAST_PORTAL_HOSTILE_DELIVERY=" + evil_d["delivery"]["id"].str(),
      "RINGCAST_PORTAL_ORDERED_ID=" + ordered,
      "RINGCAST_PORTAL_HELD_BY=" + held_by,
      std::string("RINGCAST_PORTAL_HOSTILE_BODY=") + kHostileBody,
      "RINGCAST_PORTAL_SCREENSHOTS=" + shots,
      "RINGCAST_PORTAL_NODE_DIR=" + node_dir,
      "RINGCAST_PORTAL_CHROMIUM=" + chromium_path(),
      "RINGCAST_PORTAL_TIMEOUT_MS=" + std::to_string(scaled(20s).count()),
      "RINGCAST_PORTAL_EMBED_PORT=" + std::to_string(embed_port),
      "NODE_PATH=" + node_dir + "/node_modules",
  };
  Process walk = Process::start({node, script}, po);
  auto st = walk.wait(scaled(240s));
  if (!st) st = walk.kill();
  const std::string out = test::read_file(po.stdout_path);
  const std::string err = test::read_file(po.stderr_path);
  ASSERT_TRUE(st->ok()) << "walkthrough " << st->str() << "\n--- stdout\n"
                        << out << "\n--- stderr\n"
                        << err << "\n--- daemon\n"
                        << d.output(3000);
  Json summary = Json::parse(out);
  ASSERT_TRUE(summary["ok"].boolean()) << out;
  for (const char* name :
       {"portal-1440.png", "portal-375.png", "delivery-detail.png", "expired-link.png"}) {
    const std::string f = shots + "/" + name;
    EXPECT_TRUE(fs::exists(f) && fs::file_size(f) > 1000) << f;
  }
  EXPECT_GE(hostile.requests(), 1);
  std::printf("portal screenshots: %s\nportal in a cross-site iframe: %s\n", shots.c_str(),
              summary["iframe"].str().c_str());
}

}  // namespace
}  // namespace ringcast::e2e
