// End to end: intake from NATS JetStream (operations.md §6 "NATS JetStream") with real processes
// — nats-server, the daemon(s) and a verifying ringcast-sink; events are published with the
// project's own NATS client (JetStream publishes, each until its PubAck). Published events are
// delivered once, correctly signed, their payloads byte for byte; bad ones land in the
// dead-letter stream with their reason; ten SIGKILLs of the daemon mid-stream lose nothing; a
// nats-server restart mid-stream is resumed by itself; two daemons on one durable consumer split
// the stream, each event accepted by one of them (by both only for what a killed one held).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nats/connection.h"
#include "nats/jetstream.h"
#include "net/loop.h"
#include "tests/e2e/daemon.h"
#include "tests/support/nats_server.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::NatsServer;
using test::SinkProcess;
using test::TempDir;

constexpr const char* kSecret = "whsec_ZTJlLW5hdHMtaW50YWtlLXNlY3JldC1rZXktMDE=";
constexpr const char* kTenant = "nats-tenant";

// Publishes with the project's NATS client (nats/connection.h) on a loop thread of its own: each
// message is a JetStream publish, at most kWindow awaiting their PubAck, and one that gets none
// (the server down, a timeout, an error) is published again until it has one. Each carries a
// Nats-Msg-Id, so that the stream keeps a repeat once (its duplicate window).
class JsPublisher {
 public:
  struct Out {
    std::string subject;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string data;
  };

  explicit JsPublisher(const std::string& address) {
    std::promise<void> up;
    thread_ = std::thread([this, address, &up] {
      auto l = net::Loop::create({});
      loop_ = std::move(*l);
      nats::ConnectionOptions o;
      o.servers = {address};
      o.name = "e2e publisher";
      o.reconnect_min = std::chrono::milliseconds(20);
      o.reconnect_max = std::chrono::milliseconds(200);
      auto c = nats::Connection::create(*loop_, o);
      conn_ = std::move(*c);
      retry_ = std::make_unique<net::TimerFn<std::function<void()>>>([this] { requeue(); });
      up.set_value();
      while (!stop_.load()) loop_->run_once(std::chrono::milliseconds(10));
      loop_->disarm(retry_.get());
      conn_.reset();
    });
    up.get_future().wait();
  }
  ~JsPublisher() {
    stop_ = true;
    thread_.join();
  }
  JsPublisher(const JsPublisher&) = delete;
  JsPublisher& operator=(const JsPublisher&) = delete;

  // Publishes all of `msgs`; returns how many publishes were repeated. Fails the test when not
  // every message has its PubAck within `timeout`.
  int publish(std::vector<Out> msgs, Millis timeout = 60s) {
    auto st = std::make_shared<State>();
    st->msgs = std::move(msgs);
    for (size_t i = 0; i < st->msgs.size(); ++i) st->todo.push_back(i);
    std::future<void> done = st->done.get_future();
    if (st->msgs.empty()) return 0;
    loop_->post([this, st] {
      state_ = st;
      pump();
    });
    const bool finished = done.wait_for(timeout) == std::future_status::ready;
    EXPECT_TRUE(finished) << "published " << st->acked << " of " << st->msgs.size();
    if (!finished) {
      std::promise<void> cleared;
      loop_->post([this, &cleared] {
        state_.reset();
        cleared.set_value();
      });
      cleared.get_future().wait();
    }
    return st->repeats;
  }

 private:
  static constexpr size_t kWindow = 512;
  struct State {
    std::vector<Out> msgs;
    std::vector<size_t> todo, again;
    size_t in_flight = 0;
    size_t acked = 0;
    int repeats = 0;
    std::promise<void> done;
  };

