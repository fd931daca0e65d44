// NatsSource against a real nats-server with JetStream (tests/support/nats_server.h) and the
// engine fake that can hold its durable answers: +ACK only after durable, dead letters with their
// reason (published with a PubAck, then +TERM), the JSON envelope byte for byte, transient
// refusals naked and delivered again (never dead-lettered), a dead-letter subject no stream takes
// (held, kept ours with +WPI, dead-lettered once it works), the max_unacked cap, and a deleted
// consumer created again.
#include "intake/nats_source.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "nats/nkey.h"
#include "nats/protocol.h"
#include "tests/intake/fake_engine.h"
#include "tests/support/nats_server.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast::intake {
namespace {

using namespace std::chrono_literals;
using test::IntakeFakeEngine;
using test::NatsServer;
using test::TempDir;

std::string numbered(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = 15s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

using Msgs = std::vector<std::tuple<std::string, std::string, std::string>>;

class NatsSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NatsServer::available()) {
      RINGCAST_SKIP_MISSING() << "nats-server is not installed (tools/install-deps.sh)";
    }
    server_ = NatsServer::start(dir_.path());
    server_->create_stream("EV", {"ev.>"});
  }

  NatsSourceOptions options() {
    NatsSourceOptions o;
    o.name = "orders";
    o.servers = {server_->address()};
    o.stream = "EV";
    o.filter_subject = "ev.>";
    o.fields = default_nats_header_fields();
    o.dead_letter_subject = "dlq.ev";
    o.batch = 64;
    o.expires = 200ms;
    o.ack_wait = 5s;
    o.nak_delay = 50ms;
    o.retry_delay = 50ms;
    o.status_interval = 50ms;
    return o;
  }
  static std::string headers(const std::string& tenant, const std::string& id,
                             const std::string& type = "order.paid",
                             const std::vector<std::pair<std::string, std::string>>& more = {}) {
    std::vector<std::pair<std::string, std::string>> f;
    if (!tenant.empty()) f.emplace_back("Ringcast-Tenant", tenant);
    if (!id.empty()) f.emplace_back("Ringcast-Id", id);
    if (!type.empty()) f.emplace_back("Ringcast-Type", type);
    f.insert(f.end(), more.begin(), more.end());
    return nats::encode_headers(f);
  }
  // The consumer's num_pending (not yet delivered) + num_ack_pending (delivered, not acked).
  int64_t outstanding() {
    const std::string info = server_->api("CONSUMER.INFO.EV.ringcast");
    const int64_t a = NatsServer::json_int(info, "num_pending");
    const int64_t b = NatsServer::json_int(info, "num_ack_pending");
    return a < 0 || b < 0 ? -1 : a + b;
  }
  int64_t ack_pending() {
    return NatsServer::json_int(server_->api("CONSUMER.INFO.EV.ringcast"), "num_ack_pending");
  }

  TempDir dir_{"nats-intake"};
  std::unique_ptr<NatsServer> server_;
  IntakeFakeEngine engine_;
};

