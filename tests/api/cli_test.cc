// The `ringcast` CLI as a real child process against the REST adapter (in-process server on
// loopback with the fake engine): tables and --json, `send` with per-line results, exit codes,
// clear messages for bad flags, bad files, wrong tokens and unreachable servers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <simdjson.h>
#include <fstream>
#include <mutex>
#include <string>

#include "api/rest_api.h"
#include "tests/api/fake_engine.h"
#include "tests/support/memory_store.h"
#include "tests/support/process.h"
#include "tests/support/require.h"
#include "tests/support/temp_dir.h"

namespace ringcast::api {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
      RINGCAST_SKIP_MISSING() << "build the ringcast binary first: " << ringcast_binary();
    }
    RestApiOptions o;
    o.api_token = kToken;
    o.portal.secret = "cli-test-portal-secret-0123456789abcdef";
    ASSERT_TRUE(keys_.start().ok());
    o.keys = &keys_;
    api_ = std::make_unique<RestApi>(engine_, o);
    server_ = std::make_unique<net::HttpServerThread>(*api_, net::HttpServerOptions{});
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
  MemoryStore key_store_;
  KeyRegistry keys_{KeyRegistryOptions{&key_store_, Duration::zero()}};
  std::unique_ptr<RestApi> api_;
  std::unique_ptr<net::HttpServerThread> server_;
  std::string server_arg_;
  test::TempDir dir_;
  int runs_ = 0;
  // The "id" of an endpoint the CLI printed as JSON; "" (and a failure) when there is none.
  std::string id_in(const std::string& out) {
    simdjson::dom::element el;
    std::string_view id;
    EXPECT_FALSE(parser_.parse(out).get(el)) << out;
    EXPECT_FALSE(el["id"].get(id)) << out;
    return std::string(id);
  }

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
  r = run({"endpoints", "list", "--tenant", "acme", "--server", "https://127.0.0.1:1/x"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--server"));
  r = run({"endpoints", "list", "--tenant", "acme", "--server", "https://127.0.0.1:1", "--cacert",
           dir_.file("missing-ca.pem")});
  EXPECT_EQ(r.status.code, 1);  // nothing listens there: a clear connect error
  EXPECT_THAT(r.err, HasSubstr("cannot connect"));
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
  std::string id = id_in(r.out);
  ASSERT_FALSE(id.empty()) << r.out;

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
  const std::string id = id_in(r.out);
  ASSERT_FALSE(id.empty()) << r.out;

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
  simdjson::dom::element el;
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

// Extra headers (operations.md "Endpoints"): --header 'Name: value' (repeatable) and
// --idempotency-key; an update replaces the whole set, --no-headers / --no-idempotency-key clear
// them; the API's 400 naming a reserved header reaches the user.
TEST_F(CliTest, EndpointHeadersAndIdempotencyKey) {
  CliRun r = client({"endpoints", "create", "--tenant", "acme", "--url",
                     "https://hooks.example.com/h", "--header", "X-Tenant: acme", "-H",
                     "Authorization:Bearer t0k", "--idempotency-key", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  // A receiver credential is write-only (SPEC R14.5): named, its value null.
  EXPECT_THAT(r.out, HasSubstr(R"("headers":{"X-Tenant":"acme","Authorization":null})"));
  EXPECT_THAT(r.out, Not(HasSubstr("t0k")));
  EXPECT_THAT(r.out, HasSubstr(R"("idempotency_key":true)"));
  const std::string id = id_in(r.out);
  ASSERT_FALSE(id.empty()) << r.out;

  r = client({"endpoints", "get", "--tenant", "acme", id});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("X-Tenant: acme"));
  EXPECT_THAT(r.out, HasSubstr("Authorization: (write-only)"));
  EXPECT_THAT(r.out, Not(HasSubstr("t0k")));
  EXPECT_THAT(r.out, HasSubstr("idempotency key"));

  // The id may follow --header: one value per flag.
  r = client({"endpoints", "update", "--tenant", "acme", "--header", "X-New: 1", id,
              "--no-idempotency-key", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr(R"("headers":{"X-New":"1"})"));
  EXPECT_THAT(r.out, HasSubstr(R"("idempotency_key":false)"));
  r = client({"endpoints", "update", "--tenant", "acme", id, "--no-headers", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr(R"("headers":{})"));

  r = client({"endpoints", "update", "--tenant", "acme", id, "--header", "Host: evil"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("reserved_header"));
  EXPECT_THAT(r.err, HasSubstr("field: headers.Host"));
  r = client({"endpoints", "update", "--tenant", "acme", id, "--header", "no colon"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("Name: value"));
  r = client({"endpoints", "update", "--tenant", "acme", id, "--header", "X: 1", "--no-headers"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("cannot be combined"));
}

// Ordered delivery (SPEC R13): --ordering, --on-head-failure and --supersede on create and update
// (shown in the endpoint table), `endpoints ordering` lists the blocked and backlogged keys, and
// `send --ordering-key` puts the key into every line.
TEST_F(CliTest, OrderedDeliveryFlagsTheOrderingKeysAndSendWithAKey) {
  CliRun r = client({"endpoints", "create", "--tenant", "acme", "--url",
                     "https://hooks.example.com/o", "--ordering", "per_key", "--on-head-failure",
                     "skip", "--supersede", "true", "--json"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out,
              HasSubstr(R"("ordering":"per_key","on_head_failure":"skip","supersede":true)"));
  const std::string id = id_in(r.out);
  ASSERT_FALSE(id.empty()) << r.out;

  r = client({"endpoints", "update", "--tenant", "acme", id, "--ordering", "endpoint",
              "--supersede", "false"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("ordering +endpoint"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("on head failure +skip"));  // untouched
  EXPECT_THAT(r.out, ::testing::ContainsRegex("supersede +false"));
  r = client({"endpoints", "update", "--tenant", "acme", id, "--ordering", "sideways"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("ordering"));
  r = client({"endpoints", "create", "--tenant", "acme", "--url", "https://hooks.example.com/p",
              "--supersede", "yes"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("supersede"));

  r = client({"endpoints", "ordering", "--tenant", "acme", id});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, HasSubstr("no blocked or backlogged ordering keys on endpoint " + id));
  const DeliveryId blocker = (uint64_t{9} << 48) | 7;
  {
    std::lock_guard lock(engine_.mu());
    OrderKeyView k;
    k.order_key = 0xab;
    k.blocked = true;
    k.blocked_by = blocker;
    k.waiting = 3;
    k.first_waiting = blocker + 1;
    engine_.order_key_views = {k};
  }
  r = client({"endpoints", "ordering", "--tenant", "acme", id, "--limit", "5"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, HasSubstr("BLOCKED BY"));
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex("00000000000000ab +- +yes +" + std::to_string(blocker) +
                                       " +- +3 +" + std::to_string(blocker + 1)));
  {
    std::lock_guard lock(engine_.mu());
    EXPECT_EQ(engine_.last_order_keys_limit, 5u);
  }
  r = client({"endpoints", "ordering", "--tenant", "acme", id, "--json"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr(R"("order_key":"00000000000000ab")"));
  r = client({"endpoints", "ordering", "--tenant", "acme", "12345"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("404 unknown_endpoint"));

  const std::string path =
      write("ordered.ndjson",
            "{\"tenant\":\"acme\",\"id\":\"k1\",\"type\":\"t\",\"payload\":{}}\n"
            "  { \"tenant\":\"acme\",\"id\":\"k2\",\"type\":\"t\",\"payload\":{\"n\":2}}\n");
  r = client({"send", path, "--ordering-key", "order \"42\"", "--quiet"});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  {
    std::lock_guard lock(engine_.mu());
    ASSERT_EQ(engine_.submitted.size(), 2u);
    EXPECT_EQ(engine_.submitted[0].ordering_key, "order \"42\"");
    EXPECT_EQ(engine_.submitted[1].ordering_key, "order \"42\"");
    EXPECT_EQ(engine_.submitted[1].payload, "{\"n\":2}");
  }
  r = client({"send", path, "--ordering-key", std::string(257, 'k'), "--quiet"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--ordering-key"));
  std::lock_guard lock(engine_.mu());
  EXPECT_EQ(engine_.submitted.size(), 2u);
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
  std::string good = write(
      "good.toml",
      "[server]\nlisten = \"127.0.0.1:0\"\napi_token = \"s3cret-0123456789abcdef0123456789ab\"\n");
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

// `ringcast cluster status` against the REST adapter serving a fixed GET /v1/cluster body (the
// shape of cluster/status_json.h): the table (members with this node's share, owned partitions
// as ranges, epochs min..max), --json as served, and a single node's 404 not_cluster.
TEST_F(CliTest, ClusterStatus) {
  // The fixture's API has no cluster_status: a single node.
  CliRun r = client({"cluster", "status"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_EQ(r.err, "ringcast: this node does not run in cluster mode\n");
  EXPECT_EQ(r.out, "");
  r = client({"cluster", "status", "--json"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_EQ(r.err, "ringcast: this node does not run in cluster mode\n");

  std::mutex mu;
  std::string body =
      R"({"node_id":"node-bb","synced":true,"members":[{"node_id":"node-a","assigned":86},)"
      R"({"node_id":"node-bb","assigned":85},{"node_id":"node-c","assigned":85}],"owned":[)"
      R"({"partition":0,"epoch":3},{"partition":1,"epoch":3},{"partition":2,"epoch":4},)"
      R"({"partition":3,"epoch":3},{"partition":7,"epoch":5},{"partition":9,"epoch":3},)"
      R"({"partition":10,"epoch":3},{"partition":11,"epoch":3},{"partition":12,"epoch":3},)"
      R"({"partition":20,"epoch":2},{"partition":21,"epoch":2},)"
      R"({"partition":255,"epoch":1}],"owned_count":12,"releasing":1,)"
      R"("redis_nodes":["127.0.0.1:7000","127.0.0.1:7001"],"counters":{"acquired":11,)"
      R"("released":1,"lost":0,"fenced":2,"acquire_refused":3,"renewals":400,"redis_errors":5}})";
  RestApiOptions o;
  o.api_token = kToken;
  o.cluster_status = [&mu, &body] {
    std::lock_guard<std::mutex> lock(mu);
    return body;
  };
  RestApi api(engine_, o);
  net::HttpServerThread server(api, net::HttpServerOptions{});
  ASSERT_TRUE(server.start().ok());
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());

  r = run({"cluster", "status", "--server", addr, "--token", kToken});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_EQ(r.out,
            "node:        node-bb\n"
            "synced:      yes\n"
            "members:     3\n"
            "  node-a   assigned 86\n"
            "  node-bb  assigned 85  (this node: owns 12, releasing 1)\n"
            "  node-c   assigned 85\n"
            "partitions owned (12): 0-3,7,9-12,20-21,255\n"
            "epochs:      1..5\n"
            "redis nodes: 127.0.0.1:7000, 127.0.0.1:7001\n"
            "counters:    acquired 11  released 1  lost 0  fenced 2  acquire_refused 3  "
            "renewals 400  redis_errors 5\n");
  r = run({"cluster", "status", "--json", "--server", addr, "--token", kToken});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_EQ(r.out, body + "\n");

  // Every other partition, one epoch, not synced, this node not (yet) among the members: the
  // ranges wrap at 100 columns and every partition is listed once.
  std::string owned;
  std::string want_parts;
  for (int p = 0; p < 256; p += 2) {
    // Piece by piece: `"literal" + std::string` trips GCC 12's false -Wrestrict at -O3.
    if (!owned.empty()) owned += ',';
    owned += R"({"partition":)";
    owned += std::to_string(p);
    owned += R"(,"epoch":7})";
    if (!want_parts.empty()) want_parts += ',';
    want_parts += std::to_string(p);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    body = R"({"node_id":"n1","synced":false,"members":[],"owned":[)" + owned +
           R"(],"owned_count":128,"releasing":0,"redis_nodes":[],"counters":{}})";
  }
  r = run({"cluster", "status", "--server", addr, "--token", kToken});
  ASSERT_TRUE(r.status.ok()) << r.status.str() << r.err;
  EXPECT_THAT(r.out, HasSubstr("synced:      no"));
  EXPECT_THAT(r.out, HasSubstr("members:     0\n  (this node is not in the member list: owns "
                               "128, releasing 0)\n"));
  EXPECT_THAT(r.out, HasSubstr("epochs:      all 7\n"));
  EXPECT_THAT(r.out, HasSubstr("redis nodes: -\n"));
  EXPECT_THAT(r.out, HasSubstr("counters:    acquired 0  released 0"));
  const size_t from = r.out.find("partitions owned (128): ");
  const size_t to = r.out.find("epochs:");
  ASSERT_NE(from, std::string::npos) << r.out;
  ASSERT_NE(to, std::string::npos) << r.out;
  std::string listed = r.out.substr(from, to - from);
  size_t lines = 0;
  for (size_t pos = 0, nl; (nl = listed.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    EXPECT_LE(nl - pos, 100u) << listed;
    ++lines;
  }
  EXPECT_GT(lines, 1u) << listed;
  listed = listed.substr(std::string("partitions owned (128): ").size());
  std::string joined;
  for (char ch : listed)
    if (ch != ' ' && ch != '\n') joined += ch;
  EXPECT_EQ(joined, want_parts);

  // Not the ringcast answer shape: said so, exit 1.
  {
    std::lock_guard<std::mutex> lock(mu);
    body = R"({"node_id":"n1"})";
  }
  r = run({"cluster", "status", "--server", addr, "--token", kToken});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("unexpected answer"));

  // Wrong token and an unreachable daemon: the usual errors.
  r = run({"cluster", "status", "--server", addr, "--token", "nope"});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("401 unauthorized"));
  const uint16_t dead = test::free_tcp_port();
  r = run(
      {"cluster", "status", "--server", "127.0.0.1:" + std::to_string(dead), "--token", kToken});
  EXPECT_EQ(r.status.code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot connect"));
}

// SPEC R14: `ringcast keys create|list|revoke` and `ringcast portal link`.
TEST_F(CliTest, KeysAreMadeListedAndRevokedAndAPortalLinkIsMinted) {
  CliRun r = client({"keys", "create", "-t", "acme", "--name", "ci", "--read-only"});
  ASSERT_EQ(r.status.code, 0) << r.err;
  const size_t at = r.out.find("rck_");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string key = r.out.substr(at, 4 + 16 + 1 + 64);
  EXPECT_EQ(keys_.check(key, WallTime::from_ns(1)).check, KeyCheck::kOk) << key;
  EXPECT_THAT(r.out, HasSubstr("read_only"));
  const std::string id = key.substr(4, 16);

  r = client({"keys", "list", "-t", "acme"});
  ASSERT_EQ(r.status.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rck_" + id));
  EXPECT_EQ(r.out.find(key.substr(21)), std::string::npos) << "the secret is never listed";
  r = client({"keys", "list", "-t", "zeta"});
  EXPECT_THAT(r.out, HasSubstr("no keys for tenant zeta"));

  r = client({"keys", "revoke", "-t", "acme", id});
  ASSERT_EQ(r.status.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("revoked"));
  EXPECT_EQ(keys_.check(key, WallTime::from_ns(1)).check, KeyCheck::kUnknown);
  r = client({"keys", "revoke", "-t", "acme", id});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("unknown_key"));
  r = client({"keys", "create", "-t", "acme", "--expires-at", "tomorrow"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_THAT(r.err, HasSubstr("expires_at"));

  r = client({"portal", "link", "-t", "acme", "--scope", "view", "--ttl-seconds", "60"});
  ASSERT_EQ(r.status.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("/portal/#link="));
  EXPECT_THAT(r.out, HasSubstr("view"));
  r = client({"portal", "link", "-t", "acme", "--scope", "admin"});
  EXPECT_NE(r.status.code, 0);
}

}  // namespace
}  // namespace ringcast::api
