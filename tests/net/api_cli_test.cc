// The `ringcast` CLI as a real child process against the REST adapter (in-process server on
// loopback with the fake engine): tables and --json, `send` with per-line results, exit codes,
// clear messages for bad flags, bad files, wrong tokens and unreachable servers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <simdjson.h>
#include <fstream>

#include "net/api/rest_api.h"
#include "tests/net/api_fake_engine.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ringcast::net::api {
namespace {

using ::testing::HasSubstr;

constexpr const char* kToken = "cli-token-1234";

std::string ringcast_binary() {
  return std::string(RINGCAST_BINARY_DIR) + "/tools/ringcast";
}

struct CliRun {
  test::ExitStatus status;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(ringcast_binary().c_str(), X_OK) != 0) {
      GTEST_SKIP() << "build the ringcast binary first: " << ringcast_binary();
    }
    RestApiOptions o;
    o.api_token = kToken;
    api_ = std::make_unique<RestApi>(engine_, o);
    server_ = std::make_unique<HttpServerThread>(*api_, HttpServerOptions{});
    ASSERT_TRUE(server_->start().ok());
    server_arg_ = "127.0.0.1:" + std::to_string(server_->port());
  }

  // Runs `ringcast args...` to completion (bounded); no config file, no RINGCAST_* leakage.
  CliRun run(std::vector<std::string> args, std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {ringcast_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    test::ProcessOptions po;
    po.stdout_path = dir_.file("out" + std::to_string(runs_));
    po.stderr_path = dir_.file("err" + std::to_string(runs_));
    runs_++;
    po.env = env;
    po.env.push_back("RINGCAST_API_TOKEN=");
    po.env.push_back("RINGCAST_TOKEN=");
    po.env.push_back("RINGCAST_SERVER=");
    po.env.push_back("RINGCAST_CONFIG=");
    test::Process p = test::Process::start(argv, po);
    auto st = p.wait(std::chrono::seconds(60));
    CliRun r;
    r.status = st ? *st : p.kill();
    r.out = test::read_file(po.stdout_path);
    r.err = test::read_file(po.stderr_path);
    return r;
  }
  // A client command with --server and --token.
  CliRun client(std::vector<std::string> args) {
    args.insert(args.end(), {"--server", server_arg_, "--token", kToken});
    return run(args);
  }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_.file(name);
    std::ofstream(path) << text;
    return path;
  }

  test::FakeEngine engine_;
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<HttpServerThread> server_;
  std::string server_arg_;
  test::TempDir dir_;
  int runs_ = 0;
  simdjson::dom::parser parser_;
};

TEST_F(CliTest, VersionAndUsageErrors) {
  CliRun r = run({"version"});
  EXPECT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ringcast 0."));
  r = run({});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("subcommand"));
  r = run({"endpoints", "list", "--server", server_arg_});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("--tenant is required"));
  r = run({"endpoints", "create", "--tenant", "acme", "--url", "https://x.example.com/",
           "--signature", "rsa"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("signature"));
  r = run({"send", dir_.file("missing.ndjson")});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("missing.ndjson"));
  r = run({"endpoints", "list", "--tenant", "acme", "--server", "https://127.0.0.1:1"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("https:// is not supported"));
}

