// Event-type filters for fan-out (SPEC R1 "Endpoint"): exact, "*", prefix wildcard "payment.*".
#include "core/fanout.h"

#include <gtest/gtest.h>

namespace ringcast {
namespace {

TEST(Fanout, PatternTable) {
  struct Row {
    const char* pattern;
    const char* type;
    bool match;
  };
  const Row rows[] = {
      {"payment.status_changed", "payment.status_changed", true},
      {"payment.status_changed", "payment.status_changed2", false},
      {"payment.status_changed", "payment", false},
      {"payment.*", "payment.status_changed", true},
      {"payment.*", "payment.a.b", true},
      {"payment.*", "payment.", false},
      {"payment.*", "payment", false},
      {"payment.*", "payments.status_changed", false},
      {"payment.*", "refund.completed", false},
      {"*", "anything.at.all", true},
      {"*", "x", true},
      {"refund.completed", "refund.completed", true},
      {"refund.*", "refund.completed", true},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(event_type_matches(r.pattern, r.type), r.match) << r.pattern << " " << r.type;
  }
}

TEST(Fanout, FilterLists) {
  EXPECT_TRUE(filter_matches({}, "x.y"));  // empty: all
  EXPECT_TRUE(filter_matches({"a.b", "payment.*"}, "payment.x"));
  EXPECT_FALSE(filter_matches({"a.b", "payment.*"}, "refund.x"));
  EXPECT_TRUE(filter_matches({"a.b", "refund.x"}, "refund.x"));
}

TEST(Fanout, Validation) {
  EXPECT_TRUE(validate_event_filter({}).ok());
  EXPECT_TRUE(validate_event_filter({"*", "payment.*", "refund.completed", "a.b.*"}).ok());
  for (const char* bad : {"", "pay*", "*.payment", "payment.*.x", ".*", "a b", "a**", "pay\x01"}) {
    Result<void> r = validate_event_filter({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_STREQ(r.error().field, "event_types");
    EXPECT_STREQ(r.error().reason, "invalid_event_type");
  }
  EXPECT_FALSE(validate_event_filter({std::string(300, 'a')}).ok());
  EXPECT_FALSE(validate_event_filter(std::vector<std::string>(300, "a")).ok());
}

}  // namespace
}  // namespace ringcast