  void pump() {
    std::shared_ptr<State> st = state_;
    if (!st) return;
    while (st->in_flight < kWindow && !st->todo.empty()) {
      const size_t i = st->todo.back();
      st->todo.pop_back();
      ++st->in_flight;
      const Out& m = st->msgs[i];
      conn_->request(
          m.subject, m.data,
          [this, st, i](Result<nats::Msg> r) {
            --st->in_flight;
            bool ok = false;
            if (r.ok()) {
              const nats::ApiReply a = nats::parse_api_reply(r->data);
              ok = a.json && !a.error && a.seq > 0;
            }
            if (ok) {
              if (++st->acked == st->msgs.size()) {
                state_.reset();
                st->done.set_value();
              }
            } else {
              ++st->repeats;
              st->again.push_back(i);
              if (!retry_->armed()) loop_->arm_after(retry_.get(), std::chrono::milliseconds(100));
            }
            if (state_ == st) pump();
          },
          std::chrono::seconds(5), nats::encode_headers(m.headers));
    }
  }
  void requeue() {
    if (!state_) return;
    state_->todo.insert(state_->todo.end(), state_->again.begin(), state_->again.end());
    state_->again.clear();
    pump();
  }

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<net::Loop> loop_;
  std::unique_ptr<nats::Connection> conn_;
  std::unique_ptr<net::Timer> retry_;
  std::shared_ptr<State> state_;
};

std::string event_id(int i) {
  std::string s = "nats-e";
  s += std::to_string(i);
  return s;
}

// The payload of event i: other whitespace, escapes and UTF-8, delivered as these bytes.
std::string payload_of(int i) {
  std::string p = "{\"n\": ";
  p += std::to_string(i);
  p += ",  \"s\":\"caf\\u00e9 \xc3\xa9\\t\", \"a\":[1, 2 ,3]}";
  return p;
}

JsPublisher::Out event_msg(int i, const std::string& tenant = kTenant) {
  JsPublisher::Out m;
  m.subject = "ev.orders";
  m.headers = {{"Ringcast-Tenant", tenant},
               {"Ringcast-Id", event_id(i)},
               {"Ringcast-Type", "order.paid"},
               {"Nats-Msg-Id", event_id(i)}};
  m.data = payload_of(i);
  return m;
}

std::vector<JsPublisher::Out> events(int from, int to) {
  std::vector<JsPublisher::Out> out;
  for (int i = from; i < to; ++i) out.push_back(event_msg(i));
  return out;
}

std::string intake_toml(const NatsServer& n, const std::string& extra = "") {
  std::string t = "[[intake.nats]]\nname = \"bus\"\nservers = [\"";
  t += n.address();
  t += "\"]\nstream = \"EV\"\nfilter_subject = \"ev.>\"\ndead_letter_subject = \"dlq.ev\"\n";
  t += "expires = \"500ms\"\nack_wait = \"2s\"\nnak_delay = \"100ms\"\n";
  t += extra;
  return t;
}

SinkProcess verifying_sink(const TempDir& dir) {
  return SinkProcess::start(
      {"--verify", "standard", "--secret", kSecret, "--ids-file", dir.file("ids.txt"), "--quiet"},
      dir.path());
}

void make_endpoint(const Daemon& d, const SinkProcess& sink) {
  Reply r = create_endpoint(
      d, kTenant,
      "{\"url\":" + quote(sink.base_url() + "/hooks") +
          ",\"policy\":\"steady\",\"signature\":\"standard\",\"secret\":" + quote(kSecret) + "}");
  ASSERT_EQ(r.status, 201) << r.describe();
}

// nats-server with the stream EV (ev.>) and the dead-letter stream DLQ (dlq.>).
std::unique_ptr<NatsServer> start_nats(const TempDir& dir) {
  auto n = NatsServer::start(dir.path());
  n->create_stream("EV", {"ev.>"});
  n->create_stream("DLQ", {"dlq.>"});
  return n;
}

// Messages of EV delivered to the durable and not acked, plus those not delivered yet.
int64_t outstanding(const NatsServer& n, const std::string& durable = "ringcast") {
  const std::string info = n.api("CONSUMER.INFO.EV." + durable);
  const int64_t a = NatsServer::json_int(info, "num_pending");
  const int64_t b = NatsServer::json_int(info, "num_ack_pending");
  return a < 0 || b < 0 ? -1 : a + b;
}