TEST_F(CliTest, EndpointsCreateListGetPauseTestRotateDelete) {
  CliRun r = client({"endpoints", "create", "--tenant", "acme", "--url",
                     "https://hooks.example.com/a", "-e", "payment.*", "-e", "refund.completed",
                     "--policy", "xhub", "--rate", "5", "--burst", "10"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, HasSubstr("created endpoint"));
  EXPECT_THAT(r.out, HasSubstr("secret: whsec_"));
  EXPECT_THAT(r.out, HasSubstr("payment.*,refund.completed"));
  EXPECT_THAT(r.out, HasSubstr("5/s burst 10"));

  r = client({"endpoints", "create", "--tenant", "acme", "--url", "https://hooks.example.com/b",
              "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.out).get(el)) << r.out;
  std::string_view id_view;
  ASSERT_FALSE(el["id"].get(id_view));
  std::string id(id_view);

  r = client({"endpoints", "list", "--tenant", "acme"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ID"));
  EXPECT_THAT(r.out, HasSubstr("https://hooks.example.com/a"));
  EXPECT_THAT(r.out, HasSubstr("https://hooks.example.com/b"));

  r = client({"endpoints", "pause", "--tenant", "acme", id});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("paused"));
  r = client({"endpoints", "get", "--tenant", "acme", id, "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr(R"("state":"paused")"));
  r = client({"endpoints", "test", "--tenant", "acme", id});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("test event queued as delivery"));
  r = client({"endpoints", "rotate", "--tenant", "acme", id, "--secret", "new-one"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("previous secret keeps signing until"));
  r = client({"endpoints", "delete", "--tenant", "acme", id});
  ASSERT_TRUE(r.status.ok()) << r.err;
  r = client({"endpoints", "get", "--tenant", "acme", id});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("404 unknown_endpoint"));

  r = client({"endpoints", "create", "--tenant", "acme", "--url", "http://hooks.example.com/a"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("422 not_https"));
  EXPECT_THAT(r.err, HasSubstr("field: url"));
}

TEST_F(CliTest, EndpointsUpdateSendsOnlyTheGivenFields) {
  CliRun r = client({"endpoints", "create", "--tenant", "acme", "--url",
                     "https://hooks.example.com/a", "-e", "payment.*", "--rate", "5", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.out).get(el)) << r.out;
  std::string_view id_view;
  ASSERT_FALSE(el["id"].get(id_view));
  const std::string id(id_view);

  r = client({"endpoints", "update", "--tenant", "acme", id, "--url", "https://hooks.example.com/b",
              "--max-in-flight", "7"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, HasSubstr("updated endpoint " + id));
  EXPECT_THAT(r.out, HasSubstr("https://hooks.example.com/b"));
  EXPECT_THAT(r.out, HasSubstr("payment.*"));  // untouched
  EXPECT_THAT(r.out, HasSubstr("5/s burst"));  // untouched
  r = client({"endpoints", "update", "--tenant", "acme", id, "--all-events", "--rate", "0",
              "--burst", "0", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  ASSERT_FALSE(parser_.parse(r.out).get(el)) << r.out;
  simdjson::dom::array types;
  ASSERT_FALSE(el["event_types"].get(types)) << r.out;
  EXPECT_EQ(types.size(), 0u);
  EXPECT_EQ(el["max_in_flight"].get_int64().value(), 7);
  EXPECT_THAT(r.out, HasSubstr(R"("url":"https://hooks.example.com/b")"));

  r = client({"endpoints", "update", "--tenant", "acme", id});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("nothing to update"));
  r = client({"endpoints", "update", "--tenant", "acme", id, "--all-events", "-e", "x"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("cannot be combined"));
  r = client({"endpoints", "update", "--tenant", "acme", id, "--url", "http://hooks.example.com/"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("not_https"));
}

TEST_F(CliTest, TenantBreakerSubscriptionAndNotifications) {
  engine_.open_breaker();
  CliRun r = client({"tenant", "breaker", "--tenant", "acme"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, HasSubstr("open"));
  EXPECT_THAT(r.out, HasSubstr("9 failed of 10"));
  r = client({"tenant", "breaker-reset", "--tenant", "acme"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("reset"));
  EXPECT_THAT(r.out, HasSubstr("closed"));
  r = client({"tenant", "breaker", "--tenant", "acme", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr(R"("state":"closed")"));

  r = client({"tenant", "subscription", "--tenant", "acme", "--active", "false"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("inactive"));
  EXPECT_EQ(engine_.subscription("acme"), std::optional<bool>(false));
  r = client({"tenant", "subscription", "--tenant", "acme", "--active", "true"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_EQ(engine_.subscription("acme"), std::optional<bool>(true));
  r = client({"tenant", "subscription", "--tenant", "acme", "--active", "maybe"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("active"));

  r = client({"tenant", "notifications", "--tenant", "acme"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no notifications for tenant acme"));
  engine_.seed_delivery_log();
  r = client({"tenant", "notifications", "--tenant", "acme"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("endpoint_disabled"));
  EXPECT_THAT(r.out, HasSubstr("endpoint answered 410 Gone"));
  r = client({"tenant", "breaker", "--tenant", "ghost"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("404"));
}

TEST_F(CliTest, WrongTokenAndUnreachableServerAreClearErrors) {
  CliRun r =
      run({"endpoints", "list", "--tenant", "acme", "--server", server_arg_, "--token", "nope"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("401 unauthorized"));
  EXPECT_THAT(r.err, HasSubstr("--token"));
  // The token can come from the environment, as the daemon's does.
  r = run({"endpoints", "list", "--tenant", "acme", "--server", server_arg_},
          {std::string("RINGCAST_TOKEN=") + kToken});
  EXPECT_TRUE(r.status.ok()) << r.err;

  uint16_t dead = test::free_tcp_port();
  r = run({"endpoints", "list", "--tenant", "acme", "--server", "127.0.0.1:" + std::to_string(dead),
           "--token", kToken});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot connect"));
}

TEST_F(CliTest, SendStreamsBatchesAndReportsPerLine) {
  std::string text;
  const int kLines = 2500;
  for (int i = 1; i <= kLines; ++i) {
    if (i == 700) {
      text += "{\"tenant\":\"acme\",\"id\":\"e" + std::to_string(i) +
              "\",\"type\":\"t\"}\n";  // no payload
    } else if (i == 250) {             // same batch as line 1: answered in order
      text += "{\"tenant\":\"acme\",\"id\":\"e1\",\"type\":\"t\",\"payload\":{\"other\":true}}\n";
    } else if (i == 2000) {
      text += "\n";  // blank lines are skipped
    } else {
      text += "{\"tenant\":\"acme\",\"id\":\"e" + std::to_string(i) +
              "\",\"type\":\"t\",\"payload\":{\"n\":" + std::to_string(i) + "}}\n";
    }
  }
  std::string path = write("events.ndjson", text);
  CliRun r = client({"send", path, "--batch", "300", "-c", "3", "--json"});
  EXPECT_EQ(r.status.code, 2) << r.status.str() << r.err;  // some lines were rejected
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.out).get(el)) << r.out;
  int64_t v = -1;
  EXPECT_FALSE(el["events"].get(v));
  EXPECT_EQ(v, kLines - 1);
  EXPECT_FALSE(el["accepted"].get(v));
  EXPECT_EQ(v, kLines - 3);
  EXPECT_FALSE(el["conflicts"].get(v));
  EXPECT_EQ(v, 1);
  EXPECT_FALSE(el["errors"].get(v));
  EXPECT_EQ(v, 1);
  EXPECT_THAT(r.err, HasSubstr("line 700: 400 missing_field"));
  EXPECT_THAT(r.err, HasSubstr("line 250: 409 conflict"));
  EXPECT_THAT(r.err, HasSubstr("2 of 2499 events were not accepted"));
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.submitted.size(), static_cast<size_t>(kLines - 2));
    EXPECT_GE(engine_.batches, 9u);
  }

  // Again: everything is a duplicate now (idempotent intake), human summary.
  std::string clean;
  for (int i = 1; i <= 10; ++i) {
    clean += "{\"tenant\":\"acme\",\"id\":\"e" + std::to_string(i) +
             "\",\"type\":\"t\",\"payload\":{\"n\":" + std::to_string(i) + "}}\n";
  }
  r = client({"send", write("again.ndjson", clean), "--quiet"});
  EXPECT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sent 10 events"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("duplicates +10"));
}

TEST_F(CliTest, SendResendsLinesTheServerCouldNotTakeYet) {
  {
    std::lock_guard lock(engine_.mu());
    engine_.unavailable_next = 3;  // lines 1-3 of the first request: 503 shutting_down
  }
  std::string text;
  for (int i = 1; i <= 10; ++i) {
    text += "{\"tenant\":\"acme\",\"id\":\"r" + std::to_string(i) +
            "\",\"type\":\"t\",\"payload\":{\"n\":" + std::to_string(i) + "}}\n";
  }
  CliRun r = client({"send", write("retry.ndjson", text), "--json", "--quiet"});
  EXPECT_TRUE(r.status.ok()) << r.status.str() << r.err;
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.out).get(el)) << r.out;
  int64_t v = -1;
  EXPECT_FALSE(el["accepted"].get(v));
  EXPECT_EQ(v, 10);
  EXPECT_FALSE(el["errors"].get(v));
  EXPECT_EQ(v, 0);
  EXPECT_FALSE(el["retries"].get(v));
  EXPECT_GE(v, 1);
  std::lock_guard lock(engine_.mu());
  ASSERT_EQ(engine_.submitted.size(), 13u);  // the 3 refused lines came again, alone
  for (size_t i = 10; i < 13; ++i) EXPECT_EQ(engine_.submitted[i].id, "r" + std::to_string(i - 9));
}

TEST_F(CliTest, SendStopsOnAWrongToken) {
  std::string path = write("one.ndjson", R"({"tenant":"acme","id":"x","type":"t","payload":{}})");
  CliRun r = run({"send", path, "--server", server_arg_, "--token", "bad", "--quiet"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("401"));
}

TEST_F(CliTest, DeliveriesCommands) {
  {
    std::lock_guard lock(engine_.mu());
    DeliveryDetail d;
    d.tenant = "acme";
    d.delivery.id = 4242;
    d.delivery.endpoint = 7;
    d.delivery.status = DeliveryStatus::kFailed;
    d.delivery.attempts = 1;
    d.delivery.last_code = ErrorCode::http(503);
    Attempt a;
    a.number = 1;
    a.code = ErrorCode::http(503);
    a.http_status = 503;
    a.response_prefix = "upstream busy";
    d.attempts.push_back(a);
    engine_.deliveries[d.delivery.id] = d;
  }
  CliRun r =
      client({"deliveries", "list", "--tenant", "acme", "--state", "failed", "--limit", "5"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("4242"));
  EXPECT_THAT(r.out, HasSubstr("http_503"));
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_list.status, DeliveryStatus::kFailed);
    EXPECT_EQ(engine_.last_list.limit, 5u);
  }
  r = client({"deliveries", "get", "--tenant", "acme", "4242"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("upstream busy"));
  r = client({"deliveries", "recent", "--tenant", "acme", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"deliveries\""));
  r = client({"deliveries", "list", "--tenant", "acme", "--state", "lost"});
  EXPECT_NE(r.status.code, 0);
}

TEST_F(CliTest, ConfigCheckAndPrint) {
  std::string good =
      write("good.toml", "[server]\nlisten = \"127.0.0.1:0\"\napi_token = \"s3cret\"\n");
  CliRun r = run({"config", "check", "--config", good});
  EXPECT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("config ok"));
  r = run({"config", "print", "--config", good});
  EXPECT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("api_token = \"***\""));
  EXPECT_EQ(r.out.find("s3cret"), std::string::npos);
  r = run({"config", "print", "--config", good}, {"RINGCAST_ENGINE_FAIRNESS_CAP=7"});
  EXPECT_THAT(r.out, HasSubstr("fairness_cap = 7"));

  std::string bad = write("bad.toml", "[engine]\nfairness_cap = -1\n");
  r = run({"config", "check", "--config", bad});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("engine.fairness_cap"));
  EXPECT_THAT(r.err, HasSubstr("bad.toml:2"));
  r = run({"config", "check", "--config", dir_.file("none.toml")});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("none.toml"));
}

}  // namespace
}  // namespace ringcast::net::api
