// HttpTransport end to end on loopback: real sockets, real TLS with a CA made at test time, hostile
// receivers, SSRF and DNS rebinding (SPEC R6 private_address). Every test is bounded by short
// deadlines in the options.
#include "net/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <thread>

#include "net/signing.h"
#include "tests/net/test_http_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::net {
namespace {

using test::net_server::HttpAction;
using test::net_server::HttpRequest;
using test::net_server::respond;
using test::net_server::ServerOptions;
using test::net_server::TestHttpServer;
using K = ErrorCode::Kind;

struct Op final : SendOp {
  std::string body;  // request.body points here
  bool done = false;
  int completions = 0;
  std::function<void(Op*)> then;
  void on_complete() override {
    done = true;
    completions++;
    if (then) then(this);
  }
};

// A resolver whose answers the test scripts: per host, a queue of answers (the last one
// repeats); answers arrive on a later loop turn. `hold` keeps lookups pending forever.
class FakeResolver final : public Resolver {
 public:
  explicit FakeResolver(Loop& loop) : loop_(loop) {}
  void answer(const std::string& host, std::vector<IpAddress> addrs) {
    answers_[host].push_back(std::move(addrs));
  }
  void resolve(ResolveOp* op) override {
    calls_[op->host]++;
    if (hold_) {
      held_.push_back(op);
      return;
    }
    auto it = answers_.find(op->host);
    std::vector<IpAddress> addrs;
    if (it != answers_.end() && !it->second.empty()) {
      addrs = it->second.front();
      if (it->second.size() > 1) it->second.pop_front();
    }
    loop_.post([op, addrs] {
      op->addresses = addrs;
      op->failed = addrs.empty();
      op->on_complete();
    });
  }
  bool cancel(ResolveOp* op) override {
    auto it = std::find(held_.begin(), held_.end(), op);
    if (it == held_.end()) return false;
    held_.erase(it);
    return true;
  }
  int calls(const std::string& host) { return calls_[host]; }
  bool hold_ = false;
  std::vector<ResolveOp*> held_;

 private:
  Loop& loop_;
  std::map<std::string, std::deque<std::vector<IpAddress>>> answers_;
  std::map<std::string, int> calls_;
};

HttpTransportOptions test_options() {
  HttpTransportOptions o;
  o.exchange_timeout = seconds(3);
  o.connect_timeout = seconds(1);
  o.tls_handshake_timeout = seconds(1);
  o.url_policy.allow_http = true;
  o.allow_list = {*parse_cidr("127.0.0.0/8"), *parse_cidr("::1/128")};
  return o;
}

class Client {
 public:
  explicit Client(HttpTransportOptions o = test_options(), bool fake_dns = true) {
    loop = std::move(Loop::create({})).value();
    if (fake_dns) dns = std::make_unique<FakeResolver>(*loop);
    auto t = HttpTransport::create(*loop, o, dns.get());
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    transport = std::move(t).value();
  }
  ~Client() {
    transport.reset();
    dns.reset();
  }
  // Runs the loop until every op is done or `budget` of wall time passed.
  bool run(std::initializer_list<Op*> ops, std::chrono::milliseconds budget = seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + budget;
    auto all = [&] {
      for (Op* op : ops) {
        if (!op->done) return false;
      }
      return true;
    };
    while (!all() && std::chrono::steady_clock::now() < end) loop->run_once(milliseconds(5));
    return all();
  }
  void spin(std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) loop->run_once(milliseconds(5));
  }
  void prepare(Op& op, const std::string& url, std::string body = R"({"hello":"world"})") {
    op.done = false;
    op.request.url = url;
    op.request.message_id = "msg_" + std::to_string(++ids_);
    op.request.delivery_id = static_cast<DeliveryId>(ids_);
    op.request.secrets = {"secret-one"};
    op.body = std::move(body);
    op.request.body = op.body;
  }
  TransportResult send_one(const std::string& url, std::chrono::milliseconds budget = seconds(10)) {
    Op op;
    prepare(op, url);
    transport->send(&op);
    EXPECT_FALSE(op.done) << "completed inside send()";
    EXPECT_TRUE(run({&op}, budget)) << "did not complete in time";
    EXPECT_EQ(op.completions, 1);
    return op.result;
  }

  std::unique_ptr<Loop> loop;
  std::unique_ptr<FakeResolver> dns;
  std::unique_ptr<HttpTransport> transport;

 private:
  int ids_ = 0;
};

TestHttpServer::Handler ok_handler() {
  return [](const HttpRequest&) { return respond(200, "ok"); };
}

// --- plain HTTP ---------------------------------------------------------------------------------