double bus_metric(const Daemon& d, const char* result) {
  std::string s = "ringcast_intake_entries_total{source=\"bus\",result=\"";
  s += result;
  s += "\"}";
  return metric(scrape_metrics(d), s);
}

// One test's processes: nats-server in a dir of its own, a verifying sink, a daemon whose source
// reads EV, its tenant's endpoint created.
struct Rig {
  explicit Rig(const char* name, const std::string& extra = "", std::vector<std::string> env = {})
      : dir(name),
        nats_dir("e2e-nats-server"),
        nats(start_nats(nats_dir)),
        sink(verifying_sink(dir)) {
    DaemonOptions o;
    o.extra_toml = intake_toml(*nats, extra);
    o.env = std::move(env);
    d = std::make_unique<Daemon>(o);
    d->start();
    make_endpoint(*d, sink);
  }
  TempDir dir;
  TempDir nats_dir;
  std::unique_ptr<NatsServer> nats;
  SinkProcess sink;
  std::unique_ptr<Daemon> d;
};

// Every delivery of the tenant (paged): event id → {message id, status}; `count` per event.
struct Row {
  std::string message_id, status;
};
std::map<std::string, Row> all_deliveries(const Daemon& d, std::map<std::string, int>* count) {
  std::map<std::string, Row> out;
  std::string cursor;
  for (int page = 0; page < 10000; ++page) {
    std::string path = "/v1/tenants/";
    path += kTenant;
    path += "/deliveries?limit=1000";
    if (!cursor.empty()) {
      path += "&cursor=";
      path += cursor;
    }
    Reply r = d.call("GET", path);
    if (r.status != 200) break;
    Json j = r.json();
    for (const auto& item : j["deliveries"].items()) {
      const std::string& ev = item["event_id"].str();
      out[ev] = Row{item["message_id"].str(), item["status"].str()};
      if (count) ++(*count)[ev];
    }
    if (j["next_cursor"].is_null() || j["next_cursor"].str().empty()) break;
    cursor = j["next_cursor"].str();
  }
  return out;
}

// Against the `n` events published: events without a delivery, accepted twice, not delivered,
// without a 200 at the sink; and how many 200s beyond the first the sink saw (repeats).
struct Tally {
  int no_delivery = 0, double_accepted = 0, not_delivered = 0, sink_missing = 0, repeats = 0;
  std::string first;
  bool complete() const {
    return no_delivery == 0 && double_accepted == 0 && not_delivered == 0 && sink_missing == 0;
  }
  int lost() const { return no_delivery + not_delivered + sink_missing; }
  std::string str() const {
    std::string s = "without a delivery ";
    s += std::to_string(no_delivery);
    s += ", accepted twice ";
    s += std::to_string(double_accepted);
    s += ", not delivered ";
    s += std::to_string(not_delivered);
    s += ", no 200 at the sink ";
    s += std::to_string(sink_missing);
    s += ", repeated 200s ";
    s += std::to_string(repeats);
    if (!first.empty()) {
      s += " (first: ";
      s += first;
      s += ')';
    }
    return s;
  }
};
Tally tally(const Daemon& d, const SinkProcess& sink, int n) {
  std::map<std::string, int> count;
  auto rows = all_deliveries(d, &count);
  std::map<std::string, int> oks;
  for (const auto& l : sink.ids())
    if (l.status == "200") ++oks[l.id];
  Tally t;
  auto note = [&t](const std::string& what) {
    if (t.first.empty()) t.first = what;
  };
  for (int i = 0; i < n; ++i) {
    const std::string id = event_id(i);
    auto it = rows.find(id);
    if (it == rows.end()) {
      ++t.no_delivery;
      note(id + " has no delivery");
      continue;
    }
    if (count[id] > 1) {
      ++t.double_accepted;
      note(id + " accepted twice");
    }
    if (it->second.status != "delivered") {
      ++t.not_delivered;
      note(id + " is " + it->second.status);
    }
    auto ok = oks.find(it->second.message_id);
    if (ok == oks.end()) {
      ++t.sink_missing;
      note(id + " has no 200 at the sink");
    } else if (ok->second > 1) {
      t.repeats += ok->second - 1;
    }
  }
  return t;
}

