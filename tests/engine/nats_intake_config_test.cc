// [[intake.nats]] sources (docs/operations.md §6 "NATS JetStream"): their defaults per envelope,
// printing with the secrets masked and reading back, and errors that name the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/config.h"
#include "tests/engine/config_test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"

namespace ringcast {
namespace {

using ::testing::HasSubstr;
using testing_config::error_of;
using testing_config::load;

TEST(Config, IntakeNatsSources) {
  Config c = load(
      "[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ntoken = \"tok-1\"\n"
      "[[intake.nats]]\nname = \"orders\"\nservers = [\"nats://127.0.0.1:4222\", "
      "\"tls://[::1]:4223\"]\nstream = \"ORDERS\"\ndurable = \"rc\"\nfilter_subject = "
      "\"orders.>\"\n"
      "envelope = \"json\"\nuser = \"u\"\npassword = \"pw\"\ntenant_field = \"org\"\n"
      "dead_letter_subject = \"dead.orders\"\nbatch = 100\nexpires = \"2s\"\nmax_unacked = 1000\n"
      "max_ack_pending = 5000\nack_wait = \"10s\"\nnak_delay = \"1s\"\n");
  ASSERT_EQ(c.intake.nats.size(), 2u);
  const auto& a = c.intake.nats[0];
  EXPECT_EQ(a.name, "nats-1");
  EXPECT_EQ(a.durable, "ringcast");
  EXPECT_EQ(a.envelope, "headers");
  EXPECT_EQ(a.tenant_field, "Ringcast-Tenant");  // the headers envelope's names
  EXPECT_EQ(a.id_field, "Ringcast-Id");
  EXPECT_EQ(a.type_field, "Ringcast-Type");
  EXPECT_EQ(a.ordering_key_field, "Ringcast-Ordering-Key");
  EXPECT_EQ(a.payload_field, "");  // the body is the payload
  EXPECT_EQ(a.dead_letter_subject, "ringcast.dead-letter");
  EXPECT_EQ(a.batch, 256u);
  EXPECT_EQ(a.expires, seconds(1));
  EXPECT_EQ(a.ack_wait, seconds(30));
  EXPECT_EQ(a.max_ack_pending, 0u);
  const auto& b = c.intake.nats[1];
  EXPECT_EQ(b.name, "orders");
  EXPECT_EQ(b.tenant_field, "org");  // json: its own names, but for the one given
  EXPECT_EQ(b.id_field, "id");
  EXPECT_EQ(b.payload_field, "payload");
  EXPECT_EQ(b.ordering_key_field, "ordering_key");
  EXPECT_EQ(b.ack_wait, seconds(10));
  EXPECT_EQ(b.nak_delay, seconds(1));
  EXPECT_EQ(b.max_ack_pending, 5000u);
  // Printed with the secrets masked, and read back the same.
  const std::string printed = c.to_toml();
  EXPECT_THAT(printed, HasSubstr("[[intake.nats]]"));
  EXPECT_THAT(printed, ::testing::Not(HasSubstr("tok-1")));
  EXPECT_THAT(printed, ::testing::Not(HasSubstr("\"pw\"")));
  Config again = load(c.to_toml(false));
  ASSERT_EQ(again.intake.nats.size(), 2u);
  EXPECT_EQ(again.intake.nats[0].token, "tok-1");
  EXPECT_EQ(again.intake.nats[1].password, "pw");
  EXPECT_EQ(again.intake.nats[1].servers, b.servers);
  EXPECT_EQ(again.to_toml(false), c.to_toml(false));

  struct Case {
    const char* toml;
    const char* want1;
    const char* want2;
  };
  const std::string ok = "[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n";
  const Case cases[] = {
      {"[[intake.nats]]\nstream = \"EV\"\n", "intake.nats[0].servers", "host:port"},
      {"[[intake.nats]]\nservers = [\"localhost:4222\"]\nstream = \"EV\"\n",
       "intake.nats[0].servers[0]", "numeric"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\n", "intake.nats[0].stream", "required"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"a.b\"\n",
       "intake.nats[0].stream", "no dots"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ndurable = \"r c\"\n",
       "intake.nats[0].durable", "consumer name"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "filter_subject = \"a..b\"\n",
       "intake.nats[0].filter_subject", "not a NATS subject"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "dead_letter_subject = \"dead.*\"\n",
       "intake.nats[0].dead_letter_subject", "without wildcards"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "filter_subject = \"ev.>\"\ndead_letter_subject = \"ev.dead\"\n",
       "intake.nats[0].dead_letter_subject", "its own dead letters"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\nenvelope = \"xml\"\n",
       "intake.nats[0].envelope", "\"headers\" or \"json\""},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "payload_field = \"body\"\n",
       "intake.nats[0].payload_field", "json"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "tenant_field = \"Bad Name\"\n",
       "intake.nats[0].tenant_field", "header name"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ntoken = \"t\"\n"
       "user = \"u\"\npassword = \"p\"\n",
       "intake.nats[0].token", "not both"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ntoken = \"t\"\n"
       "nkey_seed_file = \"/etc/hostname\"\n",
       "intake.nats[0].token", "not both"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "nkey_seed_file = \"/nonexistent/user.nk\"\n",
       "intake.nats[0].nkey_seed_file", "cannot read"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\nuser = \"u\"\n",
       "intake.nats[0].password", "go together"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\nbatch = 600\n"
       "max_unacked = 500\n",
       "intake.nats[0].max_unacked", "at least batch"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\nmax_unacked = 1000\n"
       "max_ack_pending = 10\n",
       "intake.nats[0].max_ack_pending", "at least max_unacked"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\nexpires = \"1ms\"\n",
       "intake.nats[0].expires", "10ms"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\nack_wait = \"100ms\"\n",
       "intake.nats[0].ack_wait", "1s"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\n"
       "tls_ca_file = \"/x.pem\"\n",
       "intake.nats[0].tls_ca_file", "tls = true"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ntls = true\n"
       "tls_ca_file = \"/nonexistent/ca.pem\"\n",
       "intake.nats[0].tls_ca_file", "cannot read"},
      {"[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ncolour = 1\n",
       "intake.nats[0].colour", "unknown key"},
      {"[intake]\nnats = 3\n", "intake.nats", "[[intake.nats]]"},
  };
  for (const auto& k : cases) {
    std::string msg = error_of([&] { (void)load(k.toml); });
    EXPECT_THAT(msg, HasSubstr(k.want1)) << k.toml;
    EXPECT_THAT(msg, HasSubstr(k.want2)) << k.toml;
  }
  EXPECT_EQ(error_of([&] { (void)load(ok); }), "");
  EXPECT_EQ(error_of([&] { (void)load(ok + ok); }), "");  // nats-1, nats-2
  // One name space for every source, Redis and NATS.
  const std::string clash = error_of([&] {
    (void)load(
        "[[intake.redis]]\nname = \"bus\"\nservers = [\"127.0.0.1:6379\"]\nstreams = [\"s\"]\n" +
        ok + "name = \"bus\"\n");
  });
  EXPECT_THAT(clash, HasSubstr("intake.nats[0].name"));
}

TEST(Config, IntakeNatsTlsWithATestCa) {
  test::TempDir dir;
  const test::CertFiles files = test::TestCa::create().write_localhost(dir.path());
  Config c = load(
      "[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ntls = true\n"
      "tls_ca_file = \"" +
      files.ca + "\"\ntls_server_name = \"localhost\"\n");
  ASSERT_EQ(c.intake.nats.size(), 1u);
  EXPECT_TRUE(c.intake.nats[0].tls);
  // A file that is not PEM: said at start, naming the key.
  const std::string bad = error_of([&] {
    (void)load(
        "[[intake.nats]]\nservers = [\"127.0.0.1:4222\"]\nstream = \"EV\"\ntls = true\n"
        "tls_ca_file = \"" +
        dir.file("key.pem") + "\"\n");
  });
  EXPECT_THAT(bad, HasSubstr("intake.nats[0].tls_ca_file"));
}

}  // namespace
}  // namespace ringcast