TEST(HttpTransportTest, SuccessWritesTheRequestExactlyAndReusesTheConnection) {
  TestHttpServer server(ok_handler());
  Client c;
  for (int i = 0; i < 10; ++i) {
    TransportResult r = c.send_one(server.url("/hook?x=1"));
    EXPECT_TRUE(r.response_received);
    EXPECT_TRUE(r.request_written);
    EXPECT_TRUE(r.connect_attempted);
    EXPECT_EQ(r.http_status, 200);
    EXPECT_TRUE(r.code.is_none()) << r.code.str();
    EXPECT_EQ(r.body_prefix, "ok");
    EXPECT_EQ(r.reused_connection, i > 0);
    EXPECT_GT(r.timings.total.count(), 0);
  }
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(c.transport->stats().requests_on_reused_connections, 9u);
  auto reqs = server.received();
  ASSERT_EQ(reqs.size(), 10u);
  const HttpRequest& rq = reqs[3];
  EXPECT_EQ(rq.method, "POST");
  EXPECT_EQ(rq.target, "/hook?x=1");
  EXPECT_EQ(rq.version, "HTTP/1.1");
  EXPECT_EQ(rq.headers.at("host"), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(rq.headers.at("content-type"), "application/json");
  EXPECT_EQ(rq.headers.at("content-length"), "17");
  EXPECT_EQ(rq.headers.at("user-agent"), std::string("ringcast/") + RINGCAST_VERSION);
  EXPECT_EQ(rq.body, R"({"hello":"world"})");
  EXPECT_EQ(rq.headers.count("expect"), 0u);
  EXPECT_EQ(rq.headers.count("accept-encoding"), 0u);
  EXPECT_EQ(rq.headers.at("webhook-id"), "msg_4");
  EXPECT_TRUE(verify_standard(rq.headers.at("webhook-signature"), {"secret-one"}, "msg_4",
                              rq.headers.at("webhook-timestamp"), rq.body));
  const int64_t ts = std::stoll(rq.headers.at("webhook-timestamp"));
  EXPECT_NEAR(static_cast<double>(ts), static_cast<double>(::time(nullptr)), 5.0);
}

TEST(HttpTransportTest, SignatureProfilesOnTheWire) {
  TestHttpServer server(ok_handler());
  Client c;
  Op x, s;
  c.prepare(x, server.url());
  x.request.profile = SignatureProfile::kXhub;
  x.request.secrets = {"k-new", "k-old"};
  c.prepare(s, server.url());
  s.request.profile = SignatureProfile::kSmengo;
  s.request.attempt = 4;
  c.transport->send(&x);
  ASSERT_TRUE(c.run({&x}));
  c.transport->send(&s);
  ASSERT_TRUE(c.run({&s}));
  auto reqs = server.received();
  ASSERT_EQ(reqs.size(), 2u);
  const auto& xh = reqs[0].headers;
  EXPECT_EQ(xh.at("x-webhook-id"), x.request.message_id);
  EXPECT_TRUE(verify_xhub(xh.at("x-webhook-signature"), {"k-old"}, xh.at("x-webhook-timestamp"),
                          reqs[0].body));
  EXPECT_EQ(xh.count("webhook-id"), 0u);
  const auto& sh = reqs[1].headers;
  EXPECT_EQ(sh.at("smengo-delivery-id"), s.request.message_id + ":4");
  EXPECT_TRUE(verify_standard(sh.at("webhook-signature"), {"secret-one"}, s.request.message_id,
                              sh.at("webhook-timestamp"), reqs[1].body));
}

TEST(HttpTransportTest, StatusCodesRetryAfterBodyPrefixAndNoRedirects) {
  TestHttpServer server([](const HttpRequest& rq) {
    if (rq.target == "/503") return respond(503, "busy", "Retry-After: 120\r\n");
    if (rq.target == "/410") return respond(410, "gone");
    if (rq.target == "/302") return respond(302, "", "Location: http://127.0.0.1:1/elsewhere\r\n");
    if (rq.target == "/big") return respond(500, std::string(2000, 'b'));
    if (rq.target == "/date") {
      return respond(503, "", "Retry-After: Wed, 21 Oct 2099 07:28:00 GMT\r\n");
    }
    if (rq.target == "/100") {
      HttpAction a = respond(201, "made");
      a.response = "HTTP/1.1 100 Continue\r\n\r\n" + a.response;
      return a;
    }
    if (rq.target == "/chunked") {
      HttpAction a;
      a.response =
          "HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n "
          "world\r\n0\r\n\r\n";
      return a;
    }
    return respond(200);
  });
  Client c;
  auto r = c.send_one(server.url("/503"));
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.retry_after, "120");
  EXPECT_EQ(r.body_prefix, "busy");
  r = c.send_one(server.url("/date"));
  EXPECT_EQ(r.retry_after, "Wed, 21 Oct 2099 07:28:00 GMT");
  r = c.send_one(server.url("/410"));
  EXPECT_EQ(r.http_status, 410);
  r = c.send_one(server.url("/302"));
  EXPECT_EQ(r.http_status, 302);
  EXPECT_TRUE(r.response_received);
  r = c.send_one(server.url("/big"));
  EXPECT_EQ(r.http_status, 500);
  EXPECT_EQ(r.body_prefix, std::string(512, 'b'));
  r = c.send_one(server.url("/100"));
  EXPECT_EQ(r.http_status, 201);
  EXPECT_EQ(r.body_prefix, "made");
  r = c.send_one(server.url("/chunked"));
  EXPECT_EQ(r.http_status, 400);
  EXPECT_EQ(r.body_prefix, "hello world");
  // The redirect was not followed: the server saw exactly the 7 requests above.
  EXPECT_EQ(server.requests(), 7);
  EXPECT_EQ(server.connections(), 1);  // all on one keep-alive connection
}