class E2eNatsIntake : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NatsServer::available()) {
      RINGCAST_SKIP_MISSING() << "nats-server is not installed (tools/install-deps.sh)";
    }
  }
};

TEST_F(E2eNatsIntake, PublishedEventsAreDeliveredOnceByteForByteAndBadOnesDeadLettered) {
  // A small [limits] max_body_bytes, so that a too_large payload fits in one NATS message.
  Rig rig("e2e-nats", "", {"RINGCAST_LIMITS_MAX_BODY_BYTES=8192"});
  Daemon& d = *rig.d;
  NatsServer& nats = *rig.nats;
  JsPublisher pub(nats.address());

  constexpr int kEvents = 300;
  EXPECT_EQ(pub.publish(events(0, kEvents)), 0);
  // One bad message per reason, each with a header of its own that the dead letter keeps.
  auto bad = [](const std::string& tenant, const std::string& id, const std::string& type,
                const std::string& data, const std::string& tag,
                std::vector<std::pair<std::string, std::string>> more = {}) {
    JsPublisher::Out m;
    m.subject = "ev.bad";
    if (!tenant.empty()) m.headers.emplace_back("Ringcast-Tenant", tenant);
    if (!id.empty()) m.headers.emplace_back("Ringcast-Id", id);
    if (!type.empty()) m.headers.emplace_back("Ringcast-Type", type);
    m.headers.emplace_back("Case", tag);
    m.headers.insert(m.headers.end(), more.begin(), more.end());
    m.data = data;
    return m;
  };
  std::vector<JsPublisher::Out> bads = {
      bad(kTenant, "bad-json", "t", "{nope", "invalid_json"),
      bad(kTenant, "no-type", "", "{}", "missing_field"),
      bad("nobody", "x", "t", "{}", "unknown_tenant"),
      bad(kTenant, event_id(0), "order.paid", "{\"other\": true}", "conflict"),
      bad(kTenant, "bad-key", "t", "{}", "invalid_value", {{"Ringcast-Ordering-Key", "k\x01"}}),
      bad(kTenant, "big", "t", "[\"" + std::string(9000, 'x') + "\"]", "too_large"),
      bad(kTenant, "bad id", "t", "{}", "invalid_event_id"),
  };
  // The conflict goes once event 0 is taken in: with several pullers (cluster mode: a node each)
  // a later message may be taken in before an earlier one, and the first taken wins (R12.5).
  const std::vector<JsPublisher::Out> conflict = {bads[3]};
  EXPECT_EQ(pub.publish({bads[0], bads[1], bads[2], bads[4], bads[5], bads[6]}), 0);
  // A repeat of an event already taken (no Nats-Msg-Id: the stream keeps it): a duplicate.
  JsPublisher::Out repeat = event_msg(1);
  repeat.headers.pop_back();
  EXPECT_EQ(pub.publish({repeat}), 0);

  std::vector<std::string> ids;
  for (int i = 0; i < kEvents; ++i) ids.push_back(event_id(i));
  std::vector<std::string> msg_ids;
  ASSERT_TRUE(wait_until(
      [&] {
        msg_ids = message_ids_of(d, kTenant, ids);
        return std::count(msg_ids.begin(), msg_ids.end(), "") == 0;
      },
      scaled(30s)))
      << d.output();
  EXPECT_EQ(pub.publish(conflict), 0);
  ASSERT_TRUE(wait_until([&] { return missing_ids(rig.sink, msg_ids).empty(); }, scaled(30s)))
      << rig.sink.stats_json() << "\nmissing: " << sample(missing_ids(rig.sink, msg_ids));
  ASSERT_TRUE(wait_until([&] { return outstanding(nats) == 0; }, scaled(10s))) << outstanding(nats);
  std::this_thread::sleep_for(300ms);  // room for a second delivery, if there were one
  for (const auto& m : msg_ids) EXPECT_EQ(sink_lines_for(rig.sink, m), 1u) << m;
  EXPECT_EQ(rig.sink.stats_value("bad_signatures"), 0) << rig.sink.stats_json();
  // The payloads as published, byte for byte (the event read embeds the stored bytes).
  for (int i = 0; i < kEvents; i += 37) {
    Reply r = d.call("GET", "/v1/tenants/" + std::string(kTenant) + "/events/" + event_id(i));
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_NE(r.body.find("\"payload\":" + payload_of(i)), std::string::npos) << r.body;
  }

  // The dead-letter stream: each bad message with its headers, body and reason.
  // A bad message a node answered with a transient refusal first (cluster mode: its partition
  // between owners) is -NAKed with a delay and dead-lettered at its redelivery: waited for.
  std::map<std::string, test::NatsReply> by_case;
  wait_until(
      [&] {
        by_case.clear();
        for (const auto& m : nats.stream_messages("DLQ")) by_case[m.header("Case")] = m;
        return by_case.size() >= bads.size();
      },
      scaled(10s), 100ms);
  std::string found;
  for (const auto& [tag, m] : by_case) {
    found += ' ';
    found += tag;
  }
  ASSERT_EQ(by_case.size(), bads.size()) << "dead letters for:" << found << "\n" << d.output();
  for (const auto& [tag, m] : by_case) {
    EXPECT_EQ(m.header("Ringcast-Error-Code"), tag) << m.headers;
    EXPECT_FALSE(m.header("Ringcast-Error-Message").empty());
    EXPECT_EQ(m.header("Ringcast-Source-Stream"), "EV");
    EXPECT_EQ(m.header("Ringcast-Source-Subject"), "ev.bad");
    EXPECT_FALSE(m.header("Ringcast-Source-Sequence").empty());
  }
  EXPECT_EQ(by_case["invalid_json"].data, "{nope");
  EXPECT_EQ(by_case["conflict"].data, "{\"other\": true}");
  EXPECT_EQ(by_case["conflict"].header("Ringcast-Id"), event_id(0));
  EXPECT_EQ(by_case["too_large"].data.size(), 9004u);

  Metrics m = scrape_metrics(d);
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"accepted\"}"),
            kEvents);
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"duplicate\"}"), 1);
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"dead_lettered\"}"),
            static_cast<double>(bads.size()));
  EXPECT_EQ(metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"acked\"}"),
            kEvents + 1);
  EXPECT_GE(metric(m, "ringcast_intake_lag{source=\"bus\"}"), 0);
  Reply st = d.call("GET", "/v1/intake");
  ASSERT_EQ(st.status, 200) << st.describe();
  Json sj = st.json();
  ASSERT_EQ(sj["sources"].size(), 1u) << st.body;
  EXPECT_EQ(sj["sources"][0]["name"].str(), "bus");
  EXPECT_EQ(sj["sources"][0]["kind"].str(), "nats");
  EXPECT_EQ(sj["sources"][0]["durable"].str(), "ringcast");
  EXPECT_TRUE(wait_until(
      [&] { return d.call("GET", "/v1/intake").json()["sources"][0]["state"].str() == "reading"; },
      5s))
      << d.call("GET", "/v1/intake").body;

  // `ringcast intake status`: a table and JSON, each node its share (cluster mode: 3 pullers).
  int cli_runs = 0;
  auto cli = [&](const std::vector<std::string>& args, size_t node = 0) {
    std::string tag = "cli-";
    tag += std::to_string(++cli_runs);
    test::ProcessOptions po;
    po.stdout_path = rig.dir.file(tag + ".out");
    po.stderr_path = rig.dir.file(tag + ".err");
    std::vector<std::string> argv = {ringcast_binary(), "--server",
                                     "127.0.0.1:" + std::to_string(d.port(node)), "--token",
                                     Daemon::kToken};
    argv.insert(argv.end(), args.begin(), args.end());
    test::Process p = test::Process::start(argv, std::move(po));
    auto status = p.wait(10s);
    EXPECT_TRUE(status && status->ok()) << test::read_file(rig.dir.file(tag + ".err"));
    return test::read_file(rig.dir.file(tag + ".out"));
  };
  const std::string table = cli({"intake", "status"});
  EXPECT_NE(table.find("KIND"), std::string::npos) << table;
  EXPECT_NE(table.find("nats"), std::string::npos) << table;
  EXPECT_NE(table.find("EV (ev.>)"), std::string::npos) << table;
  int64_t accepted = 0, dead_lettered = 0;
  for (size_t node = 0; node < d.nodes(); ++node) {
    Json cj = Json::parse(cli({"--json", "intake", "status"}, node));
    ASSERT_EQ(cj["sources"].size(), 1u);
    accepted += cj["sources"][0]["accepted"].i64();
    dead_lettered += cj["sources"][0]["dead_lettered"].i64();
  }
  EXPECT_EQ(accepted, kEvents);
  EXPECT_EQ(dead_lettered, static_cast<int64_t>(bads.size()));
  auto t = d.terminate();
  EXPECT_TRUE(t.ok()) << t.str() << "\n" << d.output();
}

