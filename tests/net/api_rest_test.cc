// The REST adapter's pure pieces: bearer-token comparison, the error-to-status mapping, path
// decoding, the JSON writer. The routes themselves are tested on the real engine
// (tests/engine/rest_api_test.cc); the net tests do not link the engine.
#include "net/api/rest_api.h"

#include <gtest/gtest.h>

#include <simdjson.h>

#include "net/api/json_writer.h"

namespace ringcast::net::api {
namespace {

// --- auth, errors, paths -------------------------------------------------------------------------

TEST(BearerToken, ComparesWholeTokens) {
  EXPECT_TRUE(bearer_token_matches("Bearer abc", "abc"));
  EXPECT_TRUE(bearer_token_matches("bearer abc", "abc"));
  EXPECT_TRUE(bearer_token_matches("Bearer  abc ", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer abd", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer ab", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer abcd", "abc"));
  EXPECT_FALSE(bearer_token_matches("Basic abc", "abc"));
  EXPECT_FALSE(bearer_token_matches("abc", "abc"));
  EXPECT_FALSE(bearer_token_matches("Bearer ", ""));
}

TEST(ErrorMapping, StatusPerErrc) {
  EXPECT_EQ(http_status_for(make_error(Errc::kInvalidArgument, "x")), 400);
  EXPECT_EQ(http_status_for(make_error(Errc::kInvalidArgument, "x", "url", "not_https")), 422);
  EXPECT_EQ(http_status_for(make_error(Errc::kInvalidArgument, "x", "url", "url_too_long")), 422);
  EXPECT_EQ(http_status_for(make_error(Errc::kNotFound, "x")), 404);
  EXPECT_EQ(http_status_for(make_error(Errc::kConflict, "x")), 409);
  EXPECT_EQ(http_status_for(make_error(Errc::kLimitExceeded, "x")), 429);
  EXPECT_EQ(http_status_for(make_error(Errc::kUnavailable, "x")), 503);
  EXPECT_EQ(http_status_for(make_error(Errc::kIo, "x")), 500);
  HttpResponse r = error_response(make_error(Errc::kConflict, "taken", "id", "conflict"));
  EXPECT_EQ(r.body, R"({"error":{"code":"conflict","message":"taken","field":"id"}})");
}

TEST(PercentDecode, Forms) {
  EXPECT_EQ(percent_decode("a%2Fb%20c", false), "a/b c");
  EXPECT_EQ(percent_decode("a+b", false), "a+b");
  EXPECT_EQ(percent_decode("a+b", true), "a b");
  EXPECT_EQ(percent_decode("%zz", false), std::nullopt);
  EXPECT_EQ(percent_decode("%2", false), std::nullopt);
  EXPECT_EQ(percent_decode("%", false), std::nullopt);
}

// --- JSON writer -------------------------------------------------------------------------------

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
}  // namespace ringcast::net::api
