// End to end, the HTTP API's OpenAPI 3.1 document (docs/openapi.yaml) against what the daemon
// does, with the npm tooling of tests/openapi:
//   - lint.mjs: the OpenAPI validator, then the house rules (an operationId and a summary per
//     operation, a schema for every JSON body, the shared error shape of docs/operations.md §1
//     "Errors", declared path parameters, 401 on every route that needs a credential) and the
//     route table of api/routes.cc, route for route;
//   - types.mjs: TypeScript types made by openapi-typescript, and tests/openapi/sdk-seed.ts (a
//     typed client) compiled against them with tsc --noEmit --strict;
//   - contract.mjs: a daemon and a sink on loopback; every route and every documented status is
//     driven, and each answer checked against the document (status documented, Content-Type,
//     the body valid against the documented schema); a documented status nobody provoked fails
//     unless the script names it not drivable, with the reason; GET /v1/openapi.json must be the
//     document itself.
// The first two read only the document and run once (single node); the contract runs in both
// storage modes (RINGCAST_E2E_CLUSTER_SUITES, tests/CMakeLists.txt): in cluster mode the script
// gets every node's URL and retries 503 not_owner on the next node, as tests/e2e/daemon.h does.
//
// Needs node and the npm packages that tests/openapi/setup.sh installs into <build>/openapi-node
// (tools/test.sh runs it before ctest; the install script installs nodejs and npm). When one is
// missing the test is skipped with the command to run; under CI=true it fails instead.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/require.h"

namespace ringcast::e2e {
namespace {

using test::Process;
using test::ProcessOptions;
using test::SinkProcess;
using test::TempDir;

// server.auth_failures_per_minute for the contract's daemon: the script provokes 429
// too_many_auth_failures with as many failures from a loopback address of its own (the
// fixture's 100000 would take too long); its other deliberate 401s change address every 20.
constexpr int kAuthFailuresPerMinute = 200;

// The first "node" on PATH ("" when there is none).
std::string find_node() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t colon = p.find(':', start);
    const std::string dir =
        p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string cand = dir.empty() ? std::string(".") : dir;
    cand += "/node";
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

// "KEY=value" (built by appends: GCC 12's -O3 warns falsely on "literal" + std::string).
std::string kv(const char* key, const std::string& value) {
  std::string s(key);
  s += '=';
  s += value;
  return s;
}

std::string source_path(const char* rel) {
  std::string p(RINGCAST_SOURCE_DIR);
  p += '/';
  p += rel;
  return p;
}

struct ScriptRun {
  test::ExitStatus status;
  std::string out, err;
  // "<status>\n--- stdout\n...\n--- stderr\n..." for assertion messages.
  std::string describe() const {
    std::string s = status.str();
    s += "\n--- stdout\n";
    s += out;
    s += "\n--- stderr\n";
    s += err;
    return s;
  }
};

class E2eOpenApi : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = find_node();
    const std::string how =
        " (bash tools/install-deps.sh test installs nodejs and npm; then tests/openapi/setup.sh "
        "<build>/openapi-node — tools/test.sh does both, so CI runs this test)";
    if (node_.empty()) RINGCAST_SKIP_MISSING() << "node is not installed" << how;
    for (const char* pkg : {"@apidevtools/swagger-parser", "ajv", "ajv-formats", "js-yaml",
                            "openapi-typescript", "typescript"}) {
      std::string f = node_dir_;
      f += "/node_modules/";
      f += pkg;
      f += "/package.json";
      if (!std::filesystem::exists(f)) {
        RINGCAST_SKIP_MISSING() << "npm package " << pkg << " is not installed in " << node_dir_
                                << how;
      }
    }
  }

  // `node <script> args...` with `env` (and the package dir), bounded by `timeout`; its output
  // goes to files in `dir` named after `name`.
  ScriptRun run(const char* script, std::vector<std::string> args, std::vector<std::string> env,
                const TempDir& dir, const std::string& name, Millis timeout) const {
    std::vector<std::string> argv{node_, source_path(script)};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessOptions po;
    po.cwd = dir.path();
    po.stdout_path = dir.file(name + ".out");
    po.stderr_path = dir.file(name + ".err");
    env.push_back(kv("RINGCAST_OPENAPI_NODE_DIR", node_dir_));
    po.env = std::move(env);
    Process p = Process::start(std::move(argv), po);
    std::optional<test::ExitStatus> st = p.wait(timeout);
    if (!st) st = p.kill();
    return ScriptRun{*st, test::read_file(po.stdout_path), test::read_file(po.stderr_path)};
  }

