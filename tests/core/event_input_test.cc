// core/event_input: the one rule every intake and the shard apply to an event's names (SPEC R1,
// R11: an id travels in webhook headers), with the code and field each refusal names.
#include "core/event_input.h"

#include <gtest/gtest.h>

#include <string>

namespace ringcast {
namespace {

struct Case {
  const char* name;
  std::string tenant, id, type;
  const char* code;  // nullptr: accepted
  const char* field;
};

TEST(EventInput, OneRuleForTenantIdAndType) {
  EventLimits l;
  l.max_tenant_bytes = 8;
  l.max_id_bytes = 16;
  l.max_type_bytes = 12;
  const Case cases[] = {
      {"ok", "acme", "evt_1:a-b.c~d", "order.paid", nullptr, nullptr},
      {"tenant alphabet", "ac me", "e", "t", "invalid_value", "tenant"},
      {"tenant empty", "", "e", "t", "invalid_value", "tenant"},
      {"tenant too long", "acme-corp", "e", "t", "invalid_value", "tenant"},
      {"id empty", "acme", "", "t", "invalid_value", "id"},
      {"id too long", "acme", std::string(17, 'x'), "t", "invalid_value", "id"},
      {"id at the limit", "acme", std::string(16, 'x'), "t", nullptr, nullptr},
      {"id control", "acme", "e\r\n1", "t", "invalid_value", "id"},
      {"id delete", "acme", "e\x7f", "t", "invalid_value", "id"},
      {"id space", "acme", "has space", "t", "invalid_event_id", "id"},
      {"id outside ascii", "acme", "caf\xc3\xa9", "t", "invalid_event_id", "id"},
      {"type empty", "acme", "e", "", "invalid_value", "type"},
      {"type space", "acme", "e", "a b", "invalid_value", "type"},
      {"type too long", "acme", "e", std::string(13, 't'), "invalid_value", "type"},
      {"tenant first", "a b", "has space", "a b", "invalid_value", "tenant"},
      {"then the id", "acme", "has space", "a b", "invalid_event_id", "id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto e = check_event_names(c.tenant, c.id, c.type, l);
    if (c.code == nullptr) {
      EXPECT_FALSE(e.has_value()) << e->message;
      continue;
    }
    ASSERT_TRUE(e.has_value());
    EXPECT_STREQ(e->code, c.code);
    EXPECT_STREQ(e->field, c.field);
    EXPECT_FALSE(e->message.empty());
  }
}

TEST(EventInput, TheIdNeverExceedsWhatAHeaderCarriesWhateverTheLimitSays) {
  EXPECT_FALSE(check_event_id(std::string(kMaxEventIdBytes, 'x'), 100'000).has_value());
  auto e = check_event_id(std::string(kMaxEventIdBytes + 1, 'x'), 100'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_STREQ(e->code, "invalid_value");
  EXPECT_NE(e->message.find("256"), std::string::npos) << e->message;
}

TEST(EventInput, ThePayloadsSize) {
  EventLimits l;
  l.max_payload_bytes = 10;
  EXPECT_FALSE(check_event_payload_size(10, l).has_value());
  auto e = check_event_payload_size(11, l);
  ASSERT_TRUE(e.has_value());
  EXPECT_STREQ(e->code, "too_large");
  EXPECT_STREQ(e->field, "payload");
}

}  // namespace
}  // namespace ringcast