// Ten SIGKILLs of the daemon while events are being published and taken in: every event is
// delivered, none lost; what a killed run held unacked came back after ack_wait and was a
// duplicate where it had been accepted. 50,000 events (20,000 under ASan and on the cluster;
// RINGCAST_E2E_NATS_EVENTS overrides).
TEST_F(E2eNatsIntake, TenSigkillsMidStreamLoseNothing) {
  Rig rig("e2e-nats-kill", "batch = 512\n");
  Daemon& d = *rig.d;
  int n = kSanitized || cluster_mode() ? 20000 : 50000;
  if (const char* e = std::getenv("RINGCAST_E2E_NATS_EVENTS"); e != nullptr && std::atoi(e) >= 1000)
    n = std::atoi(e);
  const int kEvents = n;
  constexpr int kKills = 10;
  const int part = kEvents / kKills;
  JsPublisher pub(rig.nats->address());
  std::vector<int64_t> outstanding_at_kill;
  std::vector<double> acked_before_kill;
  int repeats = 0;
  for (int k = 0; k < kKills; ++k) {
    std::thread producer([&, k] { repeats += pub.publish(events(k * part, (k + 1) * part)); });
    const double floor = std::max(100, part / 4);
    wait_until([&] { return bus_metric(d, "acked") >= floor; }, scaled(20s), 5ms);
    acked_before_kill.push_back(bus_metric(d, "acked"));
    d.kill9();
    producer.join();
    outstanding_at_kill.push_back(outstanding(*rig.nats));
    ASSERT_NO_THROW(d.start());
  }
  ASSERT_TRUE(
      wait_until([&] { return tally(d, rig.sink, kEvents).complete(); }, scaled(120s), 500ms))
      << tally(d, rig.sink, kEvents).str() << "\n"
      << rig.sink.stats_json() << "\n"
      << d.output();
  EXPECT_TRUE(wait_until([&] { return outstanding(*rig.nats) == 0; }, scaled(20s)))
      << outstanding(*rig.nats);
  const Tally t = tally(d, rig.sink, kEvents);
  EXPECT_TRUE(t.complete()) << t.str();
  EXPECT_EQ(t.lost(), 0);
  EXPECT_EQ(rig.sink.stats_value("bad_signatures"), 0) << rig.sink.stats_json();
  const int64_t stored = NatsServer::json_int(rig.nats->api("STREAM.INFO.EV"), "messages");
  EXPECT_EQ(stored, kEvents);
  std::cerr << "nats kill run: published " << stored << ", kills " << kKills << ", daemon runs "
            << d.runs() << ", outstanding at each kill:";
  for (int64_t o : outstanding_at_kill) std::cerr << ' ' << o;
  std::cerr << ", acked by each run before its kill:";
  for (double a : acked_before_kill) std::cerr << ' ' << static_cast<long long>(a);
  std::cerr << "; lost " << t.lost() << ", " << t.str() << "; publisher repeats " << repeats
            << "; this run: redelivered " << bus_metric(d, "redelivered") << ", duplicate "
            << bus_metric(d, "duplicate") << "\n";
  EXPECT_TRUE(d.terminate().ok()) << d.output();
}

