// A Kafka record mapped to a ringcast event in each [mapping] source (bridge/kafka/mapping.h,
// docs/operations.md §6 "Kafka bridge"), and the lines the bridge writes: the checks are the bus
// intake's, the payload's bytes are kept (SPEC R1), and no payload can reach into a line's fields.
#include "bridge/kafka/mapping.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <deque>
#include <string>
#include <vector>

namespace ringcast::kafka_bridge {
namespace {

MappingSection mapping(MappingSource source) {
  MappingSection m;
  m.source = source;
  return m;
}

// Bytes a RecordView points into, kept for the whole test binary (a deque never moves them).
std::string_view keep(const std::string& s) {
  static std::deque<std::string> store;
  store.push_back(s);
  return store.back();
}

RecordView headers_record(const std::string& value) {
  RecordView r;
  r.topic = "events";
  r.partition = 2;
  r.offset = 41;
  r.value = keep(value);
  r.headers = {{"tenant", "acme"}, {"id", "evt-1"}, {"type", "order.paid"}};
  return r;
}

TEST(KafkaBridgeMapping, HeadersModeTakesTheNamesFromHeadersAndTheValueAsThePayload) {
  RecordMapper m(mapping(MappingSource::kHeaders));
  RecordView r = headers_record("{\"b\": 1,  \"a\":[ 2 ]}");
  r.headers.emplace_back("ordering_key", "order-7");
  r.headers.emplace_back("other", "ignored");
  r.headers.emplace_back("tenant", "second-is-ignored");
  EventInput ev;
  auto bad = m.map(r, ev);
  ASSERT_FALSE(bad) << bad->code << " " << bad->message;
  EXPECT_EQ(ev.tenant, "acme");
  EXPECT_EQ(ev.id, "evt-1");
  EXPECT_EQ(ev.type, "order.paid");
  EXPECT_EQ(ev.ordering_key, "order-7");
  EXPECT_EQ(ev.payload, "{\"b\": 1,  \"a\":[ 2 ]}");
}

TEST(KafkaBridgeMapping, RefusalsCarryTheIntakesCodes) {
  struct Case {
    const char* what;
    RecordView record;
    const char* code;
  };
  RecordMapper m(mapping(MappingSource::kHeaders));
  auto with = [](const std::string& value, std::vector<std::pair<std::string, std::string>> h) {
    RecordView r;
    r.topic = "events";
    r.value = keep(value);
    for (auto& [k, v] : h) r.headers.emplace_back(keep(k), keep(v));
    return r;
  };
  RecordView tomb = headers_record("{}");
  tomb.value.reset();
  RecordView null_header = headers_record("{}");
  null_header.headers[0].second.reset();  // a tenant header without a value
  const std::vector<Case> cases = {
      {"not JSON", headers_record("{\"a\": nope}"), "invalid_json"},
      {"two values", headers_record("{} {}"), "invalid_json"},
      {"empty value", headers_record(""), "invalid_json"},
      {"tombstone", tomb, "missing_field"},
      {"no tenant", with("{}", {{"id", "e"}, {"type", "t"}}), "missing_field"},
      {"no id", with("{}", {{"tenant", "a"}, {"type", "t"}}), "missing_field"},
      {"no type", with("{}", {{"tenant", "a"}, {"id", "e"}}), "missing_field"},
      {"tenant alphabet", with("{}", {{"tenant", "a/b"}, {"id", "e"}, {"type", "t"}}),
       "invalid_value"},
      {"id with a space", with("{}", {{"tenant", "a"}, {"id", "e 1"}, {"type", "t"}}),
       "invalid_event_id"},
      {"empty ordering key",
       with("{}", {{"tenant", "a"}, {"id", "e"}, {"type", "t"}, {"ordering_key", ""}}),
       "invalid_value"},
      {"header without a value", null_header, "invalid_value"},
  };
  for (const Case& c : cases) {
    EventInput ev;
    auto bad = m.map(c.record, ev);
    ASSERT_TRUE(bad) << c.what;
    EXPECT_STREQ(bad->code, c.code) << c.what << ": " << bad->message;
    EXPECT_FALSE(bad->message.empty()) << c.what;
  }
}

TEST(KafkaBridgeMapping, JsonModeTakesThePayloadMembersBytes) {
  RecordMapper m(mapping(MappingSource::kJson));
  RecordView r;
  r.topic = "events";
  const std::string value =
      "{ \"meta\": {\"x\": [1]}, \"tenant\": \"acme\", \"id\": \"e\\u0031\", \"type\": \"t\","
      " \"payload\" :  {\"z\": 1,   \"a\" : \"caf\xc3\xa9\"}  , \"id\": \"ignored\" }";
  r.value = value;
  EventInput ev;
  auto bad = m.map(r, ev);
  ASSERT_FALSE(bad) << bad->code << " " << bad->message;
  EXPECT_EQ(ev.tenant, "acme");
  EXPECT_EQ(ev.id, "e1");  // a JSON string: unescaped
  EXPECT_EQ(ev.payload, "{\"z\": 1,   \"a\" : \"caf\xc3\xa9\"}");
  EXPECT_TRUE(ev.ordering_key.empty());

  const std::string scalar = "{\"tenant\":\"a\",\"id\":\"e\",\"type\":\"t\",\"payload\": 12.50 }";
  r.value = scalar;
  ASSERT_FALSE(m.map(r, ev));
  EXPECT_EQ(ev.payload, "12.50");

  struct Bad {
    std::string value;
    const char* code;
  };
  for (const Bad& b :
       {Bad{"[1]", "invalid_json"},
        Bad{"{\"tenant\":1,\"id\":\"e\",\"type\":\"t\","
            "\"payload\":{}}",
            "invalid_value"},
        Bad{"{\"tenant\":\"a\",\"id\":\"e\",\"type\":\"t\"}", "missing_field"},
        Bad{"{\"tenant\":\"a\",\"id\":\"e\",\"type\":\"t\",\"payload\":{\"a\":}}", "invalid_json"},
        Bad{"{\"tenant\":\"a\",\"id\":\"e\",\"type\":\"t\",\"payload\":{}} x", "invalid_json"}}) {
    r.value = b.value;
    auto e = m.map(r, ev);
    ASSERT_TRUE(e) << b.value;
    EXPECT_STREQ(e->code, b.code) << b.value << ": " << e->message;
  }
}

TEST(KafkaBridgeMapping, KeyModeReadsTheKeyObjectAndTheValueAsPayload) {
  RecordMapper m(mapping(MappingSource::kKey));
  RecordView r;
  r.topic = "events";
  const std::string key =
      "{\"tenant\":\"acme\",\"id\":\"k1\",\"type\":\"t\",\"ordering_key\":\"o\"}";
  const std::string value = "[1, 2]";
  r.key = key;
  r.value = value;
  EventInput ev;
  ASSERT_FALSE(m.map(r, ev));
  EXPECT_EQ(ev.id, "k1");
  EXPECT_EQ(ev.ordering_key, "o");
  EXPECT_EQ(ev.payload, "[1, 2]");
  r.key.reset();
  auto bad = m.map(r, ev);
  ASSERT_TRUE(bad);
  EXPECT_STREQ(bad->code, "missing_field");
  const std::string not_object = "acme";
  r.key = not_object;
  bad = m.map(r, ev);
  ASSERT_TRUE(bad);
  EXPECT_STREQ(bad->code, "invalid_json");
}

TEST(KafkaBridgeMapping, OffsetIdsAndTheDefaultTenant) {
  MappingSection s = mapping(MappingSource::kHeaders);
  s.id_from = IdFrom::kTopicPartitionOffset;
  s.default_tenant = "fallback";
  RecordMapper m(s);
  RecordView r = headers_record("{}");
  EventInput ev;
  ASSERT_FALSE(m.map(r, ev));
  EXPECT_EQ(ev.id, "events-2-41");  // the record's own id header does not win
  EXPECT_EQ(ev.tenant, "acme");     // the default only when the record names none
  r.headers.erase(r.headers.begin());
  ASSERT_FALSE(m.map(r, ev));
  EXPECT_EQ(ev.tenant, "fallback");
  EXPECT_EQ(topic_partition_offset_id("t.x", 0, 9007199254740993), "t.x-0-9007199254740993");
}

TEST(KafkaBridgeMapping, LinesAreOneJsonObjectEachWithThePayloadAsItIs) {
  EventInput ev;
  ev.tenant = "acme";
  ev.id = "id\"with\\quotes";
  ev.type = "order.paid";
  ev.ordering_key = std::string(1, 'k');  // (a 1-byte literal trips GCC 12's -Wrestrict)
  ev.payload = "{\"a\":  1}";
  std::string body;
  append_bulk_line(ev, body);
  append_bulk_line(ev, body);
  EXPECT_EQ(body,
            "{\"tenant\":\"acme\",\"id\":\"id\\\"with\\\\quotes\",\"type\":\"order.paid\","
            "\"ordering_key\":\"k\",\"payload\":{\"a\":  1}}\n"
            "{\"tenant\":\"acme\",\"id\":\"id\\\"with\\\\quotes\",\"type\":\"order.paid\","
            "\"ordering_key\":\"k\",\"payload\":{\"a\":  1}}\n");
  simdjson::dom::parser p;
  simdjson::dom::element el;
  const std::string line = body.substr(0, body.find('\n'));
  ASSERT_FALSE(p.parse(line).get(el));
  std::string_view id;
  ASSERT_FALSE(el["id"].get(id));
  EXPECT_EQ(id, ev.id);
  EXPECT_FALSE(needs_single_route(ev));
  ev.ordering_key.clear();
  ev.payload = "{\n\"a\": 1\n}";
  EXPECT_TRUE(needs_single_route(ev));
  EXPECT_EQ(single_body(ev),
            "{\"id\":\"id\\\"with\\\\quotes\",\"type\":\"order.paid\",\"payload\":{\n\"a\": 1\n}}");
  std::string s;
  append_json_string(std::string("a\x01\n", 3), s);
  EXPECT_EQ(s, "\"a\\u0001\\u000a\"");
}

}  // namespace
}  // namespace ringcast::kafka_bridge