TEST_F(NatsSourceTest, AcksOnlyOnceTheEngineAnsweredDurable) {
  engine_.add_tenant("acme");
  engine_.hold(true);
  Msgs m;
  for (int i = 0; i < 100; ++i)
    m.emplace_back("ev.order", headers("acme", numbered("e", i)), numbered("{\"n\":", i) + "}");
  server_->publish(m);
  auto src = NatsSource::start(options(), engine_);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(wait_for([&] { return engine_.events_seen() == 100; })) << engine_.events_seen();
  // Taken but not durable: nothing is acked.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(ack_pending(), 100);
  EXPECT_EQ((*src)->counters().acked.load(), 0u);
  EXPECT_EQ((*src)->counters().unacked.load(), 100);
  engine_.hold(false);
  ASSERT_TRUE(wait_for([&] { return outstanding() == 0; })) << outstanding();
  const auto& c = (*src)->counters();
  EXPECT_EQ(c.accepted.load(), 100u);
  EXPECT_EQ(c.acked.load(), 100u);
  EXPECT_EQ(c.read.load(), 100u);
  EXPECT_EQ(c.dead_lettered.load(), 0u);
  EXPECT_EQ(engine_.accepted(), 100u);
  EXPECT_EQ(engine_.payload_of("acme", "e7"), "{\"n\":7}");
  EXPECT_TRUE(wait_for([&] { return c.lag.load() == 0 && c.pending.load() == 0; }));
  EXPECT_EQ((*src)->state(), SourceState::kReading);
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, BadMessagesAreDeadLetteredWithTheirReasonThenTerminated) {
  server_->create_stream("DLQ", {"dlq.>"});
  engine_.add_tenant("acme");
  Msgs m;
  m.emplace_back("ev.a", headers("acme", "ok-1"), "{\"a\":1}");
  m.emplace_back("ev.a", headers("acme", "bad-json", "t", {{"Trace", "kept"}}), "{not json");
  m.emplace_back("ev.a", headers("nobody", "who"), "{}");  // unknown tenant
  m.emplace_back("ev.b", headers("acme", "no-type", ""), "{}");
  m.emplace_back("ev.b", headers("acme", "bad-key", "t", {{"Ringcast-Ordering-Key", "k\x01"}}),
                 "{}");
  m.emplace_back("ev.c", "", "{\"no\":\"headers\"}");
  m.emplace_back("ev.a", headers("acme", "ok-1"), "{\"a\":1}");  // duplicate: acked
  m.emplace_back("ev.a", headers("acme", "ok-1", "order.paid", {{"Nats-Msg-Id", "p-9"}}),
                 "{\"a\":2}");  // conflict
  server_->publish(m);
  auto src = NatsSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  const auto& c = (*src)->counters();
  ASSERT_TRUE(wait_for([&] { return outstanding() == 0; })) << outstanding();
  EXPECT_EQ(c.accepted.load(), 1u);
  EXPECT_EQ(c.duplicate.load(), 1u);
  EXPECT_EQ(c.dead_lettered.load(), 6u);
  EXPECT_EQ(c.acked.load(), 2u);
  const auto dead = server_->stream_messages("DLQ");
  ASSERT_EQ(dead.size(), 6u);
  std::map<std::string, test::NatsReply> by_seq;
  for (const auto& d : dead) {
    EXPECT_FALSE(d.header("Ringcast-Error-Message").empty()) << d.headers;
    EXPECT_EQ(d.header("Ringcast-Source-Stream"), "EV");
    by_seq[d.header("Ringcast-Source-Sequence")] = d;
  }
  ASSERT_EQ(by_seq.size(), 6u);
  EXPECT_EQ(by_seq["2"].header("Ringcast-Error-Code"), "invalid_json");
  EXPECT_EQ(by_seq["2"].header("Trace"), "kept");  // the original's headers and body
  EXPECT_EQ(by_seq["2"].header("Ringcast-Id"), "bad-json");
  EXPECT_EQ(by_seq["2"].data, "{not json");
  EXPECT_EQ(by_seq["2"].header("Ringcast-Source-Subject"), "ev.a");
  EXPECT_EQ(by_seq["3"].header("Ringcast-Error-Code"), "unknown_tenant");
  EXPECT_EQ(by_seq["3"].data, "{}");
  EXPECT_EQ(by_seq["4"].header("Ringcast-Error-Code"), "missing_field");
  EXPECT_NE(by_seq["4"].header("Ringcast-Error-Message").find("Ringcast-Type"), std::string::npos);
  EXPECT_EQ(by_seq["5"].header("Ringcast-Error-Code"), "invalid_value");
  EXPECT_EQ(by_seq["6"].header("Ringcast-Error-Code"), "missing_field");
  EXPECT_EQ(by_seq["6"].data, "{\"no\":\"headers\"}");
  EXPECT_EQ(by_seq["8"].header("Ringcast-Error-Code"), "conflict");
  EXPECT_EQ(by_seq["8"].data, "{\"a\":2}");
  // The producer's Nats-Msg-Id is not the dead letter's: ours names the source message.
  EXPECT_EQ(by_seq["8"].header("Nats-Msg-Id"), "ringcast-dead-EV-8");
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, ARefusedMessageGoneFromItsStreamIsDeadLetteredWithANote) {
  // The engine refuses it (unknown tenant) only after its body went to the engine: the dead
  // letter reads it back from the stream, where it was deleted meanwhile.
  server_->create_stream("DLQ", {"dlq.>"});
  engine_.hold(true);
  server_->publish({{"ev.gone", headers("nobody", "g1", "t", {{"Trace", "t-1"}}), "{\"g\":1}"},
                    {"ev.kept", headers("nobody", "k1"), "{\"k\":1}"}});
  auto src = NatsSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return engine_.events_seen() == 2; }));
  const std::string del = server_->api("STREAM.MSG.DELETE.EV", "{\"seq\":1}");
  ASSERT_NE(del.find("\"success\":true"), std::string::npos) << del;
  engine_.hold(false);
  const auto& c = (*src)->counters();
  ASSERT_TRUE(wait_for([&] { return c.dead_lettered.load() == 2 && outstanding() == 0; }))
      << c.dead_lettered.load() << " " << outstanding();
  std::map<std::string, test::NatsReply> by_seq;
  for (const auto& d : server_->stream_messages("DLQ"))
    by_seq[d.header("Ringcast-Source-Sequence")] = d;
  ASSERT_EQ(by_seq.size(), 2u);
  EXPECT_EQ(by_seq["1"].header("Ringcast-Error-Code"), "unknown_tenant");
  EXPECT_EQ(by_seq["1"].header("Trace"), "t-1");  // the headers are kept
  EXPECT_EQ(by_seq["1"].data, "");
  EXPECT_NE(by_seq["1"].header("Ringcast-Error-Message").find("body is not in this copy"),
            std::string::npos)
      << by_seq["1"].headers;
  EXPECT_EQ(by_seq["2"].data, "{\"k\":1}");  // read back whole
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, TheJsonEnvelopeCarriesThePayloadByteForByte) {
  server_->create_stream("DLQ", {"dlq.>"});
  engine_.add_tenant("acme");
  NatsSourceOptions o = options();
  o.envelope = NatsEnvelope::kJson;
  o.fields = FieldNames{};  // tenant, id, type, payload, ordering_key
  const std::string payloads[] = {"{ \"spaced\" : [1, 2,\n3] }", "[true,null]", "\"text\"", "12.50",
                                  "{\"nested\":{\"a\":\"\\u00e9\"}}"};
  Msgs m;
  for (int i = 0; i < 5; ++i) {
    std::string body = "{\"tenant\":\"acme\",\"id\":\"j";
    body += std::to_string(i);
    body += "\",\"type\":\"t\",\"extra\":{\"ignored\":1},\"payload\":";
    body += payloads[i];
    body += " , \"ordering_key\":\"k\"}";
    m.emplace_back("ev.json", "", body);
  }
  m.emplace_back("ev.json", "", "[1,2]");  // not an object
  m.emplace_back("ev.json", "", "{\"tenant\":7,\"id\":\"x\",\"type\":\"t\",\"payload\":{}}");
  m.emplace_back("ev.json", "", "{\"tenant\":\"acme\",\"id\":\"x\",\"type\":\"t\"}");
  m.emplace_back("ev.json", "",
                 "{\"tenant\":\"acme\",\"id\":\"y\",\"type\":\"t\",\"payload\":{}} x");
  server_->publish(m);
  auto src = NatsSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return outstanding() == 0; })) << outstanding();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(engine_.payload_of("acme", numbered("j", i)), payloads[i]);
  std::map<std::string, std::string> code_by_seq;
  for (const auto& d : server_->stream_messages("DLQ"))
    code_by_seq[d.header("Ringcast-Source-Sequence")] = d.header("Ringcast-Error-Code");
  EXPECT_EQ(code_by_seq["6"], "invalid_json");
  EXPECT_EQ(code_by_seq["7"], "invalid_value");
  EXPECT_EQ(code_by_seq["8"], "missing_field");
  EXPECT_EQ(code_by_seq["9"], "invalid_json");
  EXPECT_EQ(code_by_seq.size(), 4u);
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, TransientRefusalsAreNakedAndDeliveredAgainNeverDeadLettered) {
  server_->create_stream("DLQ", {"dlq.>"});
  engine_.add_tenant("acme");
  engine_.refuse_next_batches(2);
  Msgs m;
  for (int i = 0; i < 20; ++i)
    m.emplace_back("ev.t", headers("acme", numbered("t", i)), numbered("[", i) + "]");
  server_->publish(m);
  auto src = NatsSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 20 && outstanding() == 0; }))
      << engine_.accepted() << " " << outstanding();
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(engine_.payload_of("acme", numbered("t", i)), numbered("[", i) + "]");
  const auto& c = (*src)->counters();
  EXPECT_GT(c.retried.load(), 0u);
  EXPECT_GE(c.redelivered.load(), c.retried.load());  // each nak came back as a redelivery
  EXPECT_EQ(c.dead_lettered.load(), 0u);
  EXPECT_TRUE(server_->stream_messages("DLQ").empty());
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, ADeadLetterNoStreamTakesIsHeldUntilOneDoes) {
  engine_.add_tenant("acme");
  NatsSourceOptions o = options();
  o.ack_wait = 1s;  // +WPI at half of it keeps the message ours meanwhile
  Msgs m{{"ev.x", headers("acme", "bad"), "{nope"}, {"ev.x", headers("acme", "good"), "{}"}};
  server_->publish(m);
  auto src = NatsSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  const auto& c = (*src)->counters();
  ASSERT_TRUE(wait_for([&] { return c.acked.load() == 1; }));
  std::this_thread::sleep_for(2500ms);  // past two ack_waits
  EXPECT_EQ(c.dead_lettered.load(), 0u);
  EXPECT_GT(c.nats_errors.load(), 0u);  // every attempt: no responders
  EXPECT_EQ(ack_pending(), 1);          // not terminated without a copy
  EXPECT_EQ(c.redelivered.load(), 0u);  // and never redelivered meanwhile
  EXPECT_EQ(c.unacked.load(), 1);
  server_->create_stream("DLQ", {"dlq.>"});
  ASSERT_TRUE(wait_for([&] { return c.dead_lettered.load() == 1 && outstanding() == 0; }))
      << outstanding();
  const auto dead = server_->stream_messages("DLQ");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].data, "{nope");
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, AtMostMaxUnackedAreHeldAndPullingPausesThere) {
  server_->create_stream("DLQ", {"dlq.>"});
  engine_.add_tenant("acme");
  engine_.hold(true);
  NatsSourceOptions o = options();
  o.batch = 10;
  o.max_unacked = 50;
  Msgs m;
  for (int i = 0; i < 200; ++i) m.emplace_back("ev.cap", headers("acme", numbered("c", i)), "1");
  server_->publish(m);
  auto src = NatsSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(wait_for([&] { return engine_.events_seen() >= 40; }));
  std::this_thread::sleep_for(500ms);
  EXPECT_LE(engine_.events_seen(), 50u);
  EXPECT_LE((*src)->counters().unacked.load(), 50);
  EXPECT_LE(ack_pending(), 50);
  EXPECT_EQ((*src)->state(), SourceState::kPaused);
  engine_.hold(false);
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 200 && outstanding() == 0; }))
      << engine_.accepted() << " " << outstanding();
  EXPECT_EQ((*src)->counters().acked.load(), 200u);
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, ADeletedConsumerIsCreatedAgainAndNothingIsLost) {
  server_->create_stream("DLQ", {"dlq.>"});
  engine_.add_tenant("acme");
  auto src = NatsSource::start(options(), engine_);
  ASSERT_TRUE(src.ok());
  const auto& c = (*src)->counters();
  Msgs first;
  for (int i = 0; i < 10; ++i) first.emplace_back("ev.d", headers("acme", numbered("d", i)), "1");
  server_->publish(first);
  ASSERT_TRUE(wait_for([&] { return c.acked.load() == 10; }));
  const std::string del = server_->api("CONSUMER.DELETE.EV.ringcast");
  ASSERT_NE(del.find("\"success\":true"), std::string::npos) << del;
  Msgs second;
  for (int i = 10; i < 20; ++i) second.emplace_back("ev.d", headers("acme", numbered("d", i)), "1");
  server_->publish(second);
  // Created again (deliver_policy all: the first ten come back, as duplicates).
  ASSERT_TRUE(wait_for([&] { return engine_.accepted() == 20 && outstanding() == 0; }))
      << engine_.accepted() << " " << outstanding();
  EXPECT_EQ(c.duplicate.load(), 10u);
  EXPECT_EQ((*src)->state(), SourceState::kReading);
  (*src)->stop(1s);
}

