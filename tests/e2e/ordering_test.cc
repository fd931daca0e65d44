// End to end: ordered delivery (SPEC R13, docs/operations.md "Ordered delivery") with real
// processes on loopback. A producer submits events with ordering keys (single and NDJSON bulk,
// retrying what was not acknowledged) to a per-key endpoint and to a whole-endpoint-ordered one,
// behind a receiver that fails now and then; the daemon is SIGKILLed and restarted meanwhile
// (in cluster mode, RINGCAST_E2E_BACKEND=cluster, every node). A cluster test kills one node and
// a Redis primary under the same load. The receiver's ids file is the judge: per (endpoint, key)
// the first 2xx of each delivery arrives in acceptance order (event seq); retries of a head may
// repeat (SPEC R13.4).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tests/e2e/cluster_rig.h"
#include "tests/e2e/daemon.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::SinkProcess;
using test::TempDir;

struct Submitted {
  std::string tenant, id, key, payload;
};

// Submits events of `tenants` with keys k0..k(keys-1) until stopped, through `post` (method,
// path, body → Reply), retrying unacknowledged ones with the same id and payload.
class OrderedProducer {
 public:
  using Post = std::function<Reply(const std::string&, const std::string&)>;
  OrderedProducer(Post post, std::vector<std::string> tenants, int keys, uint64_t seed)
      : post_(std::move(post)), tenants_(std::move(tenants)), keys_(keys), rng_(seed) {
    thread_ = std::thread([this] { run(); });
  }
  ~OrderedProducer() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Submitted> acked() {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_;
  }
  size_t requests() const { return requests_.load(); }

 private:
  static std::string line(const Submitted& s, bool with_tenant) {
    std::string out = "{";
    if (with_tenant) out += "\"tenant\":" + quote(s.tenant) + ",";
    out += "\"id\":" + quote(s.id) +
           ",\"type\":\"order.updated\",\"ordering_key\":" + quote(s.key) +
           ",\"payload\":" + s.payload + "}";
    return out;
  }
  void run() {
    while (!stop_.load()) {
      std::vector<Submitted> batch;
      const bool bulk = rng_() % 2 == 0;
      const size_t n = bulk ? 1 + rng_() % 10 : 1;
      while (batch.size() < n && !retry_.empty()) {
        batch.push_back(retry_.front());
        retry_.erase(retry_.begin());
      }
      while (batch.size() < n) {
        Submitted s;
        s.tenant = tenants_[seq_ % tenants_.size()];
        s.key = "k";  // appended: GCC 12's -Wrestrict misfires on literal + string
        s.key += std::to_string(rng_() % static_cast<uint64_t>(keys_));
        s.id = s.tenant + "-o" + std::to_string(seq_);
        s.payload = "{\"seq\":" + std::to_string(seq_) + "}";
        ++seq_;
        batch.push_back(std::move(s));
      }
      ++requests_;
      std::vector<int64_t> status(batch.size(), 0);
      if (!bulk) {
        Reply r = post_("/v1/tenants/" + batch[0].tenant + "/events", line(batch[0], false));
        status[0] = r.status;
      } else {
        std::string body;
        for (const auto& s : batch) body += line(s, true) + "\n";
        Reply r = post_("/v1/events/bulk", body);
        Json results = r.status == 200 ? r.json()["results"] : Json();
        for (size_t i = 0; i < batch.size() && results.size() == batch.size(); ++i)
          status[i] = results[i]["status"].i64();
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        if (status[i] == 200 || status[i] == 202) {
          std::lock_guard<std::mutex> lock(mu_);
          acked_.push_back(batch[i]);
        } else {
          retry_.push_back(batch[i]);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + rng_() % 5));
    }
  }

  Post post_;
  std::vector<std::string> tenants_;
  int keys_;
  std::mt19937_64 rng_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Submitted> acked_;
  std::vector<Submitted> retry_;  // producer thread only
  uint64_t seq_ = 0;
  std::atomic<size_t> requests_{0};
};

