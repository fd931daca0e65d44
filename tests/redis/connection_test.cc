// redis::Connection against real redis-server processes on loopback: replies, pipelining,
// bounds, deadlines on a stopped server, reconnect with AUTH/SELECT replayed after a restart,
// a connection cut mid-reply, and EVALSHA with the NOSCRIPT fallback.
#include "redis/connection.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "redis/script.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace ringcast::redis {
namespace {

using test::RedisServer;
using test::RedisServerOptions;
using test::TempDir;
using testing::call;
using testing::run_for;
using testing::run_until;
using testing::show;

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RedisServer::available())
        << "redis-server is not installed (bash tools/install-deps.sh)";
    loop_ = testing::make_loop();
  }
  void start_server(const RedisServerOptions& o = {}) {
    server_ = RedisServer::start(dir_.path(), o);
  }
  std::unique_ptr<Connection> connect(ConnectionOptions o = {}) {
    o.host = "127.0.0.1";
    if (o.port == 6379) o.port = server_->port();
    auto c = Connection::create(*loop_, o);
    EXPECT_TRUE(c.ok());
    return std::move(c).value();
  }

  TempDir dir_{"ringcast-redis"};
  std::unique_ptr<net::Loop> loop_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(ConnectionTest, CommandsGetTheirRepliesAndServerErrorsKeepTheMessage) {
  start_server();
  auto c = connect();
  auto set = call(*c, {"SET", "greeting", "hello"});
  ASSERT_TRUE(set.ok()) << show(set);
  EXPECT_EQ(*set, Reply::status("OK"));
  auto get = call(*c, {"GET", "greeting"});
  ASSERT_TRUE(get.ok()) << show(get);
  EXPECT_EQ(*get, Reply::string("hello"));
  auto missing = call(*c, {"GET", "nope"});
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->is_nil());
  auto bad = call(*c, {"INCR", "greeting"});
  ASSERT_TRUE(bad.ok()) << "a server error is a reply, not a transport error";
  EXPECT_TRUE(bad->is_error());
  EXPECT_EQ(bad->str(), "ERR value is not an integer or out of range");
  auto arr = call(*c, {"RPUSH", "list", "a", "b", "c"});
  ASSERT_TRUE(arr.ok());
  EXPECT_EQ(*arr, Reply::integer(3));
  auto range = call(*c, {"LRANGE", "list", "0", "-1"});
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(*range, Reply::array({Reply::string("a"), Reply::string("b"), Reply::string("c")}));
  EXPECT_EQ(c->stats().replies, 6u);
}

TEST_F(ConnectionTest, PipelinesAThousandCommandsInOneSendInOrder) {
  start_server();
  auto c = connect();
  ASSERT_TRUE(call(*c, {"PING"}).ok());
  const auto before = c->stats();
  constexpr int kN = 1000;
  std::vector<int64_t> got;
  for (int i = 0; i < kN; ++i) {
    c->command({"INCR", "counter"}, [&](Result<Reply> r) {
      got.push_back(r.ok() && r->is_integer() ? r->integer_value() : -1);
    });
  }
  EXPECT_TRUE(got.empty());
  ASSERT_TRUE(run_until(*loop_, [&] { return got.size() == kN; }));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], i + 1) << "at " << i;
  const auto after = c->stats();
  // One turn's commands leave in one batch (a partial send may add send calls, not batches).
  EXPECT_EQ(after.send_batches - before.send_batches, 1u);
  EXPECT_LE(after.send_calls - before.send_calls, 4u);
  EXPECT_EQ(after.replies - before.replies, static_cast<uint64_t>(kN));
  EXPECT_EQ(server_->cmd({"GET", "counter"}).str, std::to_string(kN));
}

// The process-wide totals (/metrics: ringcast_redis_commands_total, _round_trips_total) count
// every connection: two connections, one pipelined batch each.
TEST_F(ConnectionTest, ProcessTotalsCountCommandsAndPipelinedWritesOfEveryConnection) {
  start_server();
  auto a = connect();
  auto b = connect();
  ASSERT_TRUE(call(*a, {"PING"}).ok());
  ASSERT_TRUE(call(*b, {"PING"}).ok());
  const ProcessTotals before = process_totals();
  int done = 0;
  for (int i = 0; i < 10; ++i) a->command({"INCR", "ta"}, [&](Result<Reply>) { done++; });
  for (int i = 0; i < 5; ++i) b->command({"INCR", "tb"}, [&](Result<Reply>) { done++; });
  ASSERT_TRUE(run_until(*loop_, [&] { return done == 15; }));
  const ProcessTotals after = process_totals();
  EXPECT_EQ(after.commands_sent - before.commands_sent, 15u);
  EXPECT_EQ(after.send_batches - before.send_batches, 2u);
  // 10 x ":n\r\n" and 5 more, each at least 4 bytes; the commands at least 20 bytes each.
  EXPECT_GE(after.bytes_received - before.bytes_received, 60u);
  EXPECT_GE(after.bytes_sent - before.bytes_sent, 300u);
}

