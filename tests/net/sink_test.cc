// Tests of the test support (test CA, child processes, nginx) and of ringcast-sink, the webhook
// receiver the net and e2e tests talk to. Everything runs on loopback with ports chosen at run
// time.
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/base64.h>
#include <openssl/digest.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/nginx.h"
#include "tests/support/process.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::test {
namespace {

bssl::UniquePtr<X509> parse_pem(const std::string& pem) {
  bssl::UniquePtr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return bssl::UniquePtr<X509>(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

// Verifies `leaf` against `ca` for `host` (a DNS name) the way a TLS client would; returns the
// X509_V_ERR_* code (X509_V_OK on success).
int verify(const std::string& ca_pem, const std::string& leaf_pem, const std::string& host) {
  bssl::UniquePtr<X509> ca = parse_pem(ca_pem);
  bssl::UniquePtr<X509> leaf = parse_pem(leaf_pem);
  EXPECT_TRUE(ca && leaf);
  bssl::UniquePtr<X509_STORE> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.get());
  bssl::UniquePtr<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set1_host(param, host.data(), host.size());
  if (X509_verify_cert(ctx.get()) == 1) return X509_V_OK;
  return X509_STORE_CTX_get_error(ctx.get());
}

TEST(TestCa, IssuesVerifiableLeaf) {
  TestCa ca = TestCa::create();
  LeafCert leaf = ca.issue({"localhost", "sink.test"}, {"127.0.0.1"});
  EXPECT_NE(ca.ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(leaf.key_pem.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(verify(ca.ca_pem, leaf.cert_pem, "localhost"), X509_V_OK);
  EXPECT_EQ(verify(ca.ca_pem, leaf.cert_pem, "sink.test"), X509_V_OK);
}

TEST(TestCa, WrongHostUntrustedCaAndExpiredAreRejected) {
  TestCa ca = TestCa::create();
  TestCa other = TestCa::create("another CA");
  LeafCert leaf = ca.issue({"localhost"});
  EXPECT_EQ(verify(ca.ca_pem, leaf.cert_pem, "example.test"), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_NE(verify(other.ca_pem, leaf.cert_pem, "localhost"), X509_V_OK);
  LeafCert expired =
      ca.issue({"localhost"}, {}, Validity{std::chrono::hours(-48), std::chrono::hours(-24)});
  EXPECT_EQ(verify(ca.ca_pem, expired.cert_pem, "localhost"), X509_V_ERR_CERT_HAS_EXPIRED);
  LeafCert future =
      ca.issue({"localhost"}, {}, Validity{std::chrono::hours(24), std::chrono::hours(48)});
  EXPECT_EQ(verify(ca.ca_pem, future.cert_pem, "localhost"), X509_V_ERR_CERT_NOT_YET_VALID);
}

TEST(TestCa, WritesFiles) {
  TempDir dir;
  TestCa ca = TestCa::create();
  CertFiles files = ca.write_localhost(dir.path());
  EXPECT_EQ(files.ca, dir.file("ca.pem"));
  FILE* f = std::fopen(files.key.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  bssl::UniquePtr<EVP_PKEY> key(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  EXPECT_TRUE(key);
}

TEST(Process, StartsWaitsForLineAndStops) {
  TempDir dir;
  ProcessOptions o;
  o.env = {"GREETING=hello"};
  o.stdout_path = dir.file("out");
  o.stderr_path = dir.file("err");
  Process p = Process::start({"/bin/sh", "-c", "echo \"ready $GREETING\"; exec sleep 30"}, o);
  auto line = p.wait_for_stdout_line("ready", std::chrono::seconds(10));
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "ready hello");
  EXPECT_TRUE(p.running());
  ExitStatus s = p.stop(std::chrono::seconds(5));
  EXPECT_TRUE(s.signaled) << s.str();
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_FALSE(p.running());
}

TEST(Process, ReportsExitCodeAndExecFailure) {
  Process p = Process::start({"/bin/sh", "-c", "exit 7"});
  auto s = p.wait(std::chrono::seconds(10));
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->exited);
  EXPECT_EQ(s->code, 7);
  EXPECT_THROW(Process::start({"/nonexistent/ringcast-binary"}), std::runtime_error);
}

TEST(Process, DestructorKillsTheChild) {
  pid_t pid;
  {
    Process p = Process::start({"/bin/sleep", "30"});
    pid = p.pid();
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: the pid no longer exists
}

TEST(Process, FreePortIsBindable) {
  uint16_t port = free_tcp_port();
  EXPECT_GT(port, 0);
  EXPECT_FALSE(wait_for_port("127.0.0.1", port, std::chrono::milliseconds(20)));
  EXPECT_FALSE(wait_for_port("10.0.0.1", port, std::chrono::milliseconds(20)));  // not loopback
}

// ---- ringcast-sink ---------------------------------------------------------------------------

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string base64(const uint8_t* data, size_t len) {
  size_t out_len = 0;
  EVP_EncodedLength(&out_len, len);
  std::string out(out_len, '\0');
  size_t n = EVP_EncodeBlock(reinterpret_cast<uint8_t*>(out.data()), data, len);
  out.resize(n);
  return out;
}

std::string hmac(const std::string& key, const std::string& msg) {
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), key.size(), reinterpret_cast<const uint8_t*>(msg.data()),
       msg.size(), mac, &len);
  return std::string(reinterpret_cast<char*>(mac), len);
}

// Standard Webhooks (SPEC R11.2): "v1,<base64 HMAC-SHA256 of id.ts.body>".
std::string sign_standard(const std::string& key, const std::string& id, const std::string& ts,
                          const std::string& body) {
  std::string mac = hmac(key, id + "." + ts + "." + body);
  return "v1," + base64(reinterpret_cast<const uint8_t*>(mac.data()), mac.size());
}

// xhub (SPEC R11.1): HMAC-SHA256 over ts + "." + body, lower-case hex.
std::string sign_xhub_hex(const std::string& key, const std::string& ts, const std::string& body) {
  std::string mac = hmac(key, ts + "." + body);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : mac) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string now_ts() {
  return std::to_string(::time(nullptr));
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  size_t head_bytes = 0;
  bool chunked_complete = false;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A blocking client connection to the sink (plain or TLS) that reads responses one by one.
class Client {
 public:
  explicit Client(uint16_t port, const std::string& host = "127.0.0.1",
                  milliseconds timeout = milliseconds(5000)) {
    sockaddr_storage ss{};
    socklen_t len;
    if (host.find(':') != std::string::npos) {
      auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
      a6->sin6_family = AF_INET6;
      a6->sin6_port = htons(port);
      inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr);
      len = sizeof(*a6);
    } else {
      auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
      a4->sin_family = AF_INET;
      a4->sin_port = htons(port);
      inet_pton(AF_INET, host.c_str(), &a4->sin_addr);
      len = sizeof(*a4);
    }
    fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    set_timeout(timeout);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0;
  }
  ~Client() {
    ssl_.reset();
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  void set_timeout(milliseconds t) {
    timeval tv{static_cast<time_t>(t.count() / 1000),
               static_cast<suseconds_t>((t.count() % 1000) * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }

  // TLS over the connected socket; verifies the chain against `ca_pem` and the name `host`.
  bool start_tls(SSL_CTX* ctx, const std::string& host, SSL_SESSION* session = nullptr) {
    ssl_.reset(SSL_new(ctx));
    SSL_set_fd(ssl_.get(), fd_);
    SSL_set_tlsext_host_name(ssl_.get(), host.c_str());
    SSL_set1_host(ssl_.get(), host.c_str());
    if (session != nullptr) SSL_set_session(ssl_.get(), session);
    return SSL_connect(ssl_.get()) == 1;
  }
  SSL* ssl() { return ssl_.get(); }

  bool send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n =
          ssl_ ? SSL_write(ssl_.get(), data.data() + off, static_cast<int>(data.size() - off))
               : ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // One recv: >0 bytes appended to the buffer, 0 EOF, -errno on error/timeout.
  ssize_t recv_some() {
    char buf[65536];
    ssize_t n;
    if (ssl_) {
      int r = SSL_read(ssl_.get(), buf, sizeof(buf));
      if (r > 0) {
        n = r;
      } else {
        int err = SSL_get_error(ssl_.get(), r);
        if (err == SSL_ERROR_ZERO_RETURN) return 0;
        return errno ? -errno : -EPROTO;
      }
    } else {
      n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0) return -errno;
    }
    if (n > 0) ++recv_calls_;
    buf_.append(buf, static_cast<size_t>(n));
    return n;
  }

  // Reads one response; nullopt on EOF/error/timeout before it is complete. Chunked bodies are
  // read up to `max_body` bytes (the endless case returns with chunked_complete == false).
  std::optional<Response> read_response(size_t max_body = 8 << 20) {
    Response r;
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (recv_some() <= 0) return std::nullopt;
    }
    std::string head = buf_.substr(0, head_end);
    r.head_bytes = head_end + 4;
    r.status = std::atoi(head.c_str() + 9);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos < head.size()) {
      size_t e = head.find("\r\n", pos + 2);
      std::string line =
          head.substr(pos + 2, e == std::string::npos ? std::string::npos : e - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      pos = e;
    }
    buf_.erase(0, r.head_bytes);
    if (r.status == 100) return read_response(max_body);
    if (r.header("transfer-encoding") == "chunked") {
      // Decode until the last chunk or max_body.
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (recv_some() <= 0) return r;
        }
        size_t size = std::strtoul(buf_.c_str(), nullptr, 16);
        if (size == 0) {
          while (buf_.find("\r\n\r\n") == std::string::npos &&
                 buf_.compare(eol, 4, "\r\n\r\n") != 0) {
            if (recv_some() <= 0) return r;
          }
          buf_.erase(0, buf_.find("\r\n\r\n") + 4);
          r.chunked_complete = true;
          return r;
        }
        while (buf_.size() < eol + 2 + size + 2) {
          if (recv_some() <= 0) return r;
        }
        r.body.append(buf_, eol + 2, size);
        buf_.erase(0, eol + 2 + size + 2);
        if (r.body.size() >= max_body) return r;
      }
    }
    size_t cl = r.headers.count("content-length") ? std::stoul(r.header("content-length")) : 0;
    while (buf_.size() < cl) {
      if (recv_some() <= 0) return std::nullopt;
    }
    r.body = buf_.substr(0, cl);
    buf_.erase(0, cl);
    return r;
  }

  std::optional<Response> request(const std::string& raw) {
    if (!send(raw)) return std::nullopt;
    return read_response();
  }

  // After the response: what the next read sees. 0: orderly EOF; -ECONNRESET: RST;
  // -EAGAIN: nothing within the timeout.
  ssize_t next_read() {
    ssize_t n = recv_some();
    return n;
  }
  size_t recv_calls() const { return recv_calls_; }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  std::string& buffer() { return buf_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bssl::UniquePtr<SSL> ssl_;
  std::string buf_;
  size_t recv_calls_ = 0;
};

std::string post(const std::string& path, const std::string& body,
                 const std::vector<std::string>& headers = {}) {
  std::string r =
      "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
  for (const auto& h : headers) r += h + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return r;
}

// A sink in its own temp dir.
struct SinkTest : ::testing::Test {
  TempDir dir{"ringcast-sink-test"};
  SinkProcess start(const std::vector<std::string>& args) {
    return SinkProcess::start(args, dir.path());
  }
};

TEST_F(SinkTest, KeepAliveCountsAndStats) {
  SinkProcess sink = start({});
  Client c(sink.port);
  ASSERT_TRUE(c.connected());
  constexpr int kRequests = 50;
  for (int i = 0; i < kRequests; ++i) {
    auto r = c.request(post("/hook", std::string(1024, 'x')));
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "ok");
    EXPECT_EQ(r->header("connection"), "");
  }
  auto s = c.request("GET /_stats HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->header("content-type"), "application/json");
  EXPECT_EQ(json_int(s->body, "requests"), kRequests);  // control requests are not counted
  EXPECT_EQ(json_int(s->body, "connections_accepted"), 1);
  EXPECT_EQ(json_int(s->body, "connections_open"), 1);
  EXPECT_GE(json_int(s->body, "bytes_received"), kRequests * 1024);
  EXPECT_NE(s->body.find("\"by_status\":{\"200\":50}"), std::string::npos) << s->body;
  ExitStatus st = sink.process.stop();
  EXPECT_TRUE(st.ok()) << st.str();
  // The final stats go to stdout on SIGTERM.
  EXPECT_NE(read_file(sink.process.options().stdout_path).find("\"requests\":50"),
            std::string::npos);
}

TEST_F(SinkTest, RecordsDeliveryIdsBeforeAnswering) {
  SinkProcess sink = start({});
  Client c(sink.port);
  ASSERT_EQ(c.request(post("/a", "{}", {"webhook-id: msg_1"}))->status, 200);
  ASSERT_EQ(c.request(post("/a", "{}", {"X-Webhook-Id: evt_2"}))->status, 200);
  ASSERT_EQ(c.request(post("/a", "{}", {"Smengo-Delivery-Id: d3:4"}))->status, 200);
  ASSERT_EQ(c.request(post("/a", "{}", {"webhook-id: msg_1"}))->status, 200);  // a retry
  ASSERT_EQ(c.request(post("/a", "{}"))->status, 200);                         // no id
  // Killed without warning: the lines are already in the file.
  sink.process.kill();
  auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0].id, "msg_1");
  EXPECT_EQ(ids[0].status, "200");
  EXPECT_EQ(ids[1].id, "evt_2");
  EXPECT_EQ(ids[2].id, "d3");
  EXPECT_EQ(ids[2].attempt, 4u);
  EXPECT_EQ(ids[3].id, "msg_1");
}

// --headers-file: one JSON line per request carrying an id, every header in order, written
// before the answer; quotes, control bytes and bytes above 0x7f are escaped.
TEST_F(SinkTest, HeadersFileRecordsEveryHeader) {
  const std::string file = dir.file("headers.jsonl");
  SinkProcess sink = start({"--headers-file", file, "--fault", "/r=status=503"});
  Client c(sink.port);
  ASSERT_EQ(c.request(post("/r?x=1", "{}",
                           {"webhook-id: msg_1", "X-Quote: a \"b\" \\c", "X-Tab:  a\tb ",
                            "X-Utf8: caf\xc3\xa9", "Idempotency-Key: msg_1"}))
                ->status,
            503);
  ASSERT_EQ(c.request(post("/a", "{}"))->status, 200);  // no id: not recorded
  sink.process.kill();
  const std::string text = read_file(file);
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find(R"({"id":"msg_1","attempt":0,"status":"503","target":"/r?x=1","headers":[)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(["Host","localhost"],["Content-Type","application/json"],)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(["X-Quote","a \"b\" \\c"],["X-Tab","a\u0009b"],)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(["X-Utf8","caf\u00c3\u00a9"],["Idempotency-Key","msg_1"],)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(["Content-Length","2"]]})"), std::string::npos) << text;
}

