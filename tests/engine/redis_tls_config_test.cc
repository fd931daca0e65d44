// TLS to Redis in the configuration (SPEC R14, docs/security.md "Redis"): storage.redis.tls*
// and [[intake.redis]] tls* from the file and (storage.redis) the environment, printed and read
// back, mapped to the connections' options; validation names the key at fault (a file that
// cannot be read or is not PEM, a certificate without its key or with another key, a tls_* key
// while tls is off, a server name that is not one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/build.h"
#include "engine/config.h"
#include "tests/engine/config_test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast {
namespace {

using ::testing::HasSubstr;

using testing_config::error_of;
using testing_config::load;

std::string toml_quote(const std::string& s) {
  std::string out = "\"";
  out += s;
  out += '"';
  return out;
}

class RedisTlsConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    files_ = ca_.write_localhost(dir_.path());
    const test::LeafCert other = other_ca_.issue({"x"});
    other_key_ = dir_.file("other-key.pem");
    test::write_file(other_key_, other.key_pem);
    not_pem_ = dir_.file("not.pem");
    test::write_file(not_pem_, "not a certificate\n");
  }
  // [storage] backend = "redis" with these [storage.redis] lines.
  static std::string storage(const std::string& lines) {
    std::string t = "[storage]\nbackend = \"redis\"\n[storage.redis]\n";
    t += lines;
    return t;
  }
  // One [[intake.redis]] source with these extra lines.
  static std::string intake(const std::string& lines) {
    std::string t = "[[intake.redis]]\nservers = [\"127.0.0.1:6380\"]\nstreams = [\"s\"]\n";
    t += lines;
    return t;
  }

  test::TempDir dir_{"config-redis-tls"};
  test::TestCa ca_ = test::TestCa::create();
  test::TestCa other_ca_ = test::TestCa::create("other CA");
  test::CertFiles files_;
  std::string other_key_, not_pem_;
};

TEST_F(RedisTlsConfig, KeysFromTheFileAndTheEnvironmentReachEveryRedisUser) {
  Config d = load("");
  EXPECT_FALSE(d.storage.redis.tls);  // plain TCP stays the default
  std::string lines = "tls = true\ntls_ca_file = " + toml_quote(files_.ca) + "\n";
  lines +=
      "tls_cert_file = " + toml_quote(files_.cert) + "\ntls_key_file = " + toml_quote(files_.key);
  lines += "\ntls_server_name = \"redis.internal\"\n";
  Config c = load(storage(lines) +
                  "[cluster]\nenabled = true\nsecret = "
                  "\"0123456789abcdef0123456789abcdef\"\nnode_id = \"n1\"\n" +
                  intake(lines));
  EXPECT_TRUE(c.storage.redis.tls);
  EXPECT_EQ(c.storage.redis.tls_ca_file, files_.ca);
  EXPECT_EQ(c.storage.redis.tls_cert_file, files_.cert);
  EXPECT_EQ(c.storage.redis.tls_key_file, files_.key);
  EXPECT_EQ(c.storage.redis.tls_server_name, "redis.internal");
  ASSERT_EQ(c.intake.redis.size(), 1u);
  EXPECT_TRUE(c.intake.redis[0].tls);
  EXPECT_EQ(c.intake.redis[0].tls_key_file, files_.key);

  // The store, the leases (and through the store the inboxes), the Streams intake.
  engine::RedisModeOptions ro = engine::redis_mode_options(c);
  EXPECT_TRUE(ro.store.tls.enabled);
  EXPECT_EQ(ro.store.tls.ca_file, files_.ca);
  EXPECT_EQ(ro.store.tls.cert_file, files_.cert);
  EXPECT_EQ(ro.store.tls.key_file, files_.key);
  EXPECT_EQ(ro.store.tls.server_name, "redis.internal");
  ASSERT_TRUE(ro.ownership.has_value());
  EXPECT_TRUE(ro.ownership->tls.enabled);
  EXPECT_EQ(ro.ownership->tls.cert_file, files_.cert);
  const redis::TlsOptions in = engine::redis_tls_options(c.intake.redis[0]);
  EXPECT_TRUE(in.enabled);
  EXPECT_EQ(in.server_name, "redis.internal");

  // The effective TOML loads again, the same.
  Config again = load(c.to_toml(false));
  EXPECT_TRUE(again.storage.redis.tls);
  EXPECT_EQ(again.storage.redis.tls_cert_file, files_.cert);
  EXPECT_EQ(again.intake.redis[0].tls_ca_file, files_.ca);

  // RINGCAST_STORAGE_REDIS_TLS_* like every key.
  Config e = load("", {{"RINGCAST_STORAGE_BACKEND", "redis"},
                       {"RINGCAST_STORAGE_REDIS_TLS", "true"},
                       {"RINGCAST_STORAGE_REDIS_TLS_CA_FILE", files_.ca},
                       {"RINGCAST_STORAGE_REDIS_TLS_CERT_FILE", files_.cert},
                       {"RINGCAST_STORAGE_REDIS_TLS_KEY_FILE", files_.key},
                       {"RINGCAST_STORAGE_REDIS_TLS_SERVER_NAME", "localhost"}});
  EXPECT_TRUE(e.storage.redis.tls);
  EXPECT_EQ(e.storage.redis.tls_ca_file, files_.ca);
  EXPECT_EQ(e.storage.redis.tls_key_file, files_.key);
  EXPECT_EQ(e.storage.redis.tls_server_name, "localhost");
  EXPECT_TRUE(e.warnings.empty()) << e.warnings.front();
}