// What the judge needs of an acknowledged event: its webhook id and seq (GET .../events/{id}).
struct Known {
  std::string group;  // "<tenant>/<key>" under per_key; "<tenant>" under endpoint ordering
  uint64_t seq = 0;
};

// Checks the ids file: per group, each message id's first 2xx arrives in seq order. Returns how
// many first receipts were checked; every acknowledged one must be among them.
size_t expect_in_order(const std::vector<SinkProcess::IdLine>& lines,
                       const std::map<std::string, Known>& known) {
  std::map<std::string, uint64_t> last;
  std::set<std::string> got;
  size_t checked = 0, out_of_order = 0;
  std::string sample;
  for (const auto& l : lines) {
    if (l.status.empty() || l.status[0] != '2') continue;
    auto k = known.find(l.id);
    if (k == known.end() || !got.insert(l.id).second) continue;  // unknown, or a repeat
    ++checked;
    uint64_t& prev = last[k->second.group];
    if (k->second.seq < prev) {
      ++out_of_order;
      if (sample.empty())
        sample = l.id + " (seq " + std::to_string(k->second.seq) + ") after seq " +
                 std::to_string(prev) + " in " + k->second.group;
    }
    prev = std::max(prev, k->second.seq);
  }
  EXPECT_EQ(out_of_order, 0u) << "first receipts out of acceptance order, e.g. " << sample;
  EXPECT_EQ(got.size(), known.size()) << "acknowledged events never delivered";
  return checked;
}

// Looks up every acknowledged event through `get` (path → Reply): its seq and message id.
std::map<std::string, Known> look_up(const std::vector<Submitted>& acked,
                                     const std::map<std::string, bool>& per_key,
                                     const std::function<Reply(const std::string&)>& get) {
  std::map<std::string, Known> out;
  for (const Submitted& s : acked) {
    Reply r = get("/v1/tenants/" + s.tenant + "/events/" + s.id);
    EXPECT_EQ(r.status, 200) << r.describe();
    if (r.status != 200) continue;
    Json j = r.json();
    Json ev = j.has("event") ? j["event"] : j;
    EXPECT_EQ(ev["ordering_key"].str(), s.key);
    Known k;
    k.group = per_key.at(s.tenant) ? s.tenant + "/" + s.key : s.tenant;
    k.seq = std::stoull(ev["seq"].str());
    out[ev["message_id"].str()] = k;
  }
  return out;
}

// The judge of a run: every acknowledged event is looked up (through `get`), reaches the sink
// with a 2xx, and the first 2xx receipts are in acceptance order per group. Returns how many
// first receipts were checked (0 on a failure already reported).
size_t judge(const std::vector<Submitted>& acked, const std::map<std::string, bool>& per_key,
             const std::function<Reply(const std::string&)>& get, const SinkProcess& sink) {
  std::map<std::string, Known> known;
  wait_until(
      [&] {
        known = look_up(acked, per_key, get);
        return known.size() == acked.size();
      },
      scaled(20s), 200ms);
  EXPECT_EQ(known.size(), acked.size());
  if (known.size() != acked.size()) return 0;
  std::vector<std::string> ids;
  for (const auto& [id, k] : known) ids.push_back(id);
  EXPECT_TRUE(wait_until([&] { return missing_ids(sink, ids).empty(); }, scaled(60s), 100ms))
      << "acknowledged but never delivered: " << sample(missing_ids(sink, ids));
  return expect_in_order(sink.ids(), known);
}