TEST_F(NatsSourceTest, AMissingStreamIsSaidInTheStatusAndTheSourceStartsOnceItExists) {
  NatsSourceOptions o = options();
  o.stream = "LATER";
  o.filter_subject = "later.>";
  engine_.add_tenant("acme");
  auto src = NatsSource::start(o, engine_);
  ASSERT_TRUE(src.ok());
  const auto& c = (*src)->counters();
  ASSERT_TRUE(wait_for([&] { return !c.connection_error().empty(); }));
  EXPECT_NE(c.connection_error().find("stream not found"), std::string::npos)
      << c.connection_error();
  EXPECT_EQ((*src)->state(), SourceState::kDown);
  server_->create_stream("LATER", {"later.>"});
  server_->publish({{"later.x", headers("acme", "l1"), "{}"}});
  ASSERT_TRUE(wait_for([&] { return c.acked.load() == 1; }));
  EXPECT_TRUE(c.connection_error().empty());
  const std::string status = render_intake_status({}, {src->get()});
  EXPECT_NE(status.find("\"kind\":\"nats\""), std::string::npos) << status;
  EXPECT_NE(status.find("\"connection_error\":null"), std::string::npos) << status;
  const std::string metrics = render_intake_metrics({}, {src->get()});
  EXPECT_NE(metrics.find("ringcast_intake_entries_total{source=\"orders\",result=\"acked\"} 1"),
            std::string::npos)
      << metrics;
  (*src)->stop(1s);
}