TEST_F(RedisTlsConfig, ValidationNamesTheKeyAtFault) {
  const std::string ca = "tls = true\ntls_ca_file = " + toml_quote(files_.ca) + "\n";
  EXPECT_EQ(error_of([&] { (void)load(storage(ca)); }), "");
  EXPECT_EQ(error_of([&] { (void)load(intake(ca)); }), "");
  struct Case {
    std::string lines;
    const char* key;
    const char* what;
  };
  const Case cases[] = {
      {"tls = true\ntls_ca_file = " + toml_quote(dir_.file("missing.pem")) + "\n", "tls_ca_file",
       "cannot read"},
      {"tls = true\ntls_ca_file = " + toml_quote(not_pem_) + "\n", "tls_ca_file", "CA"},
      {ca + "tls_cert_file = " + toml_quote(files_.cert) + "\n", "tls_key_file",
       "must be set together with"},
      {ca + "tls_key_file = " + toml_quote(files_.key) + "\n", "tls_cert_file",
       "must be set together with"},
      {ca + "tls_cert_file = " + toml_quote(files_.cert) +
           "\ntls_key_file = " + toml_quote(other_key_) + "\n",
       "tls_key_file", "does not match"},
      {ca + "tls_cert_file = " + toml_quote(not_pem_) +
           "\ntls_key_file = " + toml_quote(files_.key) + "\n",
       "tls_cert_file", "certificate"},
      {ca + "tls_server_name = \"not a name\"\n", "tls_server_name", "DNS name"},
      {"tls_ca_file = " + toml_quote(files_.ca) + "\n", "tls_ca_file", "tls is false"},
      {"tls_server_name = \"localhost\"\n", "tls_server_name", "tls is false"},
  };
  for (const Case& k : cases) {
    const std::string s = error_of([&] { (void)load(storage(k.lines)); });
    EXPECT_THAT(s, HasSubstr(std::string("storage.redis.") + k.key)) << k.lines;
    EXPECT_THAT(s, HasSubstr(k.what)) << k.lines;
    const std::string i = error_of([&] { (void)load(intake(k.lines)); });
    EXPECT_THAT(i, HasSubstr(std::string("intake.redis[0].") + k.key)) << k.lines;
    EXPECT_THAT(i, HasSubstr(k.what)) << k.lines;
  }
  // From the environment too, naming the key.
  EXPECT_THAT(error_of([&] {
                (void)load("", {{"RINGCAST_STORAGE_BACKEND", "redis"},
                                {"RINGCAST_STORAGE_REDIS_TLS", "true"},
                                {"RINGCAST_STORAGE_REDIS_TLS_CA_FILE", files_.ca},
                                {"RINGCAST_STORAGE_REDIS_TLS_CERT_FILE", files_.cert}});
              }),
              HasSubstr("storage.redis.tls_key_file"));
  EXPECT_THAT(error_of([&] { (void)load(storage("tls = \"maybe\"\n")); }),
              HasSubstr("storage.redis.tls"));
}

}  // namespace
}  // namespace ringcast
