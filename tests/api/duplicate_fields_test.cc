// api/rest_api: a JSON name repeated at any depth of a request body is refused (400
// duplicate_field) with the field's path, never resolved to one of the values.
// Sans-I/O: RestApi::handle() against a StubEngine that answers inline, reads run inline.
#include <gtest/gtest.h>

#include <simdjson.h>

#include <optional>
#include <string>

#include "api/rest_api.h"
#include "tests/api/rest_call.h"
#include "tests/support/stub_engine.h"

namespace ringcast::api {
namespace {

constexpr const char* kToken = "dup-test-token";

class DuplicateFieldsTest : public test_support::RestCall<test::StubEngine> {
 protected:
  DuplicateFieldsTest() : RestCall(kToken) {}

  void expect_duplicate(const HttpResponse& r, std::string_view field) {
    EXPECT_EQ(r.status, 400) << r.body;
    auto [code, f] = error_of(r);
    EXPECT_EQ(code, "duplicate_field") << r.body;
    EXPECT_EQ(f, field) << r.body;
  }

  static std::string event(std::string_view payload) {
    return R"({"id":"e1","type":"order.created","payload":)" + std::string(payload) + "}";
  }
};

TEST_F(DuplicateFieldsTest, RateLimitWithTwoPerSecondIsRefusedOnCreateAndPatch) {
  constexpr std::string_view kBody =
      R"({"url":"https://hooks.example.com/a","rate_limit":{"per_second":1,"per_second":500}})";
  expect_duplicate(call("POST", "/v1/tenants/acme/endpoints", kBody), "rate_limit.per_second");
  expect_duplicate(call("PATCH", "/v1/tenants/acme/endpoints/7", kBody), "rate_limit.per_second");
  expect_duplicate(
      call("POST", "/v1/tenants/acme/endpoints",
           R"({"url":"https://hooks.example.com/a","rate_limit":{"burst":1,"burst":2}})"),
      "rate_limit.burst");
  EXPECT_TRUE(engine_.created.empty());
  EXPECT_TRUE(engine_.patched.empty());
}

TEST_F(DuplicateFieldsTest, TopLevelDuplicatesStillRefusedOnEveryObjectRoute) {
  expect_duplicate(
      call("PUT", "/v1/tenants/acme/subscription", R"({"active":true,"active":false})"), "active");
  expect_duplicate(
      call("POST", "/v1/tenants/acme/endpoints/7/secret/rotate", R"({"secret":"a","secret":"b"})"),
      "secret");
  expect_duplicate(
      call("POST", "/v1/tenants/acme/events", R"({"id":"a","id":"b","type":"t","payload":1})"),
      "id");
  EXPECT_TRUE(engine_.subscriptions.empty());
  EXPECT_TRUE(engine_.rotated.empty());
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST_F(DuplicateFieldsTest, PayloadDuplicatesAreRefusedAtEveryDepthWithTheirPath) {
  // The money rule reads payload.status: a receiver must not see another value than ringcast.
  expect_duplicate(call("POST", "/v1/tenants/acme/events",
                        event(R"({"status":"paid","amount":1,"status":"failed"})")),
                   "payload.status");
  expect_duplicate(
      call("POST", "/v1/tenants/acme/events", event(R"({"data":{"object":{"s":1,"s":2}}})")),
      "payload.data.object.s");
  // Arrays of objects: the index is part of the path.
  expect_duplicate(call("POST", "/v1/tenants/acme/events", event(R"([{"a":1},{"b":1,"b":2}])")),
                   "payload[1].b");
  expect_duplicate(
      call("POST", "/v1/tenants/acme/events", event(R"({"items":[[],[{"x":{"y":1,"y":1}}]]})")),
      "payload.items[1][0].x.y");
  // Names are compared after unescaping: "\u0073" is "s".
  expect_duplicate(call("POST", "/v1/tenants/acme/events", event(R"({"s":1,"\u0073":2})")),
                   "payload.s");
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST_F(DuplicateFieldsTest, DuplicateAfterManyNamesIsFound) {
  // Past the linear scan's 16 names the set switches to hashing; it must still catch the repeat.
  std::string obj = "{";
  for (int i = 0; i < 40; ++i) obj += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  obj += R"("k3":0})";
  expect_duplicate(call("POST", "/v1/tenants/acme/events", event(obj)), "payload.k3");
  obj.replace(obj.rfind("\"k3\""), 4, "\"k40\"");
  HttpResponse ok = call("POST", "/v1/tenants/acme/events", event(obj));
  EXPECT_EQ(ok.status, 202) << ok.body;
}

TEST_F(DuplicateFieldsTest, BulkLinesWithNestedDuplicatesAreRefusedPerLine) {
  const std::string body =
      R"({"tenant":"acme","id":"b1","type":"t","payload":{"a":{"k":1},"b":{"k":1}}})"
      "\n"
      R"({"tenant":"acme","id":"b2","type":"t","payload":{"a":{"k":1,"k":2}}})"
      "\n";
  HttpResponse r = call("POST", "/v1/events/bulk", body);
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::element el;
  ASSERT_FALSE(parser_.parse(r.body).get(el)) << r.body;
  int64_t accepted = -1, errors = -1;
  EXPECT_FALSE(el["accepted"].get(accepted));
  EXPECT_FALSE(el["errors"].get(errors));
  EXPECT_EQ(accepted, 1);
  EXPECT_EQ(errors, 1);
  std::string_view code, field;
  EXPECT_FALSE(el["results"].at(1)["error"]["code"].get(code)) << r.body;
  EXPECT_FALSE(el["results"].at(1)["error"]["field"].get(field)) << r.body;
  EXPECT_EQ(code, "duplicate_field");
  EXPECT_EQ(field, "payload.a.k");
  ASSERT_EQ(engine_.submitted.size(), 1u);
  EXPECT_EQ(engine_.submitted[0].id, "b1");
}

TEST_F(DuplicateFieldsTest, SameNamesInDifferentObjectsAreValidAndPassThroughByteExact) {
  const std::string payload =
      R"({"a":{"k":1,"id":2},"b":{"k":1},"list":[{"k":1},{"k":2}],"k":[{"k":{"k":0}}]})";
  HttpResponse r = call("POST", "/v1/tenants/acme/events", event(payload));
  EXPECT_EQ(r.status, 202) << r.body;
  ASSERT_EQ(engine_.submitted.size(), 1u);
  EXPECT_EQ(engine_.submitted[0].payload, payload);

  r = call("POST", "/v1/tenants/acme/endpoints",
           R"({"url":"https://hooks.example.com/a","rate_limit":{"per_second":2.5,"burst":4}})");
  EXPECT_EQ(r.status, 201) << r.body;
  ASSERT_EQ(engine_.created.size(), 1u);
  EXPECT_EQ(engine_.created[0].second.rate_limit.per_second, 2.5);
  EXPECT_EQ(engine_.created[0].second.rate_limit.burst, 4u);
}

}  // namespace
}  // namespace ringcast::api
