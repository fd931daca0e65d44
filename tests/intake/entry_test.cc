// EntryMapper: the HTTP intake's rules applied to stream entries (table-driven).
#include "intake/entry.h"

#include <gtest/gtest.h>

namespace ringcast::intake {
namespace {

struct Case {
  const char* name;
  Fields fields;
  const char* code;  // nullptr: accepted
};

TEST(EntryMapper, AppliesTheHttpIntakeRules) {
  const std::string big(300, 'x');
  const Case cases[] = {
      {"ok",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}, {"payload", "{\"a\":[1,2]}"}},
       nullptr},
      {"scalar payload",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}, {"payload", "3"}},
       nullptr},
      {"extra field ignored",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}, {"payload", "{}"}, {"trace", "x"}},
       nullptr},
      {"no tenant", {{"id", "e1"}, {"type", "t"}, {"payload", "{}"}}, "missing_field"},
      {"no id", {{"tenant", "acme"}, {"type", "t"}, {"payload", "{}"}}, "missing_field"},
      {"no type", {{"tenant", "acme"}, {"id", "e1"}, {"payload", "{}"}}, "missing_field"},
      {"no payload", {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}}, "missing_field"},
      {"bad json",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}, {"payload", "{\"a\":"}},
       "invalid_json"},
      {"two values",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}, {"payload", "1 2"}},
       "invalid_json"},
      {"tenant chars",
       {{"tenant", "a cme"}, {"id", "e1"}, {"type", "t"}, {"payload", "{}"}},
       "invalid_value"},
      {"id control",
       {{"tenant", "acme"}, {"id", "e\n1"}, {"type", "t"}, {"payload", "{}"}},
       "invalid_value"},
      {"id too long",
       {{"tenant", "acme"}, {"id", big}, {"type", "t"}, {"payload", "{}"}},
       "invalid_value"},
      {"type space",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "a b"}, {"payload", "{}"}},
       "invalid_value"},
      // An id that could not travel in a webhook header: refused here as the HTTP routes and
      // the shard refuse it (core/event_input.h), not dead-lettered later by the shard.
      {"id space",
       {{"tenant", "acme"}, {"id", "has space"}, {"type", "t"}, {"payload", "{}"}},
       "invalid_event_id"},
      {"id outside ascii",
       {{"tenant", "acme"}, {"id", "caf\xc3\xa9"}, {"type", "t"}, {"payload", "{}"}},
       "invalid_event_id"},
      // SPEC R13.1: an ordering key, when the entry has the field, is 1..256 bytes of printable
      // ASCII, as on the HTTP routes.
      {"ordering key",
       {{"tenant", "acme"},
        {"id", "e1"},
        {"type", "t"},
        {"payload", "{}"},
        {"ordering_key", "o 1"}},
       nullptr},
      {"ordering key empty",
       {{"tenant", "acme"}, {"id", "e1"}, {"type", "t"}, {"payload", "{}"}, {"ordering_key", ""}},
       "invalid_value"},
      {"ordering key too long",
       {{"tenant", "acme"},
        {"id", "e1"},
        {"type", "t"},
        {"payload", "{}"},
        {"ordering_key", std::string(257, 'k')}},
       "invalid_value"},
      {"ordering key control",
       {{"tenant", "acme"},
        {"id", "e1"},
        {"type", "t"},
        {"payload", "{}"},
        {"ordering_key", "a\tb"}},
       "invalid_value"},
      {"ordering key outside ascii",
       {{"tenant", "acme"},
        {"id", "e1"},
        {"type", "t"},
        {"payload", "{}"},
        {"ordering_key", "caf\xc3\xa9"}},
       "invalid_value"},
  };
  EntryMapper m(FieldNames{}, EntryLimits{});
  for (const auto& c : cases) {
    EventInput ev;
    auto bad = m.map(c.fields, ev);
    if (c.code == nullptr) {
      EXPECT_FALSE(bad.has_value()) << c.name << ": " << bad->message;
      EXPECT_EQ(ev.tenant, "acme") << c.name;
    } else {
      ASSERT_TRUE(bad.has_value()) << c.name;
      EXPECT_STREQ(bad->code, c.code) << c.name;
    }
  }
}

TEST(EntryMapper, UsesTheConfiguredFieldNamesAndKeepsThePayloadBytes) {
  EntryMapper m(FieldNames{"org", "key", "kind", "body", "ordering_key"}, EntryLimits{});
  EventInput ev;
  const std::string payload = "{ \"b\" : 1,\"a\":2 }";
  ASSERT_FALSE(
      m.map({{"org", "t1"}, {"key", "k"}, {"kind", "x.y"}, {"body", payload}}, ev).has_value());
  EXPECT_EQ(ev.tenant, "t1");
  EXPECT_EQ(ev.id, "k");
  EXPECT_EQ(ev.type, "x.y");
  EXPECT_EQ(ev.payload, payload);
  EXPECT_TRUE(m.map({{"tenant", "t1"}, {"id", "k"}, {"type", "x"}, {"payload", "{}"}}, ev));
}

// SPEC R13.1: the ordering key's field, mapped like the others; none when the entry has no such
// field, and the first of a repeated one wins.
TEST(EntryMapper, MapsTheOrderingKeyWhenTheEntryHasOne) {
  EntryMapper m(FieldNames{}, EntryLimits{});
  EventInput ev;
  ASSERT_FALSE(m.map({{"tenant", "acme"},
                      {"id", "e1"},
                      {"type", "t"},
                      {"ordering_key", "order-42"},
                      {"payload", "{}"},
                      {"ordering_key", "order-43"}},
                     ev)
                   .has_value());
  EXPECT_EQ(ev.ordering_key, "order-42");
  ASSERT_FALSE(
      m.map({{"tenant", "acme"}, {"id", "e2"}, {"type", "t"}, {"payload", "{}"}}, ev).has_value());
  EXPECT_EQ(ev.ordering_key, "");

  EntryMapper named(FieldNames{"org", "key", "kind", "body", "seq_key"}, EntryLimits{});
  ASSERT_FALSE(named
                   .map({{"org", "t1"},
                         {"key", "k"},
                         {"kind", "x"},
                         {"body", "{}"},
                         {"seq_key", "account-7"},
                         {"ordering_key", "ignored"}},
                        ev)
                   .has_value());
  EXPECT_EQ(ev.ordering_key, "account-7");
  auto bad =
      named.map({{"org", "t1"}, {"key", "k"}, {"kind", "x"}, {"body", "{}"}, {"seq_key", ""}}, ev);
  ASSERT_TRUE(bad);
  EXPECT_STREQ(bad->code, "invalid_value");
  EXPECT_NE(bad->message.find("ordering_key"), std::string::npos) << bad->message;
}

TEST(EntryMapper, RefusesAPayloadOverTheLimit) {
  EntryLimits l;
  l.max_payload_bytes = 8;
  EntryMapper m(FieldNames{}, l);
  EventInput ev;
  auto bad = m.map({{"tenant", "a"}, {"id", "k"}, {"type", "x"}, {"payload", "[1,2,3,4,5]"}}, ev);
  ASSERT_TRUE(bad);
  EXPECT_STREQ(bad->code, "too_large");
}

}  // namespace
}  // namespace ringcast::intake