TEST_F(SinkTest, UniqueIdsInStats) {
  SinkProcess sink = start({"--fault", "/fail=status=503"});
  Client c(sink.port);
  c.request(post("/ok", "{}", {"webhook-id: a"}));
  c.request(post("/ok", "{}", {"webhook-id: a"}));
  c.request(post("/fail", "{}", {"webhook-id: b"}));
  c.request(post("/ok", "{}", {"webhook-id: c"}));
  std::string j = sink.stats_json();
  EXPECT_EQ(json_int(j, "ids_received"), 4);
  EXPECT_EQ(json_int(j, "unique_ids"), 3);
  EXPECT_EQ(json_int(j, "unique_ids_ok"), 2);
}

TEST_F(SinkTest, PipelinedChunkedAndExpectContinue) {
  SinkProcess sink = start({});
  Client c(sink.port);
  std::string chunked =
      "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nwebhook-id: ch1\r\n\r\n"
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
  ASSERT_TRUE(c.send(post("/p1", "one") + chunked + post("/p3", "three")));
  for (int i = 0; i < 3; ++i) {
    auto r = c.read_response();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200);
  }
  // Expect: 100-continue gets an interim answer before the body is sent.
  ASSERT_TRUE(
      c.send("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  while (c.buffer().find("\r\n\r\n") == std::string::npos) ASSERT_GT(c.recv_some(), 0);
  EXPECT_EQ(c.buffer().rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u);
  ASSERT_TRUE(c.send("abc"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(sink.stats_value("requests"), 4);
  EXPECT_EQ(sink.ids().at(0).id, "ch1");
}

TEST_F(SinkTest, MalformedAndOversizedRequests) {
  SinkProcess sink = start({"--max-body", "1000"});
  {
    Client c(sink.port);
    auto r = c.request("NOT-HTTP\r\n\r\n");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(r->header("connection"), "close");
    EXPECT_EQ(c.next_read(), 0);
  }
  {
    Client c(sink.port);
    auto r = c.request("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
  {
    Client c(sink.port);
    auto r = c.request("GET / HTTP/1.1\r\nX-Big: " + std::string(70 << 10, 'a') + "\r\n\r\n");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  {
    Client c(sink.port);
    auto r =
        c.request("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);  // both framings: refused (request smuggling shape)
  }
  EXPECT_EQ(sink.stats_value("parse_errors"), 4);
}

TEST_F(SinkTest, HttpOneZeroClosesAndHalfCloseIsAnswered) {
  SinkProcess sink = start({});
  Client c(sink.port);
  ASSERT_TRUE(c.send("GET /x HTTP/1.0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(c.next_read(), 0);

  // A client that half-closes after its request still gets the answer, then a FIN.
  Client h(sink.port);
  ASSERT_TRUE(h.send(post("/y", "body")));
  h.shutdown_write();
  auto a = h.read_response();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(h.next_read(), 0);
}

TEST_F(SinkTest, StandardWebhooksSignatures) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  const std::string old_key = "old-secret-bytes";
  // whsec_ secrets are base64-decoded, as Standard Webhooks defines them.
  std::string whsec = "whsec_" + base64(reinterpret_cast<const uint8_t*>(key.data()), key.size());
  SinkProcess sink = start({"--secret", whsec, "--secret", old_key, "--verify", "standard"});
  Client c(sink.port);
  const std::string body = R"({"type":"payment.status_changed","status":"paid"})";
  const std::string ts = now_ts();
  auto signed_req = [&](const std::string& id, const std::string& sig) {
    return post("/hook", body,
                {"webhook-id: " + id, "webhook-timestamp: " + ts, "webhook-signature: " + sig});
  };
  EXPECT_EQ(c.request(signed_req("msg_ok", sign_standard(key, "msg_ok", ts, body)))->status, 200);
  // Rotation: several space-separated signatures, one valid (by the old secret) is enough.
  std::string both = sign_standard("unknown", "msg_rot", ts, body) + " " +
                     sign_standard(old_key, "msg_rot", ts, body);
  EXPECT_EQ(c.request(signed_req("msg_rot", both))->status, 200);
  // Tampered body, wrong id, missing header, wrong scheme.
  EXPECT_EQ(c.request(post("/hook", body + " ",
                           {"webhook-id: msg_t", "webhook-timestamp: " + ts,
                            "webhook-signature: " + sign_standard(key, "msg_t", ts, body)}))
                ->status,
            401);
  EXPECT_EQ(c.request(signed_req("msg_other", sign_standard(key, "msg_x", ts, body)))->status, 401);
  EXPECT_EQ(
      c.request(post("/hook", body, {"webhook-id: msg_n", "webhook-timestamp: " + ts}))->status,
      401);
  std::string v2 = sign_standard(key, "msg_v2", ts, body);
  v2[1] = '2';
  EXPECT_EQ(c.request(signed_req("msg_v2", v2))->status, 401);
  std::string j = sink.stats_json();
  EXPECT_EQ(json_int(j, "bad_signatures"), 4);
  EXPECT_EQ(json_int(j, "requests"), 6);
  auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids[0].status, "200");
  EXPECT_EQ(ids[2].status, "401");
}

TEST_F(SinkTest, XhubSignaturesHexOrBase64) {
  const std::string key = "xhub-secret";
  SinkProcess sink = start({"--secret", key, "--verify", "xhub"});
  Client c(sink.port);
  const std::string body = R"({"payment_id":"p1"})";
  const std::string ts = now_ts();
  auto req = [&](const std::string& sig) {
    return post(
        "/x", body,
        {"X-Webhook-Id: evt_1", "X-Webhook-Timestamp: " + ts, "X-Webhook-Signature: " + sig});
  };
  EXPECT_EQ(c.request(req(sign_xhub_hex(key, ts, body)))->status, 200);
  EXPECT_EQ(c.request(req("sha256=" + sign_xhub_hex(key, ts, body)))->status, 200);
  std::string mac = hmac(key, ts + "." + body);
  EXPECT_EQ(
      c.request(req(base64(reinterpret_cast<const uint8_t*>(mac.data()), mac.size())))->status,
      200);
  EXPECT_EQ(c.request(req(sign_xhub_hex("wrong", ts, body)))->status, 401);
  EXPECT_EQ(c.request(req(sign_xhub_hex(key, "1", body)))->status, 401);  // other timestamp
  EXPECT_EQ(sink.stats_value("bad_signatures"), 2);
}

TEST_F(SinkTest, TimestampToleranceAndSmengoIds) {
  const std::string key = "k";
  SinkProcess sink = start({"--secret", key, "--verify", "smengo", "--timestamp-tolerance", "300"});
  Client c(sink.port);
  const std::string body = "{}";
  auto req = [&](const std::string& smengo, const std::string& ts) {
    return post("/s", body,
                {"Smengo-Delivery-Id: " + smengo, "webhook-id: dlv_9", "webhook-timestamp: " + ts,
                 "webhook-signature: " + sign_standard(key, "dlv_9", ts, body)});
  };
  EXPECT_EQ(c.request(req("dlv_9:2", now_ts()))->status, 200);
  EXPECT_EQ(c.request(req("dlv_9", now_ts()))->status, 401);  // no attempt number
  EXPECT_EQ(c.request(req("dlv_9:3", std::to_string(::time(nullptr) - 3600)))->status,
            401);  // stale
  auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0].id, "dlv_9");
  EXPECT_EQ(ids[0].attempt, 2u);
}

TEST_F(SinkTest, StatusMixIsSeededAndPerPath) {
  auto run = [&](uint64_t seed) {
    SinkProcess sink =
        start({"--seed", std::to_string(seed), "--fault", "/mix=status=503:0.3,410:0.2", "--fault",
               "/mix/deep=status=429;retry_after=7", "--fault", "/none=none"});
    Client c(sink.port);
    std::string seq;
    std::map<int, int> counts;
    for (int i = 0; i < 200; ++i) {
      auto r = c.request(post("/mix/" + std::to_string(i), "{}"));
      EXPECT_TRUE(r);
      if (!r) break;
      counts[r->status]++;
      seq += std::to_string(r->status) + ",";
    }
    auto deep = c.request(post("/mix/deep/1", "{}"));
    EXPECT_EQ(deep->status, 429);
    EXPECT_EQ(deep->header("retry-after"), "7");
    EXPECT_EQ(c.request(post("/other", "{}"))->status, 200);
    EXPECT_EQ(c.request(post("/none", "{}"))->status, 200);
    EXPECT_EQ(sink.stats_value("status_503"), counts[503]);
    EXPECT_EQ(counts[200] + counts[503] + counts[410], 200);
    // Loose bounds (p = 0.3 and 0.2 over 200 draws): the mix is really mixed.
    EXPECT_GT(counts[503], 30);
    EXPECT_GT(counts[410], 15);
    EXPECT_GT(counts[200], 60);
    return seq;
  };
  std::string a = run(42), b = run(42), c = run(43);
  EXPECT_EQ(a, b);  // same seed, same sequence
  EXPECT_NE(a, c);
}

TEST_F(SinkTest, LimitAndRuntimeFaultChanges) {
  SinkProcess sink = start({"--fault", "/=status=503;limit=2"});
  Client c(sink.port);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 503);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 503);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 200);
  // Replace the rules at run time ("sink down" without stopping it).
  auto r = c.request(post("/_fault", "/a=status=500\n/b=ok=204\n"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 500);
  auto b = c.request(post("/b", "{}"));
  EXPECT_EQ(b->status, 204);
  EXPECT_EQ(b->body, "");
  EXPECT_EQ(c.request(post("/_fault", "/a=bogus"))->status, 400);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 500);  // a bad update changes nothing
  EXPECT_EQ(c.request(post("/_fault", ""))->status, 200);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 200);
  EXPECT_EQ(c.request(post("/_reset", ""))->status, 200);
  EXPECT_EQ(sink.stats_value("requests"), 0);
}

TEST_F(SinkTest, DelayFixedAndRandom) {
  SinkProcess sink = start({"--fault", "/slow=delay=150ms", "--fault", "/rand=delay=20ms-60ms"});
  Client c(sink.port);
  auto t0 = Clock::now();
  auto r = c.request(post("/slow", "{}", {"webhook-id: slow_1"}));
  auto took = Clock::now() - t0;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(took, milliseconds(150));
  // The id is recorded when the request is read, before the delayed answer.
  t0 = Clock::now();
  ASSERT_TRUE(c.send(post("/slow", "{}", {"webhook-id: slow_2"})));
  EXPECT_TRUE(wait_for_file(sink.ids_file, milliseconds(1000)));
  while (sink.ids().size() < 2 && Clock::now() - t0 < milliseconds(140)) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(sink.ids().size(), 2u);
  ASSERT_TRUE(c.read_response());
  for (int i = 0; i < 5; ++i) {
    t0 = Clock::now();
    ASSERT_TRUE(c.request(post("/rand", "{}")));
    EXPECT_GE(Clock::now() - t0, milliseconds(20));
  }
  // Other paths are not slowed down, and a delayed answer keeps the connection usable.
  EXPECT_EQ(c.request(post("/fast", "{}"))->status, 200);
  EXPECT_EQ(sink.stats_value("delayed"), 7);
}

TEST_F(SinkTest, RedirectAndClose) {
  SinkProcess sink =
      start({"--fault", "/r=redirect=http://127.0.0.1:1/elsewhere", "--fault", "/c=close"});
  Client c(sink.port);
  auto r = c.request(post("/r", "{}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 302);
  EXPECT_EQ(r->header("location"), "http://127.0.0.1:1/elsewhere");
  auto k = c.request(post("/c", "{}"));
  ASSERT_TRUE(k);
  EXPECT_EQ(k->status, 200);
  EXPECT_EQ(k->header("connection"), "close");
  EXPECT_EQ(c.next_read(), 0);  // orderly FIN after the answer
  EXPECT_EQ(sink.stats_value("redirects"), 1);
}

TEST_F(SinkTest, HangRecordsAndNeverAnswers) {
  SinkProcess sink = start({"--fault", "/h=hang"});
  Client c(sink.port, "127.0.0.1", milliseconds(300));
  ASSERT_TRUE(c.send(post("/h", "{}", {"webhook-id: hung_1"})));
  EXPECT_EQ(c.next_read(), -EAGAIN);  // nothing within 300 ms
  auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0].id, "hung_1");
  EXPECT_EQ(ids[0].status, "hang");
  EXPECT_EQ(sink.stats_value("hangs"), 1);
  EXPECT_EQ(sink.stats_value("connections_open"), 2);  // the hung one and the stats one
}

TEST_F(SinkTest, ResetAfterRecording) {
  // SPEC R12.9: the receiver acted (the id is recorded), the response is lost (RST).
  SinkProcess sink = start({"--fault", "/r=reset"});
  Client c(sink.port);
  ASSERT_TRUE(c.send(post("/r", "{\"x\":1}", {"webhook-id: msg_lost"})));
  EXPECT_EQ(c.next_read(), -ECONNRESET);
  auto ids = sink.ids();
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0].id, "msg_lost");
  EXPECT_EQ(ids[0].status, "reset");
  EXPECT_EQ(sink.stats_value("resets"), 1);
  // The retry carries the same id and is answered on a new connection.
  Client again(sink.port);
  EXPECT_EQ(again.request(post("/ok", "{\"x\":1}", {"webhook-id: msg_lost"}))->status, 200);
  EXPECT_EQ(sink.stats_value("unique_ids"), 1);
  EXPECT_EQ(sink.stats_value("unique_ids_ok"), 1);
}