TEST(HttpTransportTest, A429DoesNotHoldTheRestOfTheHost) {
  // SPEC R12.6: Retry-After postpones that endpoint's deliveries in the scheduler (R7); the
  // transport must not pause every path (every tenant) on the same host for it.
  TestHttpServer server([](const HttpRequest& rq) {
    if (rq.target == "/429") return respond(429, "slow down", "Retry-After: 3600\r\n");
    return respond(200);
  });
  Client c;
  auto r = c.send_one(server.url("/429"));
  EXPECT_EQ(r.http_status, 429);
  EXPECT_EQ(r.retry_after, "3600");  // passed up for the scheduler
  for (int i = 0; i < 3; ++i) {
    r = c.send_one(server.url("/other-tenant"), seconds(2));
    EXPECT_EQ(r.http_status, 200);
    EXPECT_EQ(r.deferred, DeferReason::kNone);
  }
  EXPECT_EQ(server.requests(), 4);
}

TEST(HttpTransportTest, PacingBeyondTheQueueWaitDefersUnsentWithStaggeredTimes) {
  TestHttpServer server(ok_handler());
  auto o = test_options();
  o.max_queue_wait = milliseconds(200);
  std::vector<Op> ops(4);
  Client c(o);
  c.transport->set_rate_limit("127.0.0.1", RateLimit{2, 1});  // one now, then one per 500 ms
  const WallTime sent_at = c.loop->wall_now();
  for (auto& op : ops) {
    c.prepare(op, server.url());
    c.transport->send(&op);
    EXPECT_FALSE(op.done);  // never inline (STYLE 5)
  }
  ASSERT_TRUE(c.run({&ops[0], &ops[1], &ops[2], &ops[3]}, seconds(3)));
  EXPECT_EQ(ops[0].result.http_status, 200);
  EXPECT_EQ(ops[0].result.deferred, DeferReason::kNone);
  WallTime prev = sent_at;
  for (size_t i = 1; i < ops.size(); ++i) {
    const TransportResult& r = ops[i].result;
    EXPECT_EQ(r.deferred, DeferReason::kPacing) << i;
    EXPECT_FALSE(r.connect_attempted) << i;
    EXPECT_FALSE(r.request_written) << i;
    EXPECT_TRUE(r.code.is_none()) << r.code.str();  // not a failure of any kind
    EXPECT_EQ(ops[i].completions, 1);
    // Each is told when its own token comes: 500 ms apart, in queue order.
    EXPECT_GE(r.not_before - prev, milliseconds(400)) << i;
    EXPECT_LE(r.not_before - sent_at, milliseconds(500) * static_cast<int64_t>(i) + seconds(1));
    prev = r.not_before;
  }
  EXPECT_EQ(server.requests(), 1);
  EXPECT_EQ(c.transport->stats().deferred[static_cast<int>(DeferReason::kPacing)], 3u);
  EXPECT_EQ(c.transport->stats().timeouts, 0u);
}

// The bulkhead (max_queued_per_host) turns a request away when its host's queue is full; it
// comes back when the queue should have room — one measured drain gap apart, in order — not
// after the whole max_queue_wait: 256 endpoints sharing one fast receiver sat idle for seconds
// with every other request deferred 5 s.
TEST(HttpTransportTest, AFullHostQueueSendsRequestsBackWhenItShouldHaveRoomStaggered) {
  TestHttpServer server([](const HttpRequest&) {
    std::this_thread::sleep_for(milliseconds(20));
    return respond(200);
  });
  auto o = test_options();
  o.max_connections_per_host = 1;
  o.max_queued_per_host = 4;
  o.max_queue_wait = seconds(5);
  Client c(o);
  // A backlog first, so the drain is measured: 1 on the connection, 4 waiting.
  std::vector<Op> first(5);
  for (auto& op : first) {
    c.prepare(op, server.url());
    c.transport->send(&op);
  }
  c.spin(milliseconds(70));  // a few of them start, ~20 ms apart
  std::vector<Op> more(12);
  for (auto& op : more) {
    c.prepare(op, server.url());
    c.transport->send(&op);
  }
  const WallTime sent_at = c.loop->wall_now();
  std::initializer_list<Op*> all = {&first[0], &first[1], &first[2], &first[3], &first[4], &more[0],
                                    &more[1],  &more[2],  &more[3],  &more[4],  &more[5],  &more[6],
                                    &more[7],  &more[8],  &more[9],  &more[10], &more[11]};
  ASSERT_TRUE(c.run(all, seconds(5)));
  for (auto& op : first) EXPECT_EQ(op.result.http_status, 200);
  WallTime prev = sent_at;
  int turned_away = 0;
  for (size_t i = 0; i < more.size(); ++i) {
    const TransportResult& r = more[i].result;
    if (r.deferred == DeferReason::kNone) {
      EXPECT_EQ(r.http_status, 200) << i;
      continue;
    }
    ++turned_away;
    EXPECT_EQ(r.deferred, DeferReason::kQueueFull) << i;
    EXPECT_FALSE(r.request_written) << i;
    // Back when there should be room: a drain gap or so per request ahead, far below the 5 s
    // queue wait it used to be; and in order, each after the one before.
    EXPECT_GT(r.not_before, prev) << i;
    EXPECT_LT(r.not_before - sent_at, seconds(2)) << i;
    prev = r.not_before;
  }
  EXPECT_GE(turned_away, 6);
  EXPECT_EQ(c.transport->stats().deferred[static_cast<int>(DeferReason::kQueueFull)],
            static_cast<uint64_t>(turned_away));
}