  std::string node_;
  const std::string node_dir_ = std::string(RINGCAST_BINARY_DIR) + "/openapi-node";
  const std::string doc_ = source_path("docs/openapi.yaml");
};

// The document is valid OpenAPI 3.1, keeps the house rules and has exactly the routes of
// api/routes.cc (plus GET /v1/openapi.json and the routes outside /v1).
TEST_F(E2eOpenApi, DocumentIsValidAndKeepsTheHouseRules) {
  RINGCAST_E2E_SINGLE_NODE_ONLY("reads the document only; the single-node run checks it");
  TempDir dir("e2e-openapi-lint");
  const ScriptRun r =
      run("tests/openapi/lint.mjs", {doc_, "--routes", source_path("api/routes.cc")}, {}, dir,
          "lint", scaled(120s));
  ASSERT_TRUE(r.status.ok()) << "lint.mjs " << r.describe();
  std::printf("%s", r.out.c_str());
}

// openapi-typescript's types of the document compile, and so does the typed client seed that
// uses them (tsc --noEmit --strict).
TEST_F(E2eOpenApi, TypesCompileWithTheClientSeed) {
  RINGCAST_E2E_SINGLE_NODE_ONLY("reads the document only; the single-node run checks it");
  TempDir dir("e2e-openapi-types");
  const ScriptRun r =
      run("tests/openapi/types.mjs", {doc_, dir.file("types")}, {}, dir, "types", scaled(180s));
  ASSERT_TRUE(r.status.ok()) << "types.mjs " << r.describe();
  ASSERT_TRUE(std::filesystem::exists(dir.file("types/ringcast-api.d.ts")));
  std::printf("%s", r.out.c_str());
}

// Every route and every documented status of a live daemon, validated against the document.
TEST_F(E2eOpenApi, EveryRouteAndStatusHoldsAgainstTheDaemon) {
  DaemonOptions o;
  // A bus intake source whose Redis is not there: GET /v1/intake answers 200 with its state
  // (docs/operations.md §6: "connection_error" says why) rather than 404 for no source at all.
  o.extra_toml = "[[intake.redis]]\nname = \"contract\"\nservers = [\"127.0.0.1:";
  o.extra_toml += std::to_string(test::free_tcp_port());
  o.extra_toml += "\"]\nstreams = [\"contract-events\"]\n";
  o.env = {kv("RINGCAST_SERVER_AUTH_FAILURES_PER_MINUTE", std::to_string(kAuthFailuresPerMinute))};
  Daemon d(o);
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-openapi-contract");
  // The sink's fault paths are what contract.mjs expects (its header): /reject 400, /unknown 502,
  // /gone 410; anything else 200.
  SinkProcess sink = SinkProcess::start({"--quiet", "--fault", "/reject=status=400", "--fault",
                                         "/unknown=status=502", "--fault", "/gone=status=410"},
                                        dir.path());

  std::string bases;
  for (size_t i = 0; i < d.nodes(); ++i) {
    if (i > 0) bases += ',';
    bases += "http://127.0.0.1:";
    bases += std::to_string(d.port(i));
  }
  const ScriptRun r = run(
      "tests/openapi/contract.mjs", {},
      {
          kv("RINGCAST_CONTRACT_BASE_URL", bases.substr(0, bases.find(','))),
          kv("RINGCAST_CONTRACT_BASE_URLS", bases),
          kv("RINGCAST_CONTRACT_ADMIN_TOKEN", Daemon::kToken),
          kv("RINGCAST_CONTRACT_SINK_URL", sink.base_url()),
          kv("RINGCAST_CONTRACT_DOC", doc_),
          kv("RINGCAST_CONTRACT_AUTH_FAILURES_PER_MINUTE", std::to_string(kAuthFailuresPerMinute)),
          kv("RINGCAST_CONTRACT_TIMEOUT_MS", std::to_string(scaled(15s).count())),
          // The tolerance for a daemon built before the document is for runs by hand, never here.
          "RINGCAST_CONTRACT_KNOWN_GAPS=",
      },
      dir, "contract", scaled(300s));
  ASSERT_TRUE(r.status.ok()) << "contract.mjs " << r.describe() << "\n--- daemon\n"
                             << d.output(3000);
  // The coverage table's last line: operations, statuses, bodies validated.
  const size_t last = r.out.rfind("contract: OK");
  ASSERT_NE(last, std::string::npos) << r.out;
  std::printf("%s", r.out.substr(last).c_str());
}

}  // namespace
}  // namespace ringcast::e2e
