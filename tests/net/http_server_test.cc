// net/http_server: real loopback sockets against HttpServerThread. Keep-alive, Content-Length
// and chunked bodies, pipelining order with answers completing out of order on other threads,
// limits (413/431), malformed input (400), idle timeout, graceful stop, late answers.
#include "net/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/net/http_test_client.h"

namespace ringcast::net {
namespace {

using test::ClientResponse;
using test::TestClient;
using ::testing::HasSubstr;

// Answers on other threads after a delay; lets tests hold responders.
class TestHandler final : public HttpHandler {
 public:
  ~TestHandler() override { join(); }

  size_t max_body_bytes(const HttpRequest& head) override {
    return head.path() == "/small" ? 16 : 1024 * 1024;
  }

  void handle(HttpRequest&& req, Responder r) override {
    handled_++;
    std::string path(req.path());
    if (path == "/echo" || path == "/small") {
      HttpResponse resp;
      resp.content_type = "text/plain";
      resp.body = req.method + " " + req.target + " " + req.body;
      resp.headers.push_back(
          {"x-padded", req.body.capacity() >= req.body.size() + kBodyPadding ? "yes" : "no"});
      if (const std::string* v = req.header("x-test")) resp.headers.push_back({"x-test-echo", *v});
      r.send(std::move(resp));
    } else if (path == "/async") {
      // /async?<ms>: answer from another thread after ms milliseconds.
      int ms = std::stoi(std::string(req.query()));
      std::string body = req.target;
      std::lock_guard lock(mu_);
      threads_.emplace_back([r = std::move(r), ms, body]() mutable {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        r.send(HttpResponse::json(200, "\"" + body + "\""));
      });
    } else if (path == "/drop") {
      // The responder is destroyed unanswered: the server must still answer (500).
    } else if (path == "/hold") {
      std::lock_guard lock(mu_);
      held_.push_back(std::move(r));
      cv_.notify_all();
    } else {
      r.send(HttpResponse::error(404, "not_found", "no route"));
    }
  }

  void join() {
    std::vector<std::thread> ts;
    {
      std::lock_guard lock(mu_);
      ts.swap(threads_);
    }
    for (auto& t : ts) t.join();
  }

  // Waits until `n` responders are held (bounded).
  bool wait_held(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return held_.size() >= n; });
  }
  std::vector<Responder> take_held() {
    std::lock_guard lock(mu_);
    return std::move(held_);
  }

  std::atomic<int> handled_{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::vector<Responder> held_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpServerOptions opts = {}) {
    server_ = std::make_unique<HttpServerThread>(handler_, opts);
    ASSERT_TRUE(server_->start().ok());
    ASSERT_NE(server_->port(), 0);
  }
  uint16_t port() const { return server_->port(); }

  TestHandler handler_;
  std::unique_ptr<HttpServerThread> server_;
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  TestClient c(port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    ClientResponse r = c.request("GET", "/echo?i=" + std::to_string(i));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "GET /echo?i=" + std::to_string(i) + " ");
    ASSERT_NE(r.header("content-type"), nullptr);
    EXPECT_EQ(*r.header("content-type"), "text/plain");
    EXPECT_NE(r.header("date"), nullptr);
    EXPECT_EQ(r.header("connection"), nullptr);  // HTTP/1.1 keep-alive is the default
  }
  EXPECT_EQ(handler_.handled_.load(), 3);
}