TEST(E2eOrdering, PerKeyAndEndpointOrderHoldThroughKills) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ordering");
  // A receiver that fails a request now and then (the heads retry across the kills).
  SinkProcess sink = SinkProcess::start(
      {"--quiet", "--fault", "status=503:0.15;delay=0ms-3ms:0.5", "--threads", "1"}, dir.path());
  const std::map<std::string, bool> per_key = {{"ord-key", true}, {"ord-ep", false}};
  Reply a = create_endpoint(d, "ord-key",
                            "{\"url\":" + quote(sink.base_url() + "/o/key") +
                                ",\"policy\":\"steady\",\"ordering\":\"per_key\","
                                "\"on_head_failure\":\"skip\",\"max_in_flight\":8}");
  ASSERT_EQ(a.status, 201) << a.describe();
  EXPECT_EQ(a.json()["ordering"].str(), "per_key");
  Reply b = create_endpoint(d, "ord-ep",
                            "{\"url\":" + quote(sink.base_url() + "/o/ep") +
                                ",\"policy\":\"steady\",\"ordering\":\"endpoint\"}");
  ASSERT_EQ(b.status, 201) << b.describe();

  constexpr int kKills = 3;
  std::vector<Submitted> acked;
  {
    OrderedProducer producer([&](const std::string& path,
                                 const std::string& body) { return d.call("POST", path, body); },
                             {"ord-key", "ord-ep"}, 12, seed);
    for (int i = 0; i < kKills; ++i) {
      std::this_thread::sleep_for(Millis(200 + rng() % 400));
      d.kill9();
      std::this_thread::sleep_for(Millis(rng() % 50));
      ASSERT_NO_THROW(d.start()) << "restart " << i + 1;
    }
    std::this_thread::sleep_for(300ms);
    producer.stop();
    acked = producer.acked();
    EXPECT_GE(acked.size(), 40u) << "too little load (" << producer.requests() << " requests)";
  }
  const size_t checked = judge(
      acked, per_key, [&](const std::string& p) { return d.call("GET", p); }, sink);
  std::printf("[ ordering ] %d kills, %zu events acknowledged, %zu first receipts in order\n",
              kKills, acked.size(), checked);
  auto st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str();
}

// The order of first 2xx receipts of these message ids at the sink.
std::vector<std::string> first_receipts(const SinkProcess& sink, const std::set<std::string>& of) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& l : sink.ids()) {
    if (l.status == "200" && of.count(l.id) && seen.insert(l.id).second) out.push_back(l.id);
  }
  return out;
}

