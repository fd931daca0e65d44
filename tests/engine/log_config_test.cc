// The daemon's log as configured and scraped (docs/operations.md §2 "Keys" [log], §5 "Logs"):
// the [log] keys, their defaults, RINGCAST_LOG_* overrides and errors that name the key; a
// config error about a secret's key never echoes its value (SPEC R14); and the rate limit's
// counters on /metrics (engine/metrics.h render_log_metrics).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/config.h"
#include "engine/metrics.h"
#include "log/log.h"
#include "tests/engine/config_test_util.h"

namespace ringcast {
namespace {

using ::testing::HasSubstr;
using testing_config::error_of;
using testing_config::load;

TEST(LogConfig, DefaultsAndWhatTheFileAndTheEnvironmentSay) {
  Config d = load("");
  EXPECT_EQ(d.log.level, "info");
  EXPECT_EQ(d.log.format, "text");
  EXPECT_EQ(d.log.rate_per_second, 20);
  EXPECT_EQ(d.log.burst, 100u);

  Config c =
      load("[log]\nlevel = \"debug\"\nformat = \"json\"\nrate_per_second = 0.5\nburst = 7\n");
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_EQ(c.log.format, "json");
  EXPECT_EQ(c.log.rate_per_second, 0.5);
  EXPECT_EQ(c.log.burst, 7u);
  // Printed (`ringcast config print`) and loaded back the same.
  const std::string printed = c.to_toml(false);
  EXPECT_THAT(printed, HasSubstr("[log]\nlevel = \"debug\"\nformat = \"json\"\n"));
  EXPECT_EQ(load(printed).to_toml(false), printed);

  Config e = load("[log]\nlevel = \"debug\"\n", {{"RINGCAST_LOG_LEVEL", "error"},
                                                 {"RINGCAST_LOG_FORMAT", "json"},
                                                 {"RINGCAST_LOG_RATE_PER_SECOND", "0"},
                                                 {"RINGCAST_LOG_BURST", "1"}});
  EXPECT_EQ(e.log.level, "error");
  EXPECT_EQ(e.log.format, "json");
  EXPECT_EQ(e.log.rate_per_second, 0);
  EXPECT_EQ(e.log.burst, 1u);
  EXPECT_TRUE(e.warnings.empty());
}

TEST(LogConfig, BadValuesAreRefusedNamingTheKey) {
  struct Case {
    const char* toml;
    const char* want;
  };
  const Case cases[] = {
      {"[log]\nlevel = \"warning\"\n",
       "log.level: expected \"debug\", \"info\", \"warn\" or \"error\", got \"warning\""},
      {"[log]\nformat = \"logfmt\"\n", "log.format: expected \"text\" or \"json\", got \"logfmt\""},
      {"[log]\nrate_per_second = -1\n", "log.rate_per_second: expected a number in 0..1e+06"},
      {"[log]\nburst = 0\n", "log.burst: expected an integer in 1..1e+06"},
      {"[log]\nlevels = \"info\"\n", "log.levels: unknown key"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(error_of([&] { load(c.toml); }), HasSubstr(c.want)) << c.toml;
  }
  EXPECT_THAT(error_of([] {
                load("", {{"RINGCAST_LOG_FORMAT", "yaml"}});
              }),
              HasSubstr("log.format: expected \"text\" or \"json\", got \"yaml\""));
}

// SPEC R14 (docs/operations.md §5 "Logs"): the error `serve` logs for a bad config names the key,
// never the secret it holds, whatever is wrong with it.
TEST(LogConfig, AConfigErrorNeverEchoesASecret) {
  const std::string marker = "SECRETMARKER7f3a9c";
  const std::string keys[] = {"[server]\napi_token",
                              "[portal]\nsecret",
                              "[cluster]\nsecret",
                              "[notifications]\nwebhook_secret",
                              "[notifications.smtp]\npassword",
                              "[storage.redis]\npassword",
                              "[[intake.redis]]\npassword"};
  for (const std::string& key : keys) {
    // Each built by appends (GCC 12's false -Wrestrict on "literal" + std::string at -O3).
    auto around = [&](const char* before, const char* after) {
      std::string v = before;
      v += marker;
      v += after;
      return v;
    };
    const std::string values[] = {
        around("[\"", "\"]"),              // not a string: "got a list"
        around("", "x"),                   // not TOML: toml++ quotes what it saw
        around("t", ""),                   // "expected 'true', saw 'tS'"
        around("\"", "\\q\""),             // a bad escape
        around("\"\"\"", "\n\x01\"\"\""),  // a control character in a multi-line string
        around("\"short ", "\""),          // a space, and too short (api_token, portal.secret)
    };
    for (const std::string& value : values) {
      std::string toml = key;
      toml += " = ";
      toml += value;
      toml += '\n';
      const std::string err = error_of([&] { load(toml); });
      EXPECT_EQ(err.find(marker.substr(0, 6)), std::string::npos) << toml << "\n→ " << err;
      EXPECT_EQ(err.find("tS"), std::string::npos) << toml << "\n→ " << err;
    }
  }
  // A syntax error elsewhere still says what toml++ saw.
  EXPECT_THAT(error_of([] { load("[server]\nlisten = tx\n"); }), HasSubstr("saw 'tx'"));
  // And a secret given as a number is named as such.
  EXPECT_THAT(error_of([] { load("[server]\napi_token = 123456789\n"); }),
              HasSubstr("server.api_token: expected a string, got a number"));
}

TEST(LogMetrics, TheRateLimitsCountersAreOnTheScrape) {
  log::Options o;
  o.level = log::Level::kError;  // nothing reaches the test's stderr
  o.rate_per_second = 0.001;
  o.burst = 2;
  log::configure(o);
  log::reset_rate_limits();
  const std::string before = engine::render_log_metrics();
  EXPECT_THAT(before, HasSubstr("# TYPE ringcast_log_lines_suppressed_total counter\n"));
  EXPECT_EQ(before.find("ringcast_log_lines_suppressed_total{"), std::string::npos) << before;
  EXPECT_THAT(before, HasSubstr("# TYPE ringcast_log_lines_dropped_total counter\n"));
  // An error level line that nobody sees: stderr is the test's, so send it nowhere useful.
  log::set_level(log::Level::kError);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) log::error("metrics_test_kind", {}, "line {}", i);
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string after = engine::render_log_metrics();
  EXPECT_THAT(after,
              HasSubstr("ringcast_log_lines_suppressed_total{event=\"metrics_test_kind\"} 3\n"))
      << after;
  // The same text is part of the engine's scrape.
  EXPECT_THAT(engine::render_prometheus({}, 0),
              HasSubstr("ringcast_log_lines_suppressed_total{event=\"metrics_test_kind\"} 3\n"));
  log::configure(log::Options{});
  log::reset_rate_limits();
  EXPECT_EQ(err.find("line 2"), std::string::npos) << err;
}

}  // namespace
}  // namespace ringcast