TEST_F(HttpServerTest, ContentLengthAndChunkedBodiesArriveWholeAndPadded) {
  start();
  TestClient c(port());
  ClientResponse r = c.request("POST", "/echo", "hello body", {{"X-Test", "v1"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /echo hello body");
  EXPECT_EQ(*r.header("x-padded"), "yes");
  EXPECT_EQ(*r.header("x-test-echo"), "v1");

  c.send_raw(
      "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n1\r\n \r\n6\r\nchunks\r\n0\r\n\r\n");
  r = c.read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /echo hello chunks");
  EXPECT_EQ(*r.header("x-padded"), "yes");
}

TEST_F(HttpServerTest, BodySplitAcrossManySegmentsIsReassembled) {
  start();
  TestClient c(port());
  std::string body(200'000, 'x');
  for (size_t i = 0; i < body.size(); i += 7) body[i] = static_cast<char>('a' + i % 26);
  std::string req = TestClient::format("POST", "/echo", body, {});
  for (size_t off = 0; off < req.size(); off += 4096) {
    ASSERT_TRUE(c.send_raw(std::string_view(req).substr(off, 4096)));
  }
  ClientResponse r = c.read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /echo " + body);
}

TEST_F(HttpServerTest, PipelinedAnswersLeaveInRequestOrderWhenCompletedOutOfOrder) {
  start();
  TestClient c(port());
  std::string batch = TestClient::format("GET", "/async?150", {}, {}) +
                      TestClient::format("GET", "/async?0", {}, {}) +
                      TestClient::format("GET", "/echo", {}, {}) +
                      TestClient::format("GET", "/async?60", {}, {});
  ASSERT_TRUE(c.send_raw(batch));
  auto rs = c.read_responses(4);
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0].body, "\"/async?150\"");
  EXPECT_EQ(rs[1].body, "\"/async?0\"");
  EXPECT_EQ(rs[2].body, "GET /echo ");
  EXPECT_EQ(rs[3].body, "\"/async?60\"");
}

TEST_F(HttpServerTest, PipelineDeeperThanTheCapPausesAndResumesParsing) {
  HttpServerOptions o;
  o.max_pipelined = 2;
  start(o);
  TestClient c(port());
  std::string batch;
  for (int i = 0; i < 25; ++i) {
    batch += TestClient::format("POST", i % 3 == 0 ? "/async?1" : "/echo",
                                std::string("n").append(std::to_string(i)), {});
  }
  ASSERT_TRUE(c.send_raw(batch));
  auto rs = c.read_responses(25);
  ASSERT_EQ(rs.size(), 25u);
  for (int i = 0; i < 25; ++i) {
    if (i % 3 == 0) {
      EXPECT_EQ(rs[i].body, "\"/async?1\"") << i;
    } else {
      EXPECT_EQ(rs[i].body, "POST /echo n" + std::to_string(i)) << i;
    }
  }
}

TEST_F(HttpServerTest, OversizeBodyIs413JsonAndClosesByContentLengthOrChunks) {
  start();
  {
    TestClient c(port());
    ClientResponse r = c.request("POST", "/small", std::string(17, 'x'));
    EXPECT_EQ(r.status, 413);
    EXPECT_THAT(r.body, HasSubstr(R"("code":"body_too_large")"));
    EXPECT_THAT(r.body, HasSubstr(R"("field":"body")"));
    ASSERT_NE(r.header("connection"), nullptr);
    EXPECT_EQ(*r.header("connection"), "close");
    EXPECT_TRUE(c.wait_eof());
  }
  {
    TestClient c(port());
    c.send_raw(
        "POST /small HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        "a\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n");
    ClientResponse r = c.read_one();
    EXPECT_EQ(r.status, 413);
    EXPECT_TRUE(c.wait_eof());
  }
  {
    TestClient c(port());  // exactly at the limit is fine
    ClientResponse r = c.request("POST", "/small", std::string(16, 'x'));
    EXPECT_EQ(r.status, 200);
  }
  EXPECT_EQ(handler_.handled_.load(), 1);
}

TEST_F(HttpServerTest, OversizeHeadersAre431) {
  HttpServerOptions o;
  o.max_header_bytes = 2048;
  o.max_headers = 10;
  start(o);
  {
    TestClient c(port());
    ClientResponse r = c.request("GET", "/echo", {}, {{"X-Big", std::string(4000, 'a')}});
    EXPECT_EQ(r.status, 431);
    EXPECT_THAT(r.body, HasSubstr("headers_too_large"));
    EXPECT_TRUE(c.wait_eof());
  }
  {
    TestClient c(port());
    std::vector<std::pair<std::string, std::string>> many;
    for (int i = 0; i < 11; ++i) many.emplace_back("X-H" + std::to_string(i), "v");
    ClientResponse r = c.request("GET", "/echo", {}, many);
    EXPECT_EQ(r.status, 431);
  }
  EXPECT_EQ(handler_.handled_.load(), 0);
}

TEST_F(HttpServerTest, MalformedRequestIs400Json) {
  start();
  TestClient c(port());
  c.send_raw("GARBAGE\r\n\r\n");
  ClientResponse r = c.read_one();
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr(R"("code":"bad_request")"));
  EXPECT_TRUE(c.wait_eof());
}

// RFC 9112 strictness: each malformed head or framing is refused with one error answer, the
// connection closes, and the handler never sees the request. Several of these are the shapes of
// request smuggling (two framings, two lengths, folded or padded names).
TEST_F(HttpServerTest, Rfc9112ViolationsAreRefusedAndClose) {
  struct Case {
    const char* name;
    std::string raw;
    int status;
    const char* message;  // a part of the error message
  };
  static constexpr char kNulValue[] = "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n";
  const std::string post = "POST /echo HTTP/1.1\r\nHost: t\r\n";
  const std::string chunked = post + "Transfer-Encoding: chunked\r\n\r\n";
  const std::vector<Case> cases = {
      {"space before colon", "GET /echo HTTP/1.1\r\nHost : t\r\n\r\n", 400,
       "whitespace between a header field name and the colon"},
      {"space before colon, second field", "GET /echo HTTP/1.1\r\nHost: t\r\nX-A : 1\r\n\r\n", 400,
       "whitespace between a header field name and the colon"},
      {"tab before colon", "GET /echo HTTP/1.1\r\nHost\t: t\r\n\r\n", 400,
       "whitespace between a header field name and the colon"},
      {"empty field name", "GET /echo HTTP/1.1\r\nHost: t\r\n: v\r\n\r\n", 400,
       "empty header field name"},
      {"no HTTP version", "GET /echo\r\n\r\n", 400, "without an HTTP version"},
      {"HTTP/0.9", "GET /echo HTTP/0.9\r\n\r\n", 400, "without an HTTP version"},
      {"HTTP/2.0 over HTTP/1 framing", "GET /echo HTTP/2.0\r\nHost: t\r\n\r\n", 505,
       "only HTTP/1.0 and HTTP/1.1"},
      {"obs-fold (space)", "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: b\r\n c\r\n\r\n", 400,
       "obsolete line folding"},
      {"obs-fold (tab)", "GET /echo HTTP/1.1\r\nX-A: b\r\n\tc\r\nHost: t\r\n\r\n", 400,
       "obsolete line folding"},
      {"obs-fold in a trailer", chunked + "3\r\nabc\r\n0\r\nX-T: 1\r\n 2\r\n\r\n", 400,
       "obsolete line folding"},
      {"no Host (HTTP/1.1)", "GET /echo HTTP/1.1\r\n\r\n", 400, "without a Host header"},
      {"two Host", "GET /echo HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400, "more than one Host"},
      {"Content-Length and Transfer-Encoding",
       post + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
       "Content-Length can't be present with Transfer-Encoding"},
      {"Transfer-Encoding and Content-Length",
       post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400,
       "Content-Length can't be present with Transfer-Encoding"},
      {"two differing Content-Length", post + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
       400, "Duplicate Content-Length"},
      {"two equal Content-Length", post + "Content-Length: 3\r\ncontent-length: 3\r\n\r\nabc", 400,
       "Duplicate Content-Length"},
      {"Content-Length list", post + "Content-Length: 3, 3\r\n\r\nabc", 400, "Content-Length"},
      {"signed Content-Length", post + "Content-Length: +3\r\n\r\nabc", 400, "Content-Length"},
      {"Transfer-Encoding twice",
       post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
       "Transfer-Encoding"},
      {"Transfer-Encoding in HTTP/1.0",
       "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
       "Transfer-Encoding in an HTTP/1.0 request"},
      {"unknown coding before chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
       501, "only Transfer-Encoding: chunked"},
      {"chunked not last", post + "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400,
       "Transfer-Encoding"},
      {"chunk size not hex", chunked + "zz\r\nabc\r\n0\r\n\r\n", 400, "chunk size"},
      {"chunk size 0x", chunked + "0x3\r\nabc\r\n0\r\n\r\n", 400, "chunk size"},
      {"chunk size signed", chunked + "-3\r\nabc\r\n0\r\n\r\n", 400, "chunk size"},
      {"chunk size with a space", chunked + "3 \r\nabc\r\n0\r\n\r\n", 400, "chunk size"},
      {"chunk size overflow", chunked + "10000000000000000\r\nabc\r\n0\r\n\r\n", 400,
       "Chunk size overflow"},
      {"chunk longer than its size", chunked + "3\r\nabcd\r\n0\r\n\r\n", 400, "chunk"},
      {"chunk size ended by LF only", chunked + "3\nabc\r\n0\r\n\r\n", 400, "chunk size"},
      {"tab in the target", "GET /ec\tho HTTP/1.1\r\nHost: t\r\n\r\n", 400, "HPE_INVALID_URL"},
      {"non-ASCII in the target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n", 400,
       "HPE_INVALID_URL"},
      // RFC 9112 2.2: a bare CR is not a line end (llhttp's loose mode took CR + any byte
      // as the CRLF ending the head: the byte after it vanished).
      {"bare CR ends the head", "GET /echo HTTP/1.1\r\nHost: t\r\n\rX\r\n\r\n", 400,
       "Expected LF after headers"},
      {"bare CR after the request line", "GET /echo HTTP/1.1\rHost: t\r\n\r\n", 400, "CRLF"},
      {"bare CR in a field line", "GET /echo HTTP/1.1\r\nHost: t\rX-A: 1\r\n\r\n", 400, "LF"},
      {"NUL in a value", std::string(kNulValue, sizeof kNulValue - 1), 400, "malformed"},
  };
  start();
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    TestClient c(port());
    ASSERT_TRUE(c.connected());
    c.send_raw(k.raw);
    ClientResponse r = c.read_one();
    EXPECT_EQ(r.status, k.status) << r.body;
    EXPECT_THAT(r.body, HasSubstr(k.message));
    const std::string* connection = r.header("connection");
    EXPECT_TRUE(connection && *connection == "close");
    EXPECT_TRUE(c.wait_eof());
  }
  EXPECT_EQ(handler_.handled_.load(), 0);
}

TEST_F(HttpServerTest, StrictParsingStillServesValidRequests) {
  start();
  TestClient c(port());
  // Case-insensitive names, OWS around values, a chunk extension, a valid trailer, and HTTP/1.0
  // without Host are all fine.
  c.send_raw(
      "POST /echo HTTP/1.1\r\nHOST: t\r\nX-Test:   v1  \r\nTransfer-Encoding: Chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n");
  ClientResponse r = c.read_one();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "POST /echo abc");
  ASSERT_NE(r.header("x-test-echo"), nullptr);
  EXPECT_EQ(*r.header("x-test-echo"), "v1");
  c.send_raw("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(c.read_one().status, 200);
}

TEST_F(HttpServerTest, TrailerFieldsAreNotMergedIntoTheHeaders) {
  start();
  TestClient c(port());
  // RFC 9110 6.5.1: a trailer must not stand in for a header (here x-test, which /echo echoes;
  // in the API it could be Authorization arriving after the body limit was chosen).
  c.send_raw(
      "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\nhi\r\n0\r\nX-Test: from-trailer\r\n\r\n");
  ClientResponse r = c.read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /echo hi");
  EXPECT_EQ(r.header("x-test-echo"), nullptr);
}

TEST_F(HttpServerTest, DroppedResponderAnswers500) {
  start();
  TestClient c(port());
  ClientResponse r = c.request("GET", "/drop");
  EXPECT_EQ(r.status, 500);
  EXPECT_THAT(r.body, HasSubstr("internal"));
  r = c.request("GET", "/echo");  // the connection is still usable
  EXPECT_EQ(r.status, 200);
}

TEST_F(HttpServerTest, ConnectionCloseIsHonouredAndLaterBytesIgnored) {
  start();
  TestClient c(port());
  std::string two = TestClient::format("GET", "/echo", {}, {{"Connection", "close"}}) +
                    TestClient::format("GET", "/echo", {}, {});
  c.send_raw(two);
  auto rs = c.read_responses(2);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(*rs[0].header("connection"), "close");
  EXPECT_TRUE(c.wait_eof());
  EXPECT_EQ(handler_.handled_.load(), 1);
}

TEST_F(HttpServerTest, Http10KeepAliveGetsTheHeader) {
  start();
  TestClient c(port());
  c.send_raw("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  ClientResponse r = c.read_one();
  EXPECT_EQ(r.status, 200);
  ASSERT_NE(r.header("connection"), nullptr);
  EXPECT_EQ(*r.header("connection"), "keep-alive");
}

TEST_F(HttpServerTest, ExpectContinueGets100First) {
  start();
  TestClient c(port());
  c.send_raw("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  ClientResponse cont = c.read_one();
  EXPECT_EQ(cont.status, 100);
  c.send_raw("abc");
  ClientResponse r = c.read_one();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "POST /echo abc");
}

TEST_F(HttpServerTest, HeadHasNoBody) {
  start();
  TestClient c(port());
  c.send_raw("HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
  // llhttp (response mode) cannot know the first response was to HEAD; read raw instead.
  std::string raw;
  char buf[4096];
  while (raw.find("GET /echo ") == std::string::npos) {
    ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0);
    raw.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(raw.find("HEAD /echo "), std::string::npos);
  EXPECT_THAT(raw, HasSubstr("Content-Length: 11\r\n"));  // HEAD: the length, no body
}

TEST_F(HttpServerTest, IdleConnectionsAreClosed) {
  HttpServerOptions o;
  o.idle_timeout = milliseconds(100);
  start(o);
  TestClient c(port());
  EXPECT_EQ(c.request("GET", "/echo").status, 200);
  EXPECT_TRUE(c.wait_eof());
  TestClient slow(port());  // a head that never completes is not kept either
  slow.send_raw("GET /echo HTTP/1.1\r\nHost: t\r\n");
  EXPECT_TRUE(slow.wait_eof());
}

TEST_F(HttpServerTest, GracefulStopFinishesInFlightAndRefusesNewConnections) {
  start();
  TestClient busy(port());
  TestClient idle(port());
  EXPECT_EQ(idle.request("GET", "/echo").status, 200);
  busy.send_raw(TestClient::format("GET", "/async?300", {}, {}));
  while (handler_.handled_.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  uint16_t p = port();
  std::thread stopper([&] { server_->stop(seconds(5)); });
  ClientResponse r = busy.read_one();
  EXPECT_TRUE(busy.wait_eof());
  EXPECT_TRUE(idle.wait_eof());
  stopper.join();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "\"/async?300\"");
  ASSERT_NE(r.header("connection"), nullptr);
  EXPECT_EQ(*r.header("connection"), "close");
  TestClient late(p);
  EXPECT_FALSE(late.connected());
}

TEST_F(HttpServerTest, StopIsBoundedWhenAHandlerNeverAnswers) {
  start();
  TestClient c(port());
  c.send_raw(TestClient::format("GET", "/hold", {}, {}));
  ASSERT_TRUE(handler_.wait_held(1));
  auto t0 = std::chrono::steady_clock::now();
  server_->stop(milliseconds(100));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(c.wait_eof());
  // Answering after the server is gone is harmless (ASan would see a use after free).
  for (Responder& r : handler_.take_held()) r.send(HttpResponse::json(200, "{}"));
}

TEST_F(HttpServerTest, AnswerAfterTheClientLeftIsDropped) {
  start();
  {
    TestClient c(port());
    c.send_raw(TestClient::format("GET", "/hold", {}, {}));
    ASSERT_TRUE(handler_.wait_held(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the server see the EOF
  for (Responder& r : handler_.take_held()) r.send(HttpResponse::json(200, "{}"));
  TestClient c(port());
  EXPECT_EQ(c.request("GET", "/echo").status, 200);
}

TEST_F(HttpServerTest, ManyConcurrentClients) {
  start();
  constexpr int kClients = 8;
  constexpr int kRequests = 50;
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < kClients; ++i) {
    ts.emplace_back([&, i] {
      TestClient c(port());
      for (int j = 0; j < kRequests; ++j) {
        std::string body = std::to_string(i) + ":" + std::to_string(j);
        ClientResponse r = c.request("POST", j % 5 == 0 ? "/async?0" : "/echo", body);
        if (r.status == 200) ok++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), kClients * kRequests);
}

TEST(HttpServerStart, BindFailureIsAnError) {
  TestHandler h;
  HttpServerThread a(h, {});
  ASSERT_TRUE(a.start().ok());
  HttpServerOptions o;
  o.port = a.port();
  HttpServerThread b(h, o);
  Result<void> r = b.start();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kIo);
}

TEST(HttpResponseTest, ErrorShape) {
  HttpResponse r = HttpResponse::error(400, "invalid_type", "id must be a \"string\"", "id");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(
      r.body,
      R"({"error":{"code":"invalid_type","message":"id must be a \"string\"","field":"id"}})");
  r = HttpResponse::error(401, "unauthorized", "no token");
  EXPECT_EQ(r.body, R"({"error":{"code":"unauthorized","message":"no token"}})");
}

TEST(ResponderTest, FromFunctionAndDropAnswers500) {
  int status = 0;
  {
    Responder r = Responder::from_function([&](HttpResponse resp) { status = resp.status; });
    EXPECT_TRUE(r.valid());
  }
  EXPECT_EQ(status, 500);
  Responder r = Responder::from_function([&](HttpResponse resp) { status = resp.status; });
  Responder moved = std::move(r);
  EXPECT_FALSE(r.valid());
  moved.send(HttpResponse::json(201, "{}"));
  EXPECT_EQ(status, 201);
  EXPECT_FALSE(moved.valid());
}

}  // namespace
}  // namespace ringcast::net