// on_head_failure = block (SPEC R13.2): a head that ends failed holds its key — shown by the
// ordering route and the metrics — until it is resent; then the waiting ones go first and the
// resent one after them. `supersede` (R13.3): what waits behind a failing head is replaced by
// the newest, and the replaced ones name it.
TEST(E2eOrdering, ABlockedKeyWaitsForItsResentHeadAndSupersedeKeepsTheNewest) {
  DaemonOptions o;
  o.extra_toml =
      "\n[policies.brief]\nbase = \"smengo\"\nladder = [\"50ms\"]\njitter = 0.0\n"
      "auto_disable = false\n";
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-ordering-block");
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/bad=status=500", "--fault",
                                         "/flaky=status=500;limit=6", "--threads", "1"},
                                        dir.path());
  const std::string t = "ord-block";
  Reply ep = create_endpoint(d, t,
                             "{\"url\":" + quote(sink.base_url() + "/bad") +
                                 ",\"policy\":\"brief\",\"ordering\":\"per_key\"}");
  ASSERT_EQ(ep.status, 201) << ep.describe();
  EXPECT_EQ(ep.json()["on_head_failure"].str(), "block");
  const std::string ep_id = ep.json()["id"].str();
  auto submit = [&](const std::string& id, const std::string& key) {
    Reply r = d.call(
        "POST", "/v1/tenants/" + t + "/events",
        "{\"id\":" + quote(id) +
            ",\"type\":\"order.updated\",\"payload\":{},\"ordering_key\":" + quote(key) + "}");
    EXPECT_EQ(r.status, 202) << r.describe();
  };
  submit("b1", "order-1");
  submit("b2", "order-1");
  submit("b3", "order-1");
  Json head = wait_delivery(d, t, ep_id, "b1", delivery_ended, scaled(10s));
  ASSERT_EQ(head["delivery"]["status"].str(), "failed") << head["delivery"]["status"].str();
  // The receiver is fixed; the key stays held all the same.
  Reply patch = d.call("PATCH", "/v1/tenants/" + t + "/endpoints/" + ep_id,
                       "{\"url\":" + quote(sink.base_url() + "/good") + "}");
  ASSERT_EQ(patch.status, 200) << patch.describe();
  std::this_thread::sleep_for(scaled(500ms));
  const std::set<std::string> msgs = {message_id_of(d, t, "b1"), message_id_of(d, t, "b2"),
                                      message_id_of(d, t, "b3")};
  EXPECT_TRUE(first_receipts(sink, msgs).empty());
  Reply keys = d.call("GET", "/v1/tenants/" + t + "/endpoints/" + ep_id + "/ordering");
  ASSERT_EQ(keys.status, 200) << keys.describe();
  ASSERT_EQ(keys.json()["keys"].size(), 1u) << keys.body;
  const Json k = keys.json()["keys"][0];
  EXPECT_TRUE(k["blocked"].boolean()) << keys.body;
  EXPECT_EQ(k["blocked_by"].str(), head["delivery"]["id"].str()) << keys.body;
  EXPECT_EQ(k["waiting"].i64(), 2) << keys.body;
  EXPECT_EQ(metric(scrape_metrics(d), "ringcast_order_keys_blocked"), 1.0);

  Reply resend = d.call(
      "POST", "/v1/tenants/" + t + "/deliveries/" + head["delivery"]["id"].str() + "/resend");
  ASSERT_EQ(resend.status, 202) << resend.describe();
  std::vector<std::string> got;
  ASSERT_TRUE(wait_until(
      [&] {
        got = first_receipts(sink, msgs);
        return got.size() == 3;
      },
      scaled(10s)));
  EXPECT_EQ(got, (std::vector<std::string>{message_id_of(d, t, "b2"), message_id_of(d, t, "b3"),
                                           message_id_of(d, t, "b1")}));
  Reply after = d.call("GET", "/v1/tenants/" + t + "/endpoints/" + ep_id + "/ordering");
  EXPECT_EQ(after.json()["keys"].size(), 0u) << after.body;

  // Supersede: s1's first six attempts fail (steady ladder, ~1.6 s) while s2..s4 arrive; s2 and
  // s3 end superseded (each naming the next), and s1 and then s4 arrive.
  const std::string t2 = "ord-supersede";  // its own tenant: only this endpoint gets its events
  Reply sep = create_endpoint(d, t2,
                              "{\"url\":" + quote(sink.base_url() + "/flaky") +
                                  ",\"policy\":\"steady\",\"ordering\":\"per_key\","
                                  "\"supersede\":true}");
  ASSERT_EQ(sep.status, 201) << sep.describe();
  const std::string sep_id = sep.json()["id"].str();
  auto state = [&](const std::string& id) {
    Reply r = d.call("POST", "/v1/tenants/" + t2 + "/events",
                     "{\"id\":" + quote(id) +
                         ",\"type\":\"state.changed\",\"payload\":{},\"ordering_key\":\"cart-9\"}");
    EXPECT_EQ(r.status, 202) << r.describe();
  };
  state("s1");
  ASSERT_TRUE(
      wait_until([&] { return sink_lines_for(sink, message_id_of(d, t2, "s1")) > 0; }, scaled(5s)));
  state("s2");
  state("s3");
  state("s4");
  Json s2 = wait_delivery(d, t2, sep_id, "s2", delivery_ended, scaled(5s));
  Json s3 = wait_delivery(d, t2, sep_id, "s3", delivery_ended, scaled(5s));
  EXPECT_EQ(s2["delivery"]["status"].str(), "superseded") << s2["delivery"]["status"].str();
  EXPECT_EQ(s3["delivery"]["status"].str(), "superseded") << s3["delivery"]["status"].str();
  const std::string s3_id = s3["delivery"]["id"].str();
  const std::string s4_id =
      wait_delivery(
          d, t2, sep_id, "s4", [](const Json&) { return true; }, scaled(5s))["delivery"]["id"]
          .str();
  ASSERT_EQ(history_kinds(s2), (std::vector<std::string>{"superseded"}))
      << s2["delivery"]["status"].str();
  EXPECT_EQ(s2["attempts"][0]["by"].str(), s3_id) << s2["delivery"]["status"].str();
  EXPECT_EQ(s3["attempts"][0]["by"].str(), s4_id) << s3["delivery"]["status"].str();
  const std::set<std::string> smsgs = {message_id_of(d, t2, "s1"), message_id_of(d, t2, "s2"),
                                       message_id_of(d, t2, "s3"), message_id_of(d, t2, "s4")};
  ASSERT_TRUE(wait_until([&] { return first_receipts(sink, smsgs).size() == 2; }, scaled(10s)));
  EXPECT_EQ(first_receipts(sink, smsgs),
            (std::vector<std::string>{message_id_of(d, t2, "s1"), message_id_of(d, t2, "s4")}));
  EXPECT_GE(metric(scrape_metrics(d), "ringcast_deliveries_superseded_total"), 2.0);
}