TEST_F(SinkTest, ProbabilisticReset) {
  SinkProcess sink = start({"--fault", "/=reset:0.5", "--seed", "7"});
  int resets = 0, oks = 0;
  for (int i = 0; i < 40; ++i) {
    Client c(sink.port);
    ASSERT_TRUE(c.send(post("/p", "{}", {"webhook-id: p" + std::to_string(i)})));
    auto r = c.read_response();
    if (r) {
      ++oks;
    } else {
      ++resets;
    }
  }
  EXPECT_GT(resets, 5);
  EXPECT_GT(oks, 5);
  EXPECT_EQ(sink.stats_value("resets"), resets);
  EXPECT_EQ(sink.ids().size(), 40u);
}

TEST_F(SinkTest, TrickleSendsOneBytePerInterval) {
  SinkProcess sink = start({"--fault", "/t=trickle=3ms"});
  Client c(sink.port);
  auto t0 = Clock::now();
  auto r = c.request(post("/t", "{}"));
  auto took = Clock::now() - t0;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  const size_t total = r->head_bytes + r->body.size();
  EXPECT_GE(took, milliseconds(3) * (total - 1));
  EXPECT_GT(c.recv_calls(), total / 4);  // many small pieces, not one
  EXPECT_EQ(c.request(post("/fast", "{}"))->status, 200);
}