TEST(NatsSourceNkey, ASourceSignsInWithTheSeedOfItsFile) {
  if (!NatsServer::available()) {
    RINGCAST_SKIP_MISSING() << "nats-server is not installed (tools/install-deps.sh)";
  }
  TempDir dir("nats-intake-nkey");
  std::array<uint8_t, 32> raw{};
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(200 - i);
  const std::string seed = nats::nkey_user_seed(raw);
  test::write_file(dir.file("user.nk"), seed + "\n");
  test::NatsServerOptions so;
  so.nkey = nats::nkey_from_seed(seed)->public_key;
  so.user = "oracle";
  so.password = "oracle-pw";
  auto server = NatsServer::start(dir.path(), so);
  server->create_stream("EV", {"ev.>"});
  IntakeFakeEngine engine;
  engine.add_tenant("acme");
  NatsSourceOptions o;
  o.servers = {server->address()};
  o.stream = "EV";
  o.fields = default_nats_header_fields();
  o.nkey_seed_file = dir.file("user.nk");
  o.status_interval = 50ms;
  auto src = NatsSource::start(o, engine);
  ASSERT_TRUE(src.ok()) << src.error().message;
  server->publish(
      {{"ev.n",
        nats::encode_headers(
            {{"Ringcast-Tenant", "acme"}, {"Ringcast-Id", "n1"}, {"Ringcast-Type", "t"}}),
        "{}"}});
  ASSERT_TRUE(wait_for([&] { return (*src)->counters().acked.load() == 1; }))
      << (*src)->counters().connection_error();
  (*src)->stop(1s);
  // A file without a seed is refused at start, naming the option.
  test::write_file(dir.file("bad.nk"), "not a seed\n");
  o.nkey_seed_file = dir.file("bad.nk");
  auto bad = NatsSource::start(o, engine);
  ASSERT_FALSE(bad.ok());
  EXPECT_STREQ(bad.error().field, "nkey_seed_file");
}

