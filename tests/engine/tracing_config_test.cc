// [tracing] (docs/tracing.md, docs/operations.md §2): the keys' defaults, the environment, the
// collector URL checked like notifications.webhook_url with errors naming the key, the ranges, and
// the exporter's options built from them (engine/build.h tracer_options).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/build.h"
#include "engine/config.h"
#include "tests/engine/config_test_util.h"

namespace ringcast {
namespace {

using ::testing::HasSubstr;
using testing_config::error_of;
using testing_config::load;

TEST(TracingConfig, OffByDefaultWithTheDocumentedDefaults) {
  const Config c = load("");
  EXPECT_EQ(c.tracing.endpoint, "");
  EXPECT_EQ(c.tracing.service_name, "ringcast");
  EXPECT_EQ(c.tracing.queue_max, 8192u);
  EXPECT_EQ(c.tracing.sample_ratio, 1.0);
}

TEST(TracingConfig, KeysFromTheFileAndTheEnvironmentBecomeTheExportersOptions) {
  const Config c = load(
      "[transport]\nallow_http = true\nallow_private = [\"10.0.0.0/8\"]\n"
      "[tracing]\nendpoint = \"http://10.1.2.3:4318/v1/traces\"\nqueue_max = 100\n",
      {{"RINGCAST_TRACING_SAMPLE_RATIO", "0.25"}, {"RINGCAST_TRACING_SERVICE_NAME", "hooks"}});
  EXPECT_EQ(c.tracing.endpoint, "http://10.1.2.3:4318/v1/traces");
  EXPECT_EQ(c.tracing.sample_ratio, 0.25);
  const trace::TracerOptions o = engine::tracer_options(c, "node-7");
  EXPECT_EQ(o.url, "http://10.1.2.3:4318/v1/traces");
  EXPECT_EQ(o.queue_max, 100u);
  EXPECT_EQ(o.sample_ratio, 0.25);
  EXPECT_EQ(o.resource.service_name, "hooks");
  EXPECT_EQ(o.resource.service_instance, "node-7");
  // The operator webhook's checks: the daemon's URL policy and allow-list.
  EXPECT_TRUE(o.transport.url_policy.allow_http);
  ASSERT_EQ(o.transport.allow_list.size(), 1u);
  EXPECT_THAT(c.to_toml(), HasSubstr("[tracing]\nendpoint = \"http://10.1.2.3:4318/v1/traces\""));
}

TEST(TracingConfig, BadValuesAreRefusedNamingTheKey) {
  // An http:// collector without transport.allow_http, like an endpoint URL (SPEC R6 not_https).
  std::string e =
      error_of([] { load("[tracing]\nendpoint = \"http://collector:4318/v1/traces\"\n"); });
  EXPECT_THAT(e, HasSubstr("tracing.endpoint"));
  EXPECT_THAT(e, HasSubstr("not_https"));
  EXPECT_THAT(e, HasSubstr("transport.allow_http"));
  e = error_of([] { load("[tracing]\nendpoint = \"collector:4318\"\n"); });
  EXPECT_THAT(e, HasSubstr("tracing.endpoint"));
  e = error_of([] { load("[tracing]\nendpoint = \"https://collector:22/v1/traces\"\n"); });
  EXPECT_THAT(e, HasSubstr("port_not_allowed"));
  e = error_of([] { load("[tracing]\nsample_ratio = 1.5\n"); });
  EXPECT_THAT(e, HasSubstr("tracing.sample_ratio"));
  e = error_of([] { load("[tracing]\nqueue_max = 0\n"); });
  EXPECT_THAT(e, HasSubstr("tracing.queue_max"));
  e = error_of([] { load("[tracing]\nservice_name = \"\"\n"); });
  EXPECT_THAT(e, HasSubstr("tracing.service_name"));
  e = error_of([] { load("[tracing]\nendpont = \"https://c/v1/traces\"\n"); });
  EXPECT_THAT(e, HasSubstr("endpont"));
  // https is fine as it is.
  EXPECT_EQ(
      error_of([] { load("[tracing]\nendpoint = \"https://otel.example.com/v1/traces\"\n"); }), "");
}

}  // namespace
}  // namespace ringcast