// Three nodes on a Redis Cluster: one node SIGKILLed and restarted, then the Redis primary of
// slot 0 killed (its replica promoted), under load; order holds and nothing acknowledged is lost.
TEST(E2eOrderingCluster, ANodeKillAndARedisPrimaryKillKeepEveryKeysOrder) {
  if (!test::RedisServer::available()) RINGCAST_SKIP_MISSING() << "redis-server is not installed";
  if (cluster_mode()) GTEST_SKIP() << "starts its own cluster";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rig rig(3);
  ASSERT_TRUE(wait_until([&] { return rig.converged(); }, scaled(20s), 50ms));
  const std::map<std::string, bool> per_key = {{"ordc-key", true}, {"ordc-ep", false}};
  Reply a = rig.call_any("POST", "/v1/tenants/ordc-key/endpoints",
                         "{\"url\":" + quote(rig.sink.base_url() + "/o/key") +
                             ",\"secret\":" + quote(kSecret) +
                             ",\"policy\":\"steady\",\"ordering\":\"per_key\","
                             "\"on_head_failure\":\"skip\",\"max_in_flight\":8}");
  ASSERT_EQ(a.status, 201) << a.describe();
  Reply b = rig.call_any("POST", "/v1/tenants/ordc-ep/endpoints",
                         "{\"url\":" + quote(rig.sink.base_url() + "/o/ep") + ",\"secret\":" +
                             quote(kSecret) + ",\"policy\":\"steady\",\"ordering\":\"endpoint\"}");
  ASSERT_EQ(b.status, 201) << b.describe();
  std::atomic<size_t> next{0};
  std::vector<Submitted> acked;
  {
    OrderedProducer producer(
        [&](const std::string& path, const std::string& body) {
          // Any node that is up (each takes every tenant's events, docs/cluster.md).
          for (size_t k = 0; k < rig.nodes.size(); ++k) {
            const size_t i = (next++ + k) % rig.nodes.size();
            if (rig.up[i]) return rig.nodes[i]->call_node(0, "POST", path, body);
          }
          return Reply{};
        },
        {"ordc-key", "ordc-ep"}, 12, seed);
    std::this_thread::sleep_for(600ms);
    rig.up[1] = false;
    rig.nodes[1]->kill9();
    std::this_thread::sleep_for(800ms);
    ASSERT_NO_THROW(rig.nodes[1]->start());
    rig.up[1] = true;
    std::this_thread::sleep_for(600ms);
    rig.redis->node(0).kill();
    const bool failed_over = rig.redis->wait_failover(0, 20s);
    if (failed_over) rig.redis->node(0).restart();
    ASSERT_TRUE(failed_over);
    std::this_thread::sleep_for(600ms);
    producer.stop();
    acked = producer.acked();
    EXPECT_GE(acked.size(), 40u) << "too little load (" << producer.requests() << " requests)";
  }
  const size_t checked = judge(
      acked, per_key, [&](const std::string& p) { return rig.call_any("GET", p, ""); }, rig.sink);
  std::printf(
      "[ ordering ] cluster: a node kill and a Redis primary kill, %zu events acknowledged, %zu "
      "first receipts in order\n",
      acked.size(), checked);
}

}  // namespace
}  // namespace ringcast::e2e
