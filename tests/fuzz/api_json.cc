// Fuzz target: the REST API's JSON object readers (api/rest_*.cc: events, endpoints
// create and PATCH, subscription, secret rotation) and its path and query parsing, through
// RestApi::handle() on a stub engine. See api_harness.h for what every answer must satisfy.
#include <algorithm>

#include "tests/fuzz/api_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ringcast::fuzz::Api api;
  ringcast::fuzz::Input in(data, size);
  const uint8_t route = in.u8();
  const std::string_view rest = in.rest();
  switch (route % 7) {
    case 0:
      api.call("POST", "/v1/tenants/acme/events", rest);
      break;
    case 1:
      api.call("POST", "/v1/tenants/acme/endpoints", rest);
      break;
    case 2:
      api.call("PATCH", "/v1/tenants/acme/endpoints/7", rest);
      break;
    case 3:
      api.call("PUT", "/v1/tenants/acme/subscription", rest);
      break;
    case 4:
      api.call("POST", "/v1/tenants/acme/endpoints/7/secret/rotate", rest);
      break;
    default: {
      // A target as the request parser passes it on (visible ASCII), any method.
      if (rest.empty() ||
          !std::all_of(rest.begin(), rest.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
        return 0;
      }
      static constexpr const char* kMethods[] = {"GET", "POST", "PATCH", "DELETE", "PUT"};
      api.call(kMethods[route / 7 % 5], "/v1/" + std::string(rest), "{}");
      break;
    }
  }
  return 0;
}