// nats-server restarted twice (SIGTERM; JetStream on disk) while events are published and taken
// in: the source reconnects by itself, makes sure of its consumer, and every event is delivered
// exactly once.
TEST_F(E2eNatsIntake, ANatsServerRestartMidStreamIsResumedByItself) {
  Rig rig("e2e-nats-restart");
  Daemon& d = *rig.d;
  constexpr int kEvents = 6000;
  JsPublisher pub(rig.nats->address());
  std::atomic<int> repeats{0};
  std::thread producer([&] {
    for (int i = 0; i < kEvents; i += 500) {
      repeats += pub.publish(events(i, std::min(kEvents, i + 500)), 120s);
      std::this_thread::sleep_for(50ms);  // a stream, not one burst
    }
  });
  for (double at : {1000.0, 3000.0}) {
    wait_until([&] { return bus_metric(d, "acked") >= at; }, scaled(30s));
    rig.nats->restart();
  }
  producer.join();
  ASSERT_TRUE(wait_until([&] { return tally(d, rig.sink, kEvents).complete(); }, scaled(60s)))
      << tally(d, rig.sink, kEvents).str() << "\n"
      << d.output() << "\n"
      << rig.nats->log();
  ASSERT_TRUE(wait_until([&] { return outstanding(*rig.nats) == 0; }, scaled(20s)))
      << outstanding(*rig.nats);
  std::this_thread::sleep_for(300ms);
  const Tally t = tally(d, rig.sink, kEvents);
  EXPECT_TRUE(t.complete()) << t.str();
  EXPECT_EQ(t.repeats, 0) << t.str();
  Metrics m = scrape_metrics(d);
  EXPECT_GE(metric(m, "ringcast_intake_reconnects_total{source=\"bus\"}"),
            2.0 * static_cast<double>(d.nodes()))
      << d.output();
  std::cerr << "nats restarts: 2, publisher repeats: " << repeats.load()
            << ", duplicates at intake: "
            << metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"duplicate\"}")
            << ", redelivered: "
            << metric(m, "ringcast_intake_entries_total{source=\"bus\",result=\"redelivered\"}")
            << ", " << t.str() << "\n";
  EXPECT_TRUE(d.terminate().ok()) << d.output();
}

