// One node as a library (node/node.h): its parts start in order and stop in the reverse one;
// a part that does not start stops what started before it and closes the store. Cluster mode's
// node is the one every e2e cluster test runs (`ringcast serve` is a Node).
#include "node/node.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "engine/config.h"
#include "node/services.h"
#include "tests/net/http_test_client.h"
#include "tests/support/temp_dir.h"

namespace ringcast::node {
namespace {

TEST(NodeServices, StopInTheReverseOfTheirStartEachOnce) {
  std::vector<std::string> log;
  Services s;
  for (const char* name : {"store", "engine", "api"}) {
    ASSERT_TRUE(s.start(
                     name,
                     [&, name] {
                       log.push_back(std::string("start ") + name);
                       return ok();
                     },
                     [&, name] { log.push_back(std::string("stop ") + name); })
                    .ok());
  }
  Result<void> refused = s.start(
      "http", [] { return Result<void>(make_error(Errc::kUnavailable, "port in use")); },
      [&] { log.push_back("stop http"); });
  ASSERT_FALSE(refused.ok());
  EXPECT_STREQ(refused.error().message, "port in use");
  EXPECT_EQ(s.running(), (std::vector<std::string>{"store", "engine", "api"}));
  s.stop_all();
  s.stop_all();
  EXPECT_EQ(log, (std::vector<std::string>{"start store", "start engine", "start api", "stop api",
                                           "stop engine", "stop store"}));
  EXPECT_TRUE(s.running().empty());
}

// A config of one RocksDB node on loopback, its listeners on ports the kernel picks.
Config node_config(const std::string& data_dir, const std::string& metrics_listen) {
  std::string toml =
      "[server]\nlisten = \"127.0.0.1:0\"\n"
      "api_token = \"node-test-token-0123456789abcdefghijklmnop\"\n";
  if (!metrics_listen.empty()) toml += "metrics_listen = \"" + metrics_listen + "\"\n";
  toml += "[storage]\ndata_dir = \"" + data_dir + "\"\n[engine]\nshards = 1\n";
  return load_config_from_string(toml, {}, "node-test.toml");
}

TEST(Node, OpensServesAndStops) {
  test::TempDir dir("ringcast-node");
  std::string why;
  auto opened = Node::open(node_config(dir.file("data"), "127.0.0.1:0"), {}, why);
  ASSERT_TRUE(opened.ok()) << why;
  std::unique_ptr<Node> node = std::move(*opened);
  const NodeInfo& info = node->info();
  EXPECT_GT(info.port, 0);
  EXPECT_EQ(info.listen_address, "127.0.0.1");
  EXPECT_EQ(info.shards, 1u);
  EXPECT_EQ(info.data, dir.file("data"));
  ASSERT_FALSE(info.metrics_address.empty());
  EXPECT_TRUE(info.node_id.empty()) << "not a cluster node";

  test::TestClient api(info.port);
  EXPECT_EQ(api.request("GET", "/healthz").status, 200);
  const uint16_t metrics_port = static_cast<uint16_t>(
      std::stoi(info.metrics_address.substr(info.metrics_address.find(':') + 1)));
  test::TestClient scraper(metrics_port);
  const test::ClientResponse m = scraper.request("GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("ringcast_store_bytes{part="), std::string::npos) << "the store's gauges";
  EXPECT_NE(node->metrics_text().find("ringcast_events_accepted_total"), std::string::npos);
  EXPECT_FALSE(node->store_failed());

  node->stop();
  node->stop();  // idempotent
  EXPECT_NE(test::TestClient(info.port, 500).request("GET", "/healthz").status, 200)
      << "the listener is closed";
  // The store is closed: another node opens the same data dir (RocksDB's lock is free).
  auto again = Node::open(node_config(dir.file("data"), ""), {}, why);
  EXPECT_TRUE(again.ok()) << why;
}

TEST(Node, APartThatDoesNotStartStopsWhatStartedAndClosesTheStore) {
  test::TempDir dir("ringcast-node");
  // The metrics listener's port is taken: the last part to start fails.
  const int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(busy, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(busy, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));

  std::string why;
  auto refused = Node::open(node_config(dir.file("data"), taken), {}, why);
  ::close(busy);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(why.find("cannot listen on " + taken + " (server.metrics_listen)"), std::string::npos)
      << why;
  // What started before it (the engine on the store, the API's listener) was stopped and the
  // store closed: the data dir opens again.
  why.clear();
  auto opened = Node::open(node_config(dir.file("data"), ""), {}, why);
  ASSERT_TRUE(opened.ok()) << why;
}

}  // namespace
}  // namespace ringcast::node