TEST(HttpTransportTest, QueueWaitIsNotChargedToTheReceiversDeadline) {
  // One connection, a receiver that takes 600 ms: the second request waits ~600 ms for the
  // connection, then gets its own 1 s. Charged from send(), it would time out (UNKNOWN).
  TestHttpServer server([](const HttpRequest&) {
    std::this_thread::sleep_for(milliseconds(600));
    return respond(200);
  });
  auto o = test_options();
  o.max_connections_per_host = 1;
  o.exchange_timeout = seconds(1);
  std::vector<Op> ops(2);
  Client c(o);
  for (auto& op : ops) {
    c.prepare(op, server.url());
    c.transport->send(&op);
  }
  ASSERT_TRUE(c.run({&ops[0], &ops[1]}, seconds(5)));
  for (auto& op : ops) {
    EXPECT_EQ(op.result.http_status, 200) << op.result.code.str();
    EXPECT_EQ(op.result.deferred, DeferReason::kNone);
  }
  EXPECT_EQ(c.transport->stats().timeouts, 0u);
}

TEST(HttpTransportTest, TokenBucketPacesAHost) {
  TestHttpServer server(ok_handler());
  std::vector<Op> ops(5);
  Client c;
  c.transport->set_rate_limit("127.0.0.1", RateLimit{20, 1});
  const auto start = std::chrono::steady_clock::now();
  for (auto& op : ops) {
    c.prepare(op, server.url());
    c.transport->send(&op);
  }
  ASSERT_TRUE(c.run({&ops[0], &ops[1], &ops[2], &ops[3], &ops[4]}));
  for (auto& op : ops) EXPECT_EQ(op.result.http_status, 200);
  // 1 token at once, then 20/s: the fifth request goes out no earlier than 200 ms.
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(190));
}

TEST(HttpTransportTest, ParallelSendsStayWithinTheHostConnectionLimit) {
  TestHttpServer server([](const HttpRequest&) {
    std::this_thread::sleep_for(milliseconds(20));
    return respond(200);
  });
  auto o = test_options();
  o.max_connections_per_host = 4;
  std::vector<Op> ops(24);
  Client c(o);
  for (auto& op : ops) {
    c.prepare(op, server.url());
    c.transport->send(&op);
  }
  const auto end = std::chrono::steady_clock::now() + seconds(10);
  auto all_done = [&] {
    for (auto& op : ops) {
      if (!op.done) return false;
    }
    return true;
  };
  uint32_t max_conns = 0;
  while (!all_done() && std::chrono::steady_clock::now() < end) {
    c.loop->run_once(milliseconds(5));
    max_conns = std::max(max_conns, c.transport->connections());
  }
  ASSERT_TRUE(all_done());
  for (auto& op : ops) EXPECT_EQ(op.result.http_status, 200);
  EXPECT_LE(max_conns, 4u);
  EXPECT_EQ(server.connections(), 4);
  EXPECT_GE(c.transport->stats().queued_max, 20u);
}

TEST(HttpTransportTest, BulkheadASlowHostDoesNotHoldAFastOne) {
  TestHttpServer slow([](const HttpRequest&) {
    HttpAction a;
    a.kind = HttpAction::kHang;
    return a;
  });
  TestHttpServer fast(ok_handler());
  auto o = test_options();
  o.max_connections_per_host = 2;
  o.exchange_timeout = seconds(2);
  o.max_queue_wait = milliseconds(500);
  std::vector<Op> stuck(6);  // ops outlive the client that holds them
  Op quick;
  Client c(o);
  for (auto& op : stuck) {
    c.prepare(op, slow.url());
    c.transport->send(&op);
  }
  c.prepare(quick, fast.url());
  c.transport->send(&quick);
  ASSERT_TRUE(c.run({&quick}, seconds(1)));
  EXPECT_EQ(quick.result.http_status, 200);
  EXPECT_FALSE(stuck[0].done);
  EXPECT_LE(slow.connections(), 2);
  ASSERT_TRUE(
      c.run({&stuck[0], &stuck[1], &stuck[2], &stuck[3], &stuck[4], &stuck[5]}, seconds(5)));
  // The two that got a connection wrote their request and timed out (UNKNOWN for the core).
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(stuck[i].result.code.kind, K::kTimeout);
    EXPECT_TRUE(stuck[i].result.request_written);
    EXPECT_FALSE(stuck[i].result.response_received);
  }
  // The queued ones never touched the network: given back deferred after the queue wait, with
  // a time to try again, not failed (SPEC R2.3).
  for (int i = 2; i < 6; ++i) {
    EXPECT_EQ(stuck[i].result.deferred, DeferReason::kConnections) << i;
    EXPECT_FALSE(stuck[i].result.connect_attempted) << i;
    EXPECT_TRUE(stuck[i].result.code.is_none()) << stuck[i].result.code.str();
    EXPECT_GE(stuck[i].result.not_before, c.loop->wall_now() - seconds(5));
  }
  EXPECT_EQ(c.transport->stats().deferred[static_cast<int>(DeferReason::kConnections)], 4u);
}

// --- hostile receivers --------------------------------------------------------------------------

TEST(HttpTransportTest, NeverAnsweringReceiverTimesOutAtTheDeadline) {
  TestHttpServer server([](const HttpRequest&) {
    HttpAction a;
    a.kind = HttpAction::kHang;
    return a;
  });
  auto o = test_options();
  o.exchange_timeout = milliseconds(300);
  Client c(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = c.send_one(server.url(), seconds(3));
  EXPECT_EQ(r.code.kind, K::kTimeout);
  EXPECT_TRUE(r.request_written);
  EXPECT_FALSE(r.response_received);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(290));
  EXPECT_GE(r.timings.total, milliseconds(290));
}

