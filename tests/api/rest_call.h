// What the sans-I/O API tests share: RestApi::handle() against a test engine (the inline
// StubEngine or the FakeEngine that answers on its own thread), reads run inline, one request
// at a time with the admin token; the JSON error's code and field.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "api/rest_api.h"

namespace ringcast::api::test_support {

template <class EngineT>
class RestCall : public ::testing::Test {
 protected:
  explicit RestCall(const char* token) : token_(token), api_(engine_, options(token)) {}

  static RestApiOptions options(const char* token) {
    RestApiOptions o;
    o.api_token = token;
    o.read_threads = 0;
    return o;
  }

  HttpResponse call(std::string method, std::string target, std::string_view body = {}) {
    HttpRequest req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.headers.push_back({"authorization", std::string("Bearer ") + token_});
    req.body.reserve(body.size() + net::kBodyPadding);  // as the server hands bodies over
    req.body.assign(body);
    auto answer = std::make_shared<std::promise<HttpResponse>>();
    std::future<HttpResponse> got = answer->get_future();
    api_.handle(std::move(req), Responder::from_function(
                                    [answer](HttpResponse r) { answer->set_value(std::move(r)); }));
    if (got.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "no answer";
      return HttpResponse{};
    }
    return got.get();
  }

  // The error's code and field ("" when absent); fails the test on a body of the wrong shape
  // (an error without a message, too).
  std::pair<std::string, std::string> error_of(const HttpResponse& r) {
    simdjson::dom::element el;
    EXPECT_FALSE(parser_.parse(r.body).get(el)) << r.body;
    std::string_view code, field, message;
    EXPECT_FALSE(el["error"]["code"].get(code)) << r.body;
    EXPECT_FALSE(el["error"]["message"].get(message)) << r.body;
    if (el["error"]["field"].get(field)) field = "";
    return {std::string(code), std::string(field)};
  }

  const char* token_;
  EngineT engine_;
  RestApi api_;
  simdjson::dom::parser parser_;
};

}  // namespace ringcast::api::test_support
