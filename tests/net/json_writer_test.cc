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

namespace ringcast::net {
namespace {

// Large doubles are written with an exponent, so a reader that keeps integers in 64 bits
// (simdjson) reads them back as the same double (found by the API fuzzer: a rate of 2.7e19
// came out as 20 plain digits, which simdjson refuses as a big integer).
TEST(JsonWriterTest, LargeDoublesReadBackExactly) {
  for (double d : {0.0, 2.5, 1e14, 123456789012345.0, 1e15, 26666666666666668032.0, 2.6e29, -1e300,
                   1.7976931348623157e308}) {
    JsonWriter w;
    w.begin_array().value(d).end_array();
    simdjson::dom::parser p;
    simdjson::dom::element el;
    ASSERT_EQ(p.parse(w.str()).get(el), simdjson::SUCCESS) << w.str();
    double back = 0;
    ASSERT_EQ(el.at(0).get_double().get(back), simdjson::SUCCESS) << w.str();
    EXPECT_EQ(back, d) << w.str();
  }
}

}  // namespace
}  // namespace ringcast::net