TEST(HttpTransportTest, TricklingReceiverHitsTheOverallDeadline) {
  TestHttpServer server([](const HttpRequest&) {
    HttpAction a = respond(200, "slowly");
    a.kind = HttpAction::kTrickle;
    a.interval = milliseconds(40);
    return a;
  });
  auto o = test_options();
  o.exchange_timeout = milliseconds(400);
  Client c(o);
  auto r = c.send_one(server.url(), seconds(3));
  EXPECT_EQ(r.code.kind, K::kTimeout);
  EXPECT_FALSE(r.response_received);
  EXPECT_TRUE(r.request_written);
}

TEST(HttpTransportTest, OversizedHeadersAreCapped) {
  TestHttpServer server([](const HttpRequest& rq) {
    std::string headers;
    if (rq.target == "/bytes") {
      for (int i = 0; i < 70; ++i)
        headers += "X-Pad-" + std::to_string(i) + ": " + std::string(1024, 'p') + "\r\n";
    } else {
      for (int i = 0; i < 150; ++i) headers += "X-N" + std::to_string(i) + ": v\r\n";
    }
    return respond(200, "ok", headers);
  });
  Client c;
  auto r = c.send_one(server.url("/bytes"));
  EXPECT_FALSE(r.response_received);
  EXPECT_EQ(r.code, ErrorCode::network(EMSGSIZE)) << r.code.str();
  r = c.send_one(server.url("/count"));
  EXPECT_EQ(r.code, ErrorCode::network(EMSGSIZE)) << r.code.str();
  EXPECT_EQ(c.transport->connections(), 0u);  // closed, never reused
}

TEST(HttpTransportTest, EndlessChunkedBodyStopsAtTheDrainCap) {
  TestHttpServer server([](const HttpRequest&) {
    HttpAction a;
    a.kind = HttpAction::kEndless;
    a.response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    return a;
  });
  auto o = test_options();
  o.response.body_drain_max = 256 * 1024;
  Client c(o);
  auto r = c.send_one(server.url(), seconds(5));
  EXPECT_TRUE(r.response_received);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body_prefix.size(), 512u);
  EXPECT_EQ(c.transport->connections(), 0u);  // not reused
}

TEST(HttpTransportTest, GarbageResponseIsEproto) {
  TestHttpServer server([](const HttpRequest&) {
    HttpAction a;
    a.response = "SSH-2.0-OpenSSH_9.2\r\n";
    return a;
  });
  Client c;
  auto r = c.send_one(server.url());
  EXPECT_EQ(r.code, ErrorCode::network(EPROTO)) << r.code.str();
  EXPECT_TRUE(r.request_written);
}

TEST(HttpTransportTest, ResetAndCloseAfterReadingAreUnknownNotNeverReceived) {
  TestHttpServer server([](const HttpRequest& rq) {
    HttpAction a;
    a.kind = rq.target == "/reset" ? HttpAction::kReset : HttpAction::kClose;
    return a;
  });
  Client c;
  auto r = c.send_one(server.url("/reset"));
  EXPECT_EQ(r.code, ErrorCode::network(ECONNRESET)) << r.code.str();
  EXPECT_TRUE(r.request_written);
  EXPECT_FALSE(r.response_received);
  r = c.send_one(server.url("/close"));
  EXPECT_EQ(r.code, ErrorCode::network(ECONNRESET)) << r.code.str();
  EXPECT_TRUE(r.request_written);
}

TEST(HttpTransportTest, ConnectionRefused) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  Client c;
  auto r = c.send_one("http://127.0.0.1:" + std::to_string(port) + "/");
  EXPECT_EQ(r.code.str(), "network_ECONNREFUSED");
  EXPECT_TRUE(r.connect_attempted);
  EXPECT_FALSE(r.request_written);
}

TEST(HttpTransportTest, PeerClosedIdleConnectionIsDetectedAndNotUsed) {
  TestHttpServer server([](const HttpRequest& rq) {
    HttpAction a = respond(200);
    // Looks keep-alive to the client, but the server closes right after answering.
    a.close_after = rq.target == "/then-close";
    return a;
  });
  Client c;
  auto r = c.send_one(server.url("/then-close"));
  EXPECT_EQ(r.http_status, 200);
  c.spin(milliseconds(100));
  EXPECT_EQ(c.transport->idle_connections(), 0u);
  EXPECT_EQ(c.transport->stats().idle_closed_by_peer, 1u);
  r = c.send_one(server.url("/again"));
  EXPECT_EQ(r.http_status, 200);
  EXPECT_FALSE(r.reused_connection);
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpTransportTest, OneShotReceivesWithoutTheBufferRing) {
  TestHttpServer server([](const HttpRequest& rq) {
    if (rq.target == "/big") return respond(200, std::string(100000, 'z'));
    return respond(200);
  });
  auto o = test_options();
  o.multishot_recv = false;
  o.recv_buffer_bytes = 1024;
  Client c(o);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.send_one(server.url()).http_status, 200);
  auto r = c.send_one(server.url("/big"));
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body_prefix, std::string(512, 'z'));
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpTransportTest, SmallSharedBuffersCarryALargeBody) {
  TestHttpServer server([](const HttpRequest&) { return respond(200, std::string(300000, 'q')); });
  auto o = test_options();
  o.recv_buffers = 4;  // fewer buffers than the body needs: ENOBUFS re-arms must cope
  o.recv_buffer_bytes = 2048;
  Client c(o);
  for (int i = 0; i < 3; ++i) {
    auto r = c.send_one(server.url());
    EXPECT_EQ(r.http_status, 200) << r.code.str();
    EXPECT_EQ(r.body_prefix.size(), 512u);
  }
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpTransportTest, HostEntriesAreBounded) {
  TestHttpServer a(ok_handler()), b(ok_handler()), c3(ok_handler());
  auto o = test_options();
  o.max_hosts = 2;
  Client c(o);
  for (int round = 0; round < 3; ++round) {
    for (TestHttpServer* s : {&a, &b, &c3}) {
      EXPECT_EQ(c.send_one(s->url()).http_status, 200);
      c.transport->close_idle();  // an idle host entry can then be swept
    }
  }
  // Keep-alive still works for a host whose entry survives.
  EXPECT_EQ(c.send_one(a.url()).http_status, 200);
  EXPECT_TRUE(c.send_one(a.url()).reused_connection);
}