TEST(NatsSourceOptionsCheck, BadOptionsAreRefusedNamingTheField) {
  IntakeFakeEngine engine;
  auto field_of = [&](NatsSourceOptions o) -> std::string {
    auto s = NatsSource::start(std::move(o), engine);
    return s.ok() ? "" : (s.error().field ? s.error().field : "?");
  };
  NatsSourceOptions base;
  base.stream = "EV";
  NatsSourceOptions o = base;
  o.stream = "a.b";
  EXPECT_EQ(field_of(o), "stream");
  o = base;
  o.servers = {"localhost:4222"};
  EXPECT_EQ(field_of(o), "servers");
  o = base;
  o.dead_letter_subject = "dlq.*";
  EXPECT_EQ(field_of(o), "dead_letter_subject");
  o = base;
  o.batch = 100;
  o.max_unacked = 10;
  EXPECT_EQ(field_of(o), "batch");
}

TEST(NatsIntakeRendering, EachMetricFamilyOnceForBothKinds) {
  const std::string redis =
      "# HELP ringcast_intake_lag Lag.\n# TYPE ringcast_intake_lag gauge\n"
      "ringcast_intake_lag{source=\"r\"} 3\n"
      "# HELP ringcast_intake_redis_errors_total E.\n# TYPE ringcast_intake_redis_errors_total "
      "counter\nringcast_intake_redis_errors_total{source=\"r\"} 0\n";
  const std::string nats =
      "# HELP ringcast_intake_lag Lag.\n# TYPE ringcast_intake_lag gauge\n"
      "ringcast_intake_lag{source=\"n\"} 5\n"
      "# HELP ringcast_intake_nats_errors_total N.\n# TYPE ringcast_intake_nats_errors_total "
      "counter\nringcast_intake_nats_errors_total{source=\"n\"} 1\n";
  EXPECT_EQ(merge_metric_families({redis, nats}),
            "# HELP ringcast_intake_lag Lag.\n# TYPE ringcast_intake_lag gauge\n"
            "ringcast_intake_lag{source=\"r\"} 3\nringcast_intake_lag{source=\"n\"} 5\n"
            "# HELP ringcast_intake_redis_errors_total E.\n# TYPE "
            "ringcast_intake_redis_errors_total counter\n"
            "ringcast_intake_redis_errors_total{source=\"r\"} 0\n"
            "# HELP ringcast_intake_nats_errors_total N.\n# TYPE "
            "ringcast_intake_nats_errors_total counter\n"
            "ringcast_intake_nats_errors_total{source=\"n\"} 1\n");
  EXPECT_TRUE(render_intake_metrics({}, {}).empty());
  EXPECT_EQ(render_intake_status({}, {}), "{\"sources\":[]}");
}

}  // namespace
}  // namespace ringcast::intake