// Two daemons (two stores) pull from one durable consumer: each event is taken by one of them
// and delivered once. Then one is SIGKILLed mid-stream: what it held unacked comes back to the
// other after ack_wait; an event is then in both stores only if the killed one had accepted it
// and not acked it yet (at most its max_unacked), and every event is delivered.
TEST_F(E2eNatsIntake, TwoDaemonsOnOneDurableEachEventOnce) {
  TempDir dir("e2e-nats-two");
  TempDir nats_dir("e2e-nats-server");
  auto nats = start_nats(nats_dir);
  SinkProcess sink = verifying_sink(dir);
  DaemonOptions o;
  o.extra_toml = intake_toml(*nats, "batch = 64\nmax_unacked = 1000\n");
  Daemon a(o);
  Daemon b(o);
  ASSERT_NO_THROW(a.start());
  ASSERT_NO_THROW(b.start());
  make_endpoint(a, sink);
  make_endpoint(b, sink);
  JsPublisher pub(nats->address());

  // Phase 1: no failure. Every event in exactly one store, one 200 at the sink.
  constexpr int kFirst = 2000;
  EXPECT_EQ(pub.publish(events(0, kFirst)), 0);
  ASSERT_TRUE(wait_until([&] { return outstanding(*nats) == 0; }, scaled(30s)))
      << outstanding(*nats) << "\n"
      << a.output() << "\n"
      << b.output();
  EXPECT_GT(bus_metric(a, "read"), 0);
  EXPECT_GT(bus_metric(b, "read"), 0);
  std::map<std::string, std::string> message_of;  // event → the message id of its store
  int in_both = 0;
  std::string missing;
  // Cluster mode: an event a non-owner node took is readable once its owner took it in.
  ASSERT_TRUE(wait_until(
      [&] {  // each event looked up until found once; in_both counts each once
        for (int i = 0; i < kFirst; ++i) {
          const std::string id = event_id(i);
          if (message_of.count(id) != 0) continue;
          const std::string ma = message_id_of(a, kTenant, id);
          const std::string mb = message_id_of(b, kTenant, id);
          if (ma.empty() && mb.empty()) {
            missing = id;
            return false;
          }
          in_both += !ma.empty() && !mb.empty();
          message_of[id] = ma.empty() ? mb : ma;
        }
        return true;
      },
      scaled(20s)))
      << missing << " is in neither store";
  EXPECT_EQ(in_both, 0);
  EXPECT_EQ(bus_metric(a, "accepted") + bus_metric(b, "accepted"), kFirst);
  std::vector<std::string> want;
  for (const auto& [id, m] : message_of) want.push_back(m);
  ASSERT_TRUE(wait_until([&] { return missing_ids(sink, want).empty(); }, scaled(30s)))
      << sample(missing_ids(sink, want));
  for (const auto& m : want) EXPECT_EQ(sink_lines_for(sink, m), 1u) << m;

  // Phase 2: `a` is SIGKILLed mid-stream; `b` takes what it held once ack_wait has passed.
  constexpr int kTotal = 6000;
  const double a_read = bus_metric(a, "read");
  const double b_read = bus_metric(b, "read");
  std::thread producer([&] { pub.publish(events(kFirst, kTotal)); });
  wait_until([&] { return bus_metric(a, "read") >= a_read + 500; }, scaled(20s), 5ms);
  a.kill9();
  producer.join();
  ASSERT_TRUE(wait_until([&] { return outstanding(*nats) == 0; }, scaled(30s)))
      << outstanding(*nats) << "\n"
      << b.output();
  ASSERT_NO_THROW(a.start());  // what it accepted before dying is delivered from its store
  std::string lost;
  int both = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const std::vector<std::string> got = sink_ids_with_status(sink);
        const std::set<std::string> delivered(got.begin(), got.end());
        both = 0;
        for (int i = kFirst; i < kTotal; ++i) {
          const std::string id = event_id(i);
          const std::string ma = message_id_of(a, kTenant, id);
          const std::string mb = message_id_of(b, kTenant, id);
          both += !ma.empty() && !mb.empty();
          if ((!ma.empty() && delivered.count(ma)) || (!mb.empty() && delivered.count(mb)))
            continue;
          lost = id + (ma.empty() && mb.empty() ? " (in neither store)" : " (not delivered)");
          return false;
        }
        return true;
      },
      scaled(60s), 500ms))
      << lost << "\n"
      << sink.stats_json() << "\n"
      << a.output() << "\n"
      << b.output();
  EXPECT_LE(both, 1000) << "more events in both stores than the killed daemon could hold";
  EXPECT_EQ(outstanding(*nats), 0);
  std::cerr << "two daemons: phase 1 a read " << a_read << ", b read " << b_read << " of " << kFirst
            << "; after the kill, events in both stores " << both << ", b redelivered "
            << bus_metric(b, "redelivered") << "\n";
  EXPECT_TRUE(b.terminate().ok()) << b.output();
  EXPECT_TRUE(a.terminate().ok()) << a.output();
}

}  // namespace
}  // namespace ringcast::e2e