TEST_F(ConnectionTest, RefusesBeyondMaxPendingWithoutSending) {
  start_server();
  ConnectionOptions o;
  o.max_pending = 10;
  auto c = connect(o);
  int ok = 0, full = 0, completions = 0;
  for (int i = 0; i < 15; ++i) {
    c->command({"INCR", "bounded"}, [&](Result<Reply> r) {
      completions++;
      if (r.ok()) {
        ok++;
      } else if (r.error().reason == std::string(kQueueFull)) {
        EXPECT_FALSE(may_have_executed(r.error()));
        full++;
      }
    });
  }
  EXPECT_EQ(completions, 0) << "refusals complete on a later turn, not inside command()";
  ASSERT_TRUE(run_until(*loop_, [&] { return completions == 15; }));
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(full, 5);
  EXPECT_EQ(server_->cmd({"GET", "bounded"}).str, "10");
}

TEST_F(ConnectionTest, DeadlineOnAStoppedServerThenTheFifoStaysAligned) {
  start_server();
  auto c = connect();
  ASSERT_TRUE(call(*c, {"MSET", "k1", "v1", "k2", "v2"}).ok());
  server_->pause();
  CommandOptions quick;
  quick.timeout = milliseconds(200);
  auto timed_out = call(*c, {"GET", "k1"}, quick);
  ASSERT_FALSE(timed_out.ok()) << show(timed_out);
  EXPECT_STREQ(timed_out.error().reason, kTimeout);
  EXPECT_TRUE(may_have_executed(timed_out.error()));
  server_->resume();
  // The late reply to GET k1 is read and dropped; GET k2 must get its own reply.
  auto next = call(*c, {"GET", "k2"});
  ASSERT_TRUE(next.ok()) << show(next);
  EXPECT_EQ(*next, Reply::string("v2"));
  EXPECT_EQ(c->stats().late_replies, 1u);
  EXPECT_EQ(c->stats().timeouts, 1u);
}

TEST_F(ConnectionTest, UnsentCommandsTimeOutAsNotExecuted) {
  // Nothing listens on the port: the connection stays down, commands wait queued.
  const uint16_t port = test::free_tcp_port();
  ConnectionOptions o;
  o.port = port;
  auto conn = Connection::create(*loop_, o);
  ASSERT_TRUE(conn.ok());
  CommandOptions quick;
  quick.timeout = milliseconds(150);
  auto r = call(**conn, {"SET", "x", "1"}, quick);
  ASSERT_FALSE(r.ok());
  EXPECT_STREQ(r.error().reason, kTimeoutUnsent);
  EXPECT_FALSE(may_have_executed(r.error()));
  EXPECT_GE((*conn)->stats().reconnects, 1u) << "it kept trying to connect";
  EXPECT_NE((*conn)->state(), ConnState::kReady);
}

TEST_F(ConnectionTest, ReconnectsAfterARestartAndReplaysAuthAndSelect) {
  RedisServerOptions so;
  so.requirepass = "s3cret";
  start_server(so);
  ConnectionOptions o;
  o.password = "s3cret";
  o.db = 3;
  o.default_timeout = seconds(5);
  int ready_events = 0, down_events = 0;
  o.on_event = [&](const ConnectionEvent& e) {
    if (e.state == ConnState::kReady) ready_events++;
    if (e.state == ConnState::kBackoff) down_events++;
  };
  auto c = connect(o);
  ASSERT_TRUE(call(*c, {"SET", "before", "1"}).ok());
  server_->restart();
  // The first command after the restart may find the old socket dead (it was sent: the
  // caller is told, never a silent retry) — the one after that must work on a new connection.
  auto first = call(*c, {"SET", "after", "2"});
  if (!first.ok()) {
    EXPECT_STREQ(first.error().reason, kConnectionLost) << show(first);
    first = call(*c, {"SET", "after", "2"});
  }
  ASSERT_TRUE(first.ok()) << show(first);
  EXPECT_EQ(*first, Reply::status("OK"));
  EXPECT_GE(c->stats().reconnects, 1u);
  EXPECT_GE(c->stats().connects, 2u);
  EXPECT_GE(ready_events, 2);
  EXPECT_GE(down_events, 1);
  // The key went to db 3 (SELECT replayed), not db 0; AUTH worked or nothing would have.
  auto in3 = server_->cmds({{"SELECT", "3"}, {"GET", "after"}});
  EXPECT_EQ(in3[1].str, "2");
  auto in0 = server_->cmd({"GET", "after"});
  EXPECT_EQ(in0.type, test::SyncReply::Type::kNil);
}