TEST(HttpTransportTest, IdleConnectionsExpire) {
  TestHttpServer server(ok_handler());
  auto o = test_options();
  o.idle_timeout = milliseconds(50);
  Client c(o);
  EXPECT_EQ(c.send_one(server.url()).http_status, 200);
  EXPECT_EQ(c.transport->idle_connections(), 1u);
  c.spin(milliseconds(150));
  EXPECT_EQ(c.transport->idle_connections(), 0u);
  EXPECT_EQ(c.transport->stats().idle_expired, 1u);
}

// --- refusals before sending ---------------------------------------------------------------------

TEST(HttpTransportTest, UrlRefusalsSendNothingAndCompleteLater) {
  TestHttpServer server(ok_handler());
  auto o = test_options();
  o.url_policy.allow_http = false;
  Client c(o);
  auto r = c.send_one(server.url());
  EXPECT_EQ(r.code.kind, K::kNotHttps);
  EXPECT_FALSE(r.connect_attempted);
  r = c.send_one("https://user:pw@127.0.0.1:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kUserinfoNotAllowed);
  r = c.send_one("https://127.0.0.1:22/");
  EXPECT_EQ(r.code.kind, K::kPortNotAllowed);
  r = c.send_one("not a url");
  EXPECT_NE(r.code.kind, K::kNone);
  EXPECT_EQ(server.connections(), 0);
}

TEST(HttpTransportTest, NameResolvingToLoopbackIsRefusedWithoutAllowList) {
  TestHttpServer server(ok_handler());
  auto o = test_options();
  o.allow_list.clear();
  Client c(o);
  c.dns->answer("hooks.example", {IpAddress::v4(127, 0, 0, 1)});
  const std::string url = "http://hooks.example:" + std::to_string(server.port()) + "/";
  auto r = c.send_one(url);
  EXPECT_EQ(r.code.str(), "private_address");
  EXPECT_FALSE(r.connect_attempted);
  // A literal too, and a v4-mapped IPv6 form of it.
  r = c.send_one("http://127.0.0.1:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kPrivateAddress);
  r = c.send_one("http://[::ffff:127.0.0.1]:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kPrivateAddress);
  c.spin(milliseconds(50));
  EXPECT_EQ(server.connections(), 0);

  // With 127.0.0.0/8 on the allow-list the same name is delivered.
  Client allowed;
  allowed.dns->answer("hooks.example", {IpAddress::v4(127, 0, 0, 1)});
  r = allowed.send_one(url);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(server.received().at(0).headers.at("host"),
            "hooks.example:" + std::to_string(server.port()));
}

TEST(HttpTransportTest, MixedAnswerIsRefusedAsAWhole) {
  TestHttpServer server(ok_handler());
  auto o = test_options();
  o.allow_list = {*parse_cidr("127.0.0.1/32")};
  Client c(o);
  c.dns->answer("mixed.example", {IpAddress::v4(127, 0, 0, 1), IpAddress::v4(10, 0, 0, 1)});
  auto r = c.send_one("http://mixed.example:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kPrivateAddress);
  EXPECT_EQ(server.connections(), 0);
}

TEST(HttpTransportTest, RebindingResolverNeverGetsAConnectionToTheDeniedAddress) {
  TestHttpServer allowed_server(ok_handler());
  ServerOptions so;
  so.bind = "127.0.0.2";
  std::unique_ptr<TestHttpServer> denied_server;
  // Same port on 127.0.0.2 (a different address, so no conflict); skip if the port is taken.
  try {
    denied_server = std::make_unique<TestHttpServer>(ok_handler(), so);
  } catch (const std::exception&) {
    GTEST_SKIP() << "cannot bind 127.0.0.2";
  }
  // The rebinding server must listen on the same port as the allowed one for the attack to
  // make sense; bind a third one explicitly on that port.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  a.sin_port = htons(allowed_server.port());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);

  auto o = test_options();
  o.allow_list = {*parse_cidr("127.0.0.1/32")};
  Client c(o);
  c.dns->answer("rebind.example", {IpAddress::v4(127, 0, 0, 1)});
  c.dns->answer("rebind.example", {IpAddress::v4(127, 0, 0, 2)});
  const std::string url = "http://rebind.example:" + std::to_string(allowed_server.port()) + "/";
  auto r1 = c.send_one(url);
  EXPECT_EQ(r1.http_status, 200);
  auto r2 = c.send_one(url);
  EXPECT_EQ(r2.code.kind, K::kPrivateAddress);
  auto r3 = c.send_one(url);
  EXPECT_EQ(r3.code.kind, K::kPrivateAddress);
  EXPECT_EQ(c.dns->calls("rebind.example"), 3);  // one lookup per attempt, never two
  c.spin(milliseconds(50));
  // Nothing ever connected to 127.0.0.2 on that port.
  sockaddr_in peer{};
  socklen_t plen = sizeof(peer);
  EXPECT_LT(::accept(fd, reinterpret_cast<sockaddr*>(&peer), &plen), 0);
  EXPECT_EQ(errno, EAGAIN);
  ::close(fd);
  EXPECT_EQ(denied_server->connections(), 0);
  EXPECT_EQ(allowed_server.connections(), 1);
}

TEST(HttpTransportTest, DnsFailureAndDnsStallAreBounded) {
  auto o = test_options();
  o.exchange_timeout = milliseconds(300);
  Client c(o);
  auto r = c.send_one("http://nowhere.example:8080/");
  EXPECT_EQ(r.code.kind, K::kDnsFailed);
  EXPECT_FALSE(r.connect_attempted);
  c.dns->hold_ = true;  // the resolver never answers: the exchange deadline still holds
  r = c.send_one("http://stuck.example:8080/", seconds(3));
  EXPECT_EQ(r.code.kind, K::kTimeout);
  EXPECT_FALSE(r.connect_attempted);
}

TEST(HttpTransportTest, Ipv6Loopback) {
  ServerOptions so;
  so.bind = "::1";
  std::unique_ptr<TestHttpServer> server;
  try {
    server = std::make_unique<TestHttpServer>(ok_handler(), so);
  } catch (const std::exception&) {
    GTEST_SKIP() << "no IPv6 loopback here";
  }
  Client c;
  auto r = c.send_one(server->url());
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(server->received().at(0).headers.at("host"), "[::1]:" + std::to_string(server->port()));
  // A name with an AAAA answer works the same way.
  c.dns->answer("v6.example", {*parse_ip("::1")});
  r = c.send_one("http://v6.example:" + std::to_string(server->port()) + "/");
  EXPECT_EQ(r.http_status, 200);
}

TEST(HttpTransportTest, FallsBackToTheNextAddressOfTheSameAnswer) {
  TestHttpServer server(ok_handler());
  Client c;
  // ::1 first (nothing listens there on this port, or no IPv6), then 127.0.0.1.
  c.dns->answer("dual.example", {*parse_ip("::1"), IpAddress::v4(127, 0, 0, 1)});
  auto r = c.send_one("http://dual.example:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.http_status, 200);
}

TEST(HttpTransportTest, DestroyingTheTransportCancelsWhatIsInFlight) {
  TestHttpServer server([](const HttpRequest&) {
    HttpAction a;
    a.kind = HttpAction::kHang;
    return a;
  });
  Client c;
  Op op;
  c.prepare(op, server.url());
  c.transport->send(&op);
  c.spin(milliseconds(50));
  EXPECT_FALSE(op.done);
  c.transport.reset();
  EXPECT_TRUE(op.done);
  EXPECT_EQ(op.result.code, ErrorCode::network(ECANCELED));
}

// --- TLS
// --------------------------------------------------------------------------------------------

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_file = dir.file("ca.pem");
    test::write_file(ca_file, ca.ca_pem);
  }
  HttpTransportOptions tls_options() {
    auto o = test_options();
    o.url_policy.allow_http = false;
    o.tls.ca_file = "";  // only the test CA is trusted
    o.tls.extra_ca_file = ca_file;
    return o;
  }
  ServerOptions server_with(const test::LeafCert& leaf) {
    ServerOptions so;
    so.tls_cert_pem = leaf.cert_pem;
    so.tls_key_pem = leaf.key_pem;
    return so;
  }
  test::TempDir dir;
  test::TestCa ca = test::TestCa::create();
  std::string ca_file;
};

TEST_F(TlsTest, SuccessKeepAliveAndSessionResumption) {
  TestHttpServer server(ok_handler(), server_with(ca.issue({"localhost"}, {"127.0.0.1"})));
  Client c(tls_options());
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  const std::string url = "https://localhost:" + std::to_string(server.port()) + "/tls";
  for (int i = 0; i < 5; ++i) {
    auto r = c.send_one(url);
    EXPECT_EQ(r.http_status, 200) << r.code.str();
    EXPECT_EQ(r.reused_connection, i > 0);
    if (i == 0) {
      EXPECT_GT(r.timings.tls.count(), 0);
    }
  }
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(c.transport->tls_stats().full_handshakes, 1u);
  // A new connection to the same host resumes the session.
  c.transport->close_idle();
  auto r = c.send_one(url);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_FALSE(r.reused_connection);
  EXPECT_EQ(c.transport->tls_stats().full_handshakes, 1u);
  EXPECT_EQ(c.transport->tls_stats().resumed_handshakes, 1u);
  auto reqs = server.received();
  EXPECT_EQ(reqs.back().headers.at("host"), "localhost:" + std::to_string(server.port()));
  // An IP literal URL verifies the IP SAN.
  r = c.send_one("https://127.0.0.1:" + std::to_string(server.port()) + "/ip");
  EXPECT_EQ(r.http_status, 200) << r.code.str();
}

TEST_F(TlsTest, ParallelConnectionsResumeTheFirstSession) {
  TestHttpServer server(
      [](const HttpRequest&) {
        std::this_thread::sleep_for(milliseconds(20));
        return respond(200);
      },
      server_with(ca.issue({"localhost"})));
  auto o = tls_options();
  o.max_connections_per_host = 8;
  std::vector<Op> ops(16);
  Client c(o);
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  for (auto& op : ops) {
    c.prepare(op, "https://localhost:" + std::to_string(server.port()) + "/");
    c.transport->send(&op);
  }
  for (auto& op : ops) ASSERT_TRUE(c.run({&op}));
  for (auto& op : ops) EXPECT_EQ(op.result.http_status, 200) << op.result.code.str();
  // One full handshake for the host; every other new connection resumed its session.
  EXPECT_EQ(c.transport->tls_stats().full_handshakes, 1u);
  EXPECT_GE(c.transport->tls_stats().resumed_handshakes, 1u);
  EXPECT_EQ(c.transport->tls_stats().resumed_handshakes + 1,
            static_cast<uint64_t>(server.connections()));
}

TEST_F(TlsTest, OneShotReceivesWithoutTheBufferRing) {
  TestHttpServer server(ok_handler(), server_with(ca.issue({"localhost"}, {"127.0.0.1"})));
  auto o = tls_options();
  o.multishot_recv = false;
  Client c(o);
  for (int i = 0; i < 3; ++i) {
    auto r = c.send_one("https://127.0.0.1:" + std::to_string(server.port()) + "/");
    EXPECT_EQ(r.http_status, 200) << r.code.str();
  }
  EXPECT_EQ(server.connections(), 1);
}

// A response followed by an unsolicited second one in the same flight must not become the
// answer to the next request on that connection (no pipelining, no reuse after extra bytes).
// (Bytes that arrive only after the connection was reused cannot be told from an answer; the
// pool never shares a connection between receivers, so a receiver can only fool itself.)
TEST_F(TlsTest, UnsolicitedBytesAfterAResponseAreNotCarriedOver) {
  TestHttpServer server(
      [](const HttpRequest& rq) {
        HttpAction a = respond(200, "real");
        if (rq.target == "/first") a.response += "HTTP/1.1 418 X\r\nContent-Length: 4\r\n\r\nfake";
        return a;
      },
      server_with(ca.issue({"localhost"}, {"127.0.0.1"})));
  Client c(tls_options());
  const std::string base = "https://127.0.0.1:" + std::to_string(server.port());
  auto r = c.send_one(base + "/first");
  EXPECT_EQ(r.http_status, 200);
  r = c.send_one(base + "/second");
  EXPECT_EQ(r.http_status, 200) << r.code.str();
  EXPECT_EQ(r.body_prefix, "real");
  EXPECT_FALSE(r.reused_connection);
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpTransportTest, UnsolicitedBytesAfterAResponseAreNotCarriedOver) {
  TestHttpServer server([](const HttpRequest& rq) {
    HttpAction a = respond(200, "real");
    if (rq.target == "/first") a.response += "HTTP/1.1 418 X\r\nContent-Length: 4\r\n\r\nfake";
    return a;
  });
  Client c;
  EXPECT_EQ(c.send_one(server.url("/first")).http_status, 200);
  auto r = c.send_one(server.url("/second"));
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.body_prefix, "real");
  EXPECT_FALSE(r.reused_connection);
}

TEST_F(TlsTest, WrongHostNameIsACertError) {
  TestHttpServer server(ok_handler(), server_with(ca.issue({"other.example"})));
  Client c(tls_options());
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  auto r = c.send_one("https://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.str(), "network_tls_cert");
  EXPECT_FALSE(r.request_written);
  EXPECT_EQ(server.requests(), 0);
}

TEST_F(TlsTest, UntrustedCaIsACertError) {
  test::TestCa other = test::TestCa::create("some other CA");
  TestHttpServer server(ok_handler(), server_with(other.issue({"localhost"})));
  Client c(tls_options());
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  auto r = c.send_one("https://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kTlsCert);
  EXPECT_EQ(server.requests(), 0);
}

TEST_F(TlsTest, ExpiredCertificateIsACertError) {
  test::Validity expired;
  expired.not_before = -seconds(7200);
  expired.not_after = -seconds(3600);
  TestHttpServer server(ok_handler(), server_with(ca.issue({"localhost"}, {}, expired)));
  Client c(tls_options());
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  auto r = c.send_one("https://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kTlsCert);
}

TEST_F(TlsTest, HandshakeStallHitsTheHandshakeDeadline) {
  ServerOptions so = server_with(ca.issue({"localhost"}));
  so.stall_handshake = true;
  TestHttpServer server(ok_handler(), so);
  auto o = tls_options();
  o.tls_handshake_timeout = milliseconds(200);
  Client c(o);
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  auto r = c.send_one("https://localhost:" + std::to_string(server.port()) + "/", seconds(3));
  EXPECT_EQ(r.code.str(), "network_tls_handshake");
  EXPECT_TRUE(r.connect_attempted);
  EXPECT_FALSE(r.request_written);
}

TEST_F(TlsTest, PlainServerBehindHttpsIsAHandshakeError) {
  TestHttpServer server(ok_handler());  // speaks plain HTTP, waits for a request head
  auto o = tls_options();
  o.tls_handshake_timeout = milliseconds(300);
  Client c(o);
  c.dns->answer("localhost", {IpAddress::v4(127, 0, 0, 1)});
  auto r = c.send_one("https://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(r.code.kind, K::kTlsHandshake) << r.code.str();
}

}  // namespace
}  // namespace ringcast::net
