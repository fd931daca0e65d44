// End to end: `ringcast serve` refuses to start, with one line naming what is wrong, on what would
// otherwise leave it running wrongly (operations.md "Validation"): a transport.ca_file that is not
// PEM (no shard could build its TLS context), and stored endpoints whose [policies.<name>] left the
// config (no silent fall-back to another ladder). `config check` names the same key.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/e2e/daemon.h"
#include "tests/support/test_ca.h"

namespace ringcast::e2e {
namespace {

using test::Process;
using test::ProcessOptions;
using test::SinkProcess;
using test::TempDir;

struct CliRun {
  std::optional<test::ExitStatus> status;  // nullopt: still running after the wait (killed)
  std::string out, err;
};

// Runs `ringcast --config CONFIG ARGS...` with `env` and waits up to `wait` for it to exit.
CliRun run_ringcast(const std::string& config, const std::vector<std::string>& args,
                    const std::vector<std::string>& env, const std::string& dir,
                    const std::string& tag, Millis wait) {
  ProcessOptions po;
  po.stdout_path = dir + "/" + tag + ".out";
  po.stderr_path = dir + "/" + tag + ".err";
  po.env = env;
  po.cwd = dir;
  std::vector<std::string> argv = {ringcast_binary(), "--config", config};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p = Process::start(argv, std::move(po));
  CliRun r;
  r.status = p.wait(wait);
  if (!r.status) p.kill();
  r.out = test::read_file(dir + "/" + tag + ".out");
  r.err = test::read_file(dir + "/" + tag + ".err");
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

size_t lines_containing(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (const std::string& l : lines_of(text)) n += l.find(needle) != std::string::npos;
  return n;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

TEST(E2eStartup, CaFileThatIsNotPemIsRefusedNamingTheKey) {
  TempDir dir("e2e-startup-ca");
  const std::string not_pem = dir.file("ca.txt");
  write_text(not_pem, "this is a text file, not a PEM certificate bundle\n");
  DaemonOptions o;
  o.env = {"RINGCAST_TRANSPORT_CA_FILE=" + not_pem};
  Daemon d(o);  // writes the config; the run below uses it with the environment above

  const auto t0 = std::chrono::steady_clock::now();
  CliRun serve = run_ringcast(d.config_path(), {"serve"}, o.env, dir.path(), "serve", scaled(10s));
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(serve.status.has_value()) << "serve still ran after 10 s:\n" << serve.err;
  EXPECT_TRUE(serve.status->exited && serve.status->code == 1) << serve.status->str();
  EXPECT_LT(took, scaled(5s)) << "serve took long to refuse";
  EXPECT_EQ(lines_containing(serve.err, "transport.ca_file"), 1u) << serve.err;
  EXPECT_EQ(lines_of(serve.err).size(), 1u) << "one line, not a cascade:\n" << serve.err;
  EXPECT_EQ(serve.out.find("listening on"), std::string::npos) << serve.out;

  CliRun check =
      run_ringcast(d.config_path(), {"config", "check"}, o.env, dir.path(), "check", scaled(10s));
  ASSERT_TRUE(check.status.has_value());
  EXPECT_FALSE(check.status->ok()) << check.status->str() << "\n" << check.out;
  EXPECT_GE(lines_containing(check.err, "transport.ca_file"), 1u) << check.err;
  EXPECT_EQ(check.out.find("config ok"), std::string::npos) << check.out;

  // The control: a real PEM bundle in the same key is accepted by both.
  const test::TestCa ca = test::TestCa::create();
  const std::string pem = dir.file("ca.pem");
  write_text(pem, ca.ca_pem);
  const std::vector<std::string> good_env = {"RINGCAST_TRANSPORT_CA_FILE=" + pem};
  CliRun ok_check =
      run_ringcast(d.config_path(), {"config", "check"}, good_env, dir.path(), "check-ok", 10s);
  ASSERT_TRUE(ok_check.status.has_value());
  EXPECT_TRUE(ok_check.status->ok()) << ok_check.status->str() << "\n" << ok_check.err;
  DaemonOptions good;
  good.env = good_env;
  Daemon ok_daemon(good);
  ASSERT_NO_THROW(ok_daemon.start());
  EXPECT_EQ(ok_daemon.call("GET", "/readyz").status, 200);
  auto st = ok_daemon.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << ok_daemon.output();
}

// SPEC R14 (docs/security.md "Secrets"): a secret under 32 characters — the admin token, the
// portal's secret, in cluster mode the cluster secret — is refused at start and by
// `config check`, naming the key, and the daemon never listens.
TEST(E2eStartup, SecretsUnder32CharactersAreRefusedNamingTheKey) {
  TempDir dir("e2e-startup-secrets");
  Daemon d;  // writes the config; the runs below override one secret each
  std::vector<std::pair<std::string, std::string>> weak = {
      {"server.api_token", "RINGCAST_SERVER_API_TOKEN=8charsok"},
      {"portal.secret", "RINGCAST_PORTAL_SECRET=0123456789abcdef0123456789abcde"}};  // 31
  if (cluster_mode()) weak.emplace_back("cluster.secret", "RINGCAST_CLUSTER_SECRET=too-short");
  int n = 0;
  for (const auto& [key, env] : weak) {
    SCOPED_TRACE(key);
    const std::string tag = std::to_string(n++);
    CliRun serve =
        run_ringcast(d.config_path(), {"serve"}, {env}, dir.path(), "serve" + tag, scaled(10s));
    ASSERT_TRUE(serve.status.has_value()) << "serve still ran after 10 s:\n" << serve.err;
    EXPECT_FALSE(serve.status->ok()) << serve.status->str();
    EXPECT_GE(lines_containing(serve.err, key), 1u) << serve.err;
    EXPECT_GE(lines_containing(serve.err, "32"), 1u) << serve.err;
    EXPECT_EQ(serve.out.find("listening on"), std::string::npos) << serve.out;
    CliRun check = run_ringcast(d.config_path(), {"config", "check"}, {env}, dir.path(),
                                "check" + tag, scaled(10s));
    ASSERT_TRUE(check.status.has_value());
    EXPECT_FALSE(check.status->ok()) << check.out;
    EXPECT_GE(lines_containing(check.err, key), 1u) << check.err;
  }
  // The control: the fixture's own secrets (32 characters and more) pass the same check.
  CliRun fine =
      run_ringcast(d.config_path(), {"config", "check"}, {}, dir.path(), "fine", scaled(10s));
  ASSERT_TRUE(fine.status.has_value());
  EXPECT_TRUE(fine.status->ok()) << fine.err;
}

// The config without one [policies.<name>] section (the fixture writes each as a block that ends
// at the next blank line).
std::string without_policy(const std::string& config, const std::string& name) {
  const std::string head = "[policies." + name + "]\n";
  const size_t at = config.find(head);
  if (at == std::string::npos) return config;
  size_t end = config.find("\n\n", at);
  end = end == std::string::npos ? config.size() : end + 1;
  return config.substr(0, at) + config.substr(end);
}

TEST(E2eStartup, StoredEndpointsOfARemovedPolicyAreRefusedNamingItAndTheirCount) {
  // A cluster node reads a partition's endpoints when it takes the partition, after it started:
  // it logs the partition whose endpoints name a missing policy and does not serve it (the
  // nodes with the policy do); the refusal to start is a property of one node on its data dir.
  RINGCAST_E2E_SINGLE_NODE_ONLY("the check reads the data dir at start-up");
  Daemon d;
  ASSERT_NO_THROW(d.start());
  TempDir dir("e2e-startup-policy");
  SinkProcess sink = SinkProcess::start({"--quiet"}, dir.path());
  const std::string t = "pol";
  std::vector<std::string> fast_eps;
  for (int i = 0; i < 2; ++i) {
    Reply r = create_endpoint(
        d, t,
        "{\"url\":" + quote(sink.base_url() + "/f" + std::to_string(i)) + ",\"policy\":\"fast\"}");
    ASSERT_EQ(r.status, 201) << r.describe();
    fast_eps.push_back(r.json()["id"].str());
  }
  Reply other =
      create_endpoint(d, t, "{\"url\":" + quote(sink.base_url() + "/q") + ",\"policy\":\"quick\"}");
  ASSERT_EQ(other.status, 201) << other.describe();
  auto st = d.terminate();
  ASSERT_TRUE(st.ok()) << st.str() << "\n" << d.output();

  // The operator removes [policies.fast] and restarts.
  const std::string full = d.config_text();
  const std::string reduced = without_policy(full, "fast");
  ASSERT_NE(reduced, full);
  ASSERT_EQ(reduced.find("[policies.fast]"), std::string::npos);
  ASSERT_NE(reduced.find("[policies.quick]"), std::string::npos);
  write_text(d.config_path(), reduced);
  CliRun serve = run_ringcast(d.config_path(), {"serve"}, {}, dir.path(), "serve", scaled(15s));
  ASSERT_TRUE(serve.status.has_value()) << "serve did not exit:\n" << serve.out << serve.err;
  EXPECT_TRUE(serve.status->exited && serve.status->code == 1) << serve.status->str();
  EXPECT_EQ(serve.out.find("listening on"), std::string::npos) << serve.out;
  const std::vector<std::string> err = lines_of(serve.err);
  size_t naming = 0;
  for (const std::string& l : err) {
    if (l.find("\"fast\"") == std::string::npos) continue;
    ++naming;
    EXPECT_NE(l.find("2 stored endpoints"), std::string::npos) << "the count is not named: " << l;
    EXPECT_EQ(l.find("quick"), std::string::npos) << "quick is still configured: " << l;
  }
  EXPECT_EQ(naming, 1u) << serve.err;

  // With the policy back it starts on the same data, the endpoints as they were.
  write_text(d.config_path(), full);
  ASSERT_NO_THROW(d.start());
  Json list = d.call("GET", "/v1/tenants/" + t + "/endpoints").json()["endpoints"];
  ASSERT_EQ(list.size(), 3u) << d.call("GET", "/v1/tenants/" + t + "/endpoints").body;
  for (const std::string& id : fast_eps) {
    Json ep = get_endpoint(d, t, id);
    EXPECT_EQ(ep["policy"].str(), "fast") << id;
    EXPECT_EQ(ep["state"].str(), "enabled") << id;
  }
  // And they deliver.
  ASSERT_EQ(submit_event(d, t, "after-restart", "job.done", "{}").status, 202);
  const std::string after = message_id_of(d, t, "after-restart");
  EXPECT_TRUE(wait_until([&] { return sink_lines_for(sink, after) == 3; }, scaled(5s)))
      << test::read_file(sink.ids_file);
  st = d.terminate();
  EXPECT_TRUE(st.ok()) << st.str() << "\n" << d.output();
}

}  // namespace
}  // namespace ringcast::e2e
