// net/json_writer: valid JSON in valid UTF-8 whatever the input.
#include "net/json_writer.h"

#include <gtest/gtest.h>

#include <simdjson.h>

namespace ringcast::net {
namespace {

TEST(JsonWriterTest, EscapesAndRepairsUtf8) {
  std::string out;
  append_json_string(out, std::string("a\"b\\c\n\t\x01\x7f", 9));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\"");
  out.clear();
  append_json_string(out, "\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80");  // é ✓ 😀 stay
  EXPECT_EQ(out, "\"\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80\"");
  out.clear();
  append_json_string(out,
                     "\xc0\xaf|\xed\xa0\x80|\xe2\x9c|\xf5\x80\x80\x80");  // overlong, surrogate,
                                                                          // truncated, > U+10FFFF
  simdjson::dom::parser p;
  simdjson::dom::element el;
  ASSERT_FALSE(p.parse(out).get(el)) << out;
  EXPECT_EQ(out.find('\xc0'), std::string::npos);

  JsonWriter w;
  w.begin_object().field("a", 1).key("b").begin_array().value(true).null().value(2.5).end_array();
  w.field("c", std::string_view("x")).key("d").raw(R"({"k":[]})").end_object();
  EXPECT_EQ(w.str(), R"({"a":1,"b":[true,null,2.5],"c":"x","d":{"k":[]}})");
}

}  // namespace
}  // namespace ringcast::net