TEST_F(SinkTest, BigHeadersAndBigBody) {
  SinkProcess sink =
      start({"--fault", "/big=big_headers=80", "--fault", "/body=body_bytes=300000"});
  Client c(sink.port);
  auto r = c.request(post("/big", "{}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(r->head_bytes, 80u * 1024);
  EXPECT_GE(r->headers.size(), 80u);
  auto b = c.request(post("/body", "{}"));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->body.size(), 300000u);
}

TEST_F(SinkTest, EndlessChunkedBody) {
  SinkProcess sink = start({"--fault", "/e=endless_chunked"});
  Client c(sink.port);
  ASSERT_TRUE(c.send(post("/e", "{}")));
  auto r = c.read_response(/*max_body=*/2 << 20);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_GE(r->body.size(), 2u << 20);
  EXPECT_FALSE(r->chunked_complete);
  EXPECT_EQ(sink.stats_value("endless"), 1);
}

TEST_F(SinkTest, IdleTimeoutAndMaxRequestsPerConnection) {
  SinkProcess sink = start({"--idle-timeout", "50ms", "--max-requests-per-connection", "3"});
  {
    Client c(sink.port);
    EXPECT_EQ(c.request(post("/a", "{}"))->status, 200);
    EXPECT_EQ(c.next_read(), 0);  // closed by the sink after 50 ms idle
  }
  Client c(sink.port);
  EXPECT_EQ(c.request(post("/a", "{}"))->header("connection"), "");
  EXPECT_EQ(c.request(post("/a", "{}"))->header("connection"), "");
  EXPECT_EQ(c.request(post("/a", "{}"))->header("connection"), "close");
  EXPECT_EQ(c.next_read(), 0);
}

TEST_F(SinkTest, RestartOnTheSamePortAndIpv6) {
  uint16_t port = free_tcp_port();
  std::string listen = "127.0.0.1:" + std::to_string(port);
  {
    SinkProcess sink = start({"--listen", listen});
    EXPECT_EQ(sink.port, port);
    Client c(port);
    EXPECT_EQ(c.request(post("/a", "{}"))->status, 200);
    sink.process.stop();
    Client down(port);
    EXPECT_FALSE(down.connected());  // "sink down": connection refused
  }
  SinkProcess again = start({"--listen", listen});
  Client c(port);
  EXPECT_EQ(c.request(post("/a", "{}"))->status, 200);

  SinkProcess v6 = start({"--listen", "[::1]:0"});
  EXPECT_EQ(v6.host, "::1");
  Client c6(v6.port, "::1");
  ASSERT_TRUE(c6.connected());
  EXPECT_EQ(c6.request(post("/a", "{}"))->status, 200);
  EXPECT_EQ(v6.base_url(), "http://[::1]:" + std::to_string(v6.port));
}

TEST_F(SinkTest, SeveralWorkerThreads) {
  SinkProcess sink = start({"--threads", "3"});
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      Client c(sink.port);
      for (int i = 0; i < 30; ++i) {
        auto r = c.request(
            post("/t", "{}", {"webhook-id: t" + std::to_string(t) + "_" + std::to_string(i)}));
        if (r && r->status == 200) ++ok;
      }
    });
  }
  for (auto& th : clients) th.join();
  EXPECT_EQ(ok.load(), 180);
  std::string j = sink.stats_json();
  EXPECT_EQ(json_int(j, "requests"), 180);
  EXPECT_EQ(json_int(j, "unique_ids"), 180);
  EXPECT_EQ(json_int(j, "connections_accepted"), 7);
  EXPECT_EQ(sink.ids().size(), 180u);
  EXPECT_TRUE(sink.process.stop().ok());
}