TEST_F(ConnectionTest, CommandsQueuedWhileDownGoOutAfterReconnect) {
  start_server();
  auto c = connect();
  ASSERT_TRUE(call(*c, {"PING"}).ok());
  testing::expect_queued_while_down_goes_out(*c, *server_, [&] {
    return server_->cmd({"GET", "queued"}).str;
  });
}

TEST_F(ConnectionTest, WrongPasswordIsReportedAndNothingRuns) {
  RedisServerOptions so;
  so.requirepass = "right";
  start_server(so);
  ConnectionOptions o;
  o.password = "wrong";
  std::string detail;
  o.on_event = [&](const ConnectionEvent& e) {
    if (e.state == ConnState::kBackoff && !e.detail.empty()) detail = e.detail;
  };
  auto c = connect(o);
  CommandOptions quick;
  quick.timeout = milliseconds(300);
  auto r = call(*c, {"SET", "x", "1"}, quick);
  ASSERT_FALSE(r.ok()) << show(r);
  EXPECT_STREQ(r.error().reason, kTimeoutUnsent);
  EXPECT_NE(detail.find("WRONGPASS"), std::string::npos) << detail;
  EXPECT_EQ(server_->cmd({"EXISTS", "x"}).integer, 0);
}

TEST_F(ConnectionTest, ACutMidReplyFailsTheCommandNeverATruncatedValue) {
  start_server();
  const std::string big(1 << 20, 'v');
  ASSERT_FALSE(server_->cmd({"SET", "big", big}).is_error());
  ASSERT_FALSE(server_->cmd({"SET", "small", "ok"}).is_error());
  testing::CutProxy proxy(server_->port());
  ConnectionOptions o;
  o.port = proxy.port();
  o.default_timeout = seconds(5);
  auto c = connect(o);
  ASSERT_TRUE(call(*c, {"PING"}).ok());
  proxy.cut_after(static_cast<int64_t>(big.size() / 2));
  auto r = call(*c, {"GET", "big"});
  ASSERT_FALSE(r.ok()) << "got a value of " << (r.ok() ? r->str().size() : 0) << " bytes";
  EXPECT_STREQ(r.error().reason, kConnectionLost);
  EXPECT_TRUE(may_have_executed(r.error()));
  EXPECT_EQ(proxy.cuts(), 1);
  EXPECT_GT(c->stats().bytes_received, big.size() / 4) << "the cut came mid-reply";
  auto next = call(*c, {"GET", "small"});
  ASSERT_TRUE(next.ok()) << show(next);
  EXPECT_EQ(*next, Reply::string("ok"));
  auto again = call(*c, {"STRLEN", "big"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Reply::integer(static_cast<int64_t>(big.size())));
  EXPECT_EQ(proxy.connections(), 2);
}

TEST_F(ConnectionTest, ALostReplyIsReportedAndTheCommandIsNeverResent) {
  start_server();
  testing::CutProxy proxy(server_->port());
  ConnectionOptions o;
  o.port = proxy.port();
  o.default_timeout = seconds(5);
  auto c = connect(o);
  ASSERT_TRUE(call(*c, {"PING"}).ok());
  proxy.cut_after(0);  // the server runs INCR, its reply never arrives
  auto r = call(*c, {"INCR", "once"});
  ASSERT_FALSE(r.ok()) << show(r);
  EXPECT_STREQ(r.error().reason, kConnectionLost);
  EXPECT_TRUE(may_have_executed(r.error()));
  // After the reconnect the counter shows one execution: nothing re-sent the INCR.
  auto get = call(*c, {"GET", "once"});
  ASSERT_TRUE(get.ok()) << show(get);
  EXPECT_EQ(*get, Reply::string("1"));
  EXPECT_EQ(c->stats().connection_lost, 1u);
}

TEST_F(ConnectionTest, AReplyBeyondTheReaderLimitFailsAndTheConnectionRecovers) {
  start_server();
  ASSERT_FALSE(server_->cmd({"SET", "large", std::string(64 * 1024, 'x')}).is_error());
  ConnectionOptions o;
  o.reader.max_buffered_bytes = 16 * 1024;
  auto c = connect(o);
  auto r = call(*c, {"GET", "large"});
  ASSERT_FALSE(r.ok()) << show(r);
  EXPECT_STREQ(r.error().reason, kReplyTooLarge);
  auto next = call(*c, {"STRLEN", "large"});
  ASSERT_TRUE(next.ok()) << show(next);
  EXPECT_EQ(*next, Reply::integer(64 * 1024));
}

TEST_F(ConnectionTest, DestroyingFailsCommandsInFlightAsMaybeExecuted) {
  start_server();
  auto c = connect();
  ASSERT_TRUE(call(*c, {"PING"}).ok());
  server_->pause();
  std::optional<Result<Reply>> got;
  CommandOptions o;
  o.timeout = seconds(5);
  c->command(
      {"SET", "x", "1"}, [&](Result<Reply> r) { got.emplace(std::move(r)); }, o);
  ASSERT_TRUE(run_until(*loop_, [&] { return c->stats().awaiting == 1; }));
  c.reset();
  ASSERT_TRUE(got.has_value()) << "the destructor completes what it holds";
  ASSERT_FALSE(got->ok());
  EXPECT_STREQ(got->error().reason, kConnectionLost);
  EXPECT_TRUE(may_have_executed(got->error()));
  server_->resume();
}

TEST_F(ConnectionTest, CloseFailsWhatIsHeldAndRefusesMore) {
  start_server();
  auto c = connect();
  int closed = 0;
  c->command({"PING"}, [&](Result<Reply> r) {
    if (!r.ok() && r.error().reason == std::string(kClosed)) closed++;
  });
  c->close();  // before the connection was up: the PING was never sent
  EXPECT_EQ(closed, 1);
  int refused = 0;
  c->command({"PING"}, [&](Result<Reply> r) {
    if (!r.ok() && !may_have_executed(r.error())) refused++;
  });
  EXPECT_EQ(refused, 0);
  ASSERT_TRUE(run_until(*loop_, [&] { return refused == 1; }));
}

TEST_F(ConnectionTest, EvalshaFallsBackToEvalOnNoscriptOnly) {
  start_server();
  auto c = connect();
  const Script incr("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  EXPECT_EQ(incr.sha1(), server_->cmd({"SCRIPT", "LOAD", incr.source()}).str)
      << "local SHA1 must match the server's";
  ASSERT_FALSE(server_->cmd({"SCRIPT", "FLUSH"}).is_error());
  auto run = [&](const std::string& by) {
    std::optional<Result<Reply>> got;
    const std::string_view keys[] = {"acc"};
    const std::string_view args[] = {by};
    evalsha(*c, incr, keys, args, [&](Result<Reply> r) { got.emplace(std::move(r)); });
    run_until(*loop_, [&] { return got.has_value(); });
    return got.value_or(make_error(Errc::kInternal, "no completion"));
  };
  uint64_t n0 = c->stats().commands;
  auto first = run("5");  // NOSCRIPT -> EVAL
  ASSERT_TRUE(first.ok()) << show(first);
  EXPECT_EQ(*first, Reply::integer(5));
  EXPECT_EQ(c->stats().commands - n0, 2u);
  n0 = c->stats().commands;
  auto second = run("5");  // cached now: EVALSHA alone
  ASSERT_TRUE(second.ok()) << show(second);
  EXPECT_EQ(*second, Reply::integer(10));
  EXPECT_EQ(c->stats().commands - n0, 1u);
  ASSERT_FALSE(server_->cmd({"SCRIPT", "FLUSH"}).is_error());
  n0 = c->stats().commands;
  auto third = run("5");
  ASSERT_TRUE(third.ok()) << show(third);
  EXPECT_EQ(*third, Reply::integer(15));
  EXPECT_EQ(c->stats().commands - n0, 2u);
  EXPECT_EQ(server_->cmd({"GET", "acc"}).str, "15");

  // Any other error is the caller's, with the server's message, and is not retried.
  const Script broken("return redis.call('NOSUCHCOMMAND')");
  std::optional<Result<Reply>> got;
  n0 = c->stats().commands;
  evalsha(*c, broken, {}, {}, [&](Result<Reply> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(run_until(*loop_, [&] { return got.has_value(); }));
  ASSERT_TRUE(got->ok());
  EXPECT_TRUE((*got)->is_error());
  EXPECT_NE((*got)->str().find("Unknown Redis command"), std::string::npos) << (*got)->str();
  EXPECT_EQ(c->stats().commands - n0, 2u) << "EVALSHA (NOSCRIPT) then EVAL (the script's error)";
}

}  // namespace
}  // namespace ringcast::redis
