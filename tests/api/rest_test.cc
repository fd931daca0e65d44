// The REST adapter's pure pieces: bearer-token comparison, the error-to-status mapping, path
// decoding (the JSON writer: tests/net/json_writer_test.cc). The routes themselves are tested on the real engine
// (tests/engine/rest_api_test.cc); the API tests do not link the engine.
#include "api/rest_api.h"

#include <gtest/gtest.h>

#include <simdjson.h>

namespace ringcast::api {
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

}  // namespace
}  // namespace ringcast::api