TEST_F(SinkTest, PortFileAndBadOptions) {
  std::string pf = dir.file("port");
  SinkProcess sink = start({"--port-file", pf});
  ASSERT_TRUE(wait_for_file(pf, milliseconds(2000)));
  EXPECT_EQ(std::stoi(read_file(pf)), sink.port);
  ProcessOptions o;
  o.stderr_path = dir.file("bad.err");
  Process bad = Process::start(
      {std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast-sink", "--fault", "/x=status=abc"}, o);
  auto st = bad.wait(milliseconds(5000));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->code, 2);
  EXPECT_NE(read_file(o.stderr_path).find("bad status"), std::string::npos);
}

class TlsSinkTest : public SinkTest {
 protected:
  void SetUp() override {
    files_ = ca_.write_localhost(dir.path());
    ctx_.reset(SSL_CTX_new(TLS_method()));
    bssl::UniquePtr<BIO> bio(
        BIO_new_mem_buf(ca_.ca_pem.data(), static_cast<int>(ca_.ca_pem.size())));
    bssl::UniquePtr<X509> ca(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_.get()), ca.get());
    SSL_CTX_set_verify(ctx_.get(), SSL_VERIFY_PEER, nullptr);
    // TLS 1.3 tickets arrive after the handshake: BoringSSL hands them to the new-session
    // callback (SSL_get1_session would return the non-resumable original).
    SSL_CTX_set_session_cache_mode(ctx_.get(), SSL_SESS_CACHE_CLIENT);
    SSL_CTX_set_app_data(ctx_.get(), this);
    SSL_CTX_sess_set_new_cb(ctx_.get(), [](SSL* ssl, SSL_SESSION* session) {
      auto* self = static_cast<TlsSinkTest*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
      self->last_session_.reset(session);  // we take the reference
      return 1;
    });
  }
  bssl::UniquePtr<SSL_SESSION> last_session_;
  TestCa ca_ = TestCa::create();
  CertFiles files_;
  bssl::UniquePtr<SSL_CTX> ctx_;
};

TEST_F(TlsSinkTest, ServesTlsWithTestCaAndResumesSessions) {
  SinkProcess sink = start({"--tls-cert", files_.cert, "--tls-key", files_.key});
  bssl::UniquePtr<SSL_SESSION> session;
  {
    Client c(sink.port);
    ASSERT_TRUE(c.start_tls(ctx_.get(), "localhost"));
    for (int i = 0; i < 3; ++i) {
      auto r =
          c.request(post("/tls", std::string(3000, 'y'), {"webhook-id: tls_" + std::to_string(i)}));
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200);
    }
    session = std::move(last_session_);  // read along with the answers
  }
  ASSERT_TRUE(session);
  Client again(sink.port);
  ASSERT_TRUE(again.start_tls(ctx_.get(), "localhost", session.get()));
  EXPECT_TRUE(SSL_session_reused(again.ssl()));
  EXPECT_EQ(again.request(post("/tls", "{}"))->status, 200);
  std::string j = sink.stats_json();
  EXPECT_EQ(json_int(j, "tls_handshakes"), 2) << j;  // full ones: the first and the stats one
  EXPECT_EQ(json_int(j, "tls_resumed"), 1);
  EXPECT_EQ(sink.ids().size(), 3u);
}

TEST_F(TlsSinkTest, ClientRejectsWrongNameAndOtherCa) {
  SinkProcess sink = start({"--tls-cert", files_.cert, "--tls-key", files_.key});
  Client wrong_name(sink.port);
  EXPECT_FALSE(wrong_name.start_tls(ctx_.get(), "not-localhost.test"));
  TestCa other = TestCa::create("other");
  bssl::UniquePtr<SSL_CTX> ctx(SSL_CTX_new(TLS_method()));
  bssl::UniquePtr<BIO> bio(
      BIO_new_mem_buf(other.ca_pem.data(), static_cast<int>(other.ca_pem.size())));
  bssl::UniquePtr<X509> ca(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca.get());
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  Client untrusted(sink.port);
  EXPECT_FALSE(untrusted.start_tls(ctx.get(), "localhost"));
  // A plain-HTTP client against the TLS sink fails the handshake and is closed.
  Client plain(sink.port);
  ASSERT_TRUE(plain.send(post("/a", "{}")));
  EXPECT_LE(plain.next_read(), 0);
  for (int i = 0; i < 100 && sink.stats_value("tls_handshake_failures") < 3; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(sink.stats_value("tls_handshake_failures"), 3);
}

TEST_F(TlsSinkTest, StallNeverAnswersNotEvenTheHandshake) {
  SinkProcess sink = start({"--tls-cert", files_.cert, "--tls-key", files_.key, "--stall"});
  Client c(sink.port, "127.0.0.1", milliseconds(300));
  ASSERT_TRUE(c.connected());
  auto t0 = Clock::now();
  EXPECT_FALSE(c.start_tls(ctx_.get(), "localhost"));  // gives up on the receive timeout
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  SinkProcess plain = start({"--stall"});
  Client p(plain.port, "127.0.0.1", milliseconds(200));
  ASSERT_TRUE(p.send(post("/a", "{}", {"webhook-id: never"})));
  EXPECT_EQ(p.next_read(), -EAGAIN);
  EXPECT_TRUE(plain.ids().empty());
}

TEST_F(TlsSinkTest, FaultsWorkOverTls) {
  SinkProcess sink = start({"--tls-cert", files_.cert, "--tls-key", files_.key, "--fault",
                            "/r=reset", "--fault", "/t=trickle=1ms"});
  Client t(sink.port);
  ASSERT_TRUE(t.start_tls(ctx_.get(), "localhost"));
  auto r = t.request(post("/t", "{}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "ok");
  Client c(sink.port);
  ASSERT_TRUE(c.start_tls(ctx_.get(), "localhost"));
  ASSERT_TRUE(c.send(post("/r", "{}", {"webhook-id: tls_reset"})));
  EXPECT_LT(c.next_read(), 0);
  EXPECT_EQ(sink.ids().at(0).status, "reset");
}

// ---- nginx -----------------------------------------------------------------------------------

TEST(NginxTest, StartsServesKeepAliveAndStops) {
  if (!Nginx::available()) RINGCAST_SKIP_MISSING() << "nginx-light is not installed";
  TempDir dir("ringcast-nginx-test");
  NginxOptions o;
  o.extra_server = "location /fail { return 503 \"down\"; }";
  Nginx nginx = Nginx::start(dir.path(), o);
  EXPECT_EQ(nginx.base_url(), "http://127.0.0.1:" + std::to_string(nginx.port()));
  Client c(nginx.port());
  for (int i = 0; i < 3; ++i) {
    auto r = c.request(post("/hook", "{}"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "ok");
  }
  auto f = c.request(post("/fail", "{}"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->status, 503);
  EXPECT_NE(nginx.access_log().find("POST /hook"), std::string::npos);
  ExitStatus st = nginx.stop();
  EXPECT_TRUE(st.ok()) << st.str() << nginx.error_log();
  EXPECT_FALSE(wait_for_port("127.0.0.1", nginx.port(), milliseconds(50)));
}

TEST_F(TlsSinkTest, NginxWithTestCaCertificate) {
  if (!Nginx::available()) RINGCAST_SKIP_MISSING() << "nginx-light is not installed";
  NginxOptions o;
  o.tls = true;
  o.cert_file = files_.cert;
  o.key_file = files_.key;
  Nginx nginx = Nginx::start(dir.path(), o);
  EXPECT_EQ(nginx.base_url().rfind("https://", 0), 0u);
  Client c(nginx.port());
  ASSERT_TRUE(c.start_tls(ctx_.get(), "localhost"));
  auto r = c.request(post("/", "{}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  Client wrong(nginx.port());
  EXPECT_FALSE(wrong.start_tls(ctx_.get(), "other.test"));
}

}  // namespace
}  // namespace ringcast::test
