// Shared by the REST API fuzz targets: one RestApi on a StubEngine (reads inline), a request
// sent through handle() the way the server hands it over (body with kBodyPadding spare bytes,
// allocated to exactly that so ASan sees a read past the padding), and the checks every
// answer must pass: a known status, a JSON body, the documented error shape; and what reached
// the engine met the readers' promises (SPEC R1 payload is valid JSON, no repeated names).
#pragma once

#include <simdjson.h>

#include <memory>
#include <optional>
#include <string>

#include "api/rest_api.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/stub_engine.h"

namespace ringcast::fuzz {

inline constexpr const char* kToken = "fuzz-token";

struct Api {
  test::StubEngine engine;
  api::RestApiOptions options;
  std::unique_ptr<api::RestApi> api;
  simdjson::dom::parser dom;

  Api() {
    options.api_token = kToken;
    options.read_threads = 0;
    options.max_bulk_events = 64;
    options.max_id_bytes = 32;
    options.max_tenant_bytes = 16;
    options.max_type_bytes = 32;
    options.max_event_types = 4;
    api = std::make_unique<api::RestApi>(engine, options);
  }

  // No object repeats a name, at any depth.
  static bool unique_names(simdjson::dom::element el) {
    simdjson::dom::array arr;
    if (!el.get_array().get(arr)) {
      for (auto item : arr) {
        if (!unique_names(item)) return false;
      }
      return true;
    }
    simdjson::dom::object obj;
    if (el.get_object().get(obj)) return true;
    std::vector<std::string_view> keys;
    for (auto kv : obj) keys.push_back(kv.key);
    std::sort(keys.begin(), keys.end());
    if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) return false;
    for (auto kv : obj) {
      if (!unique_names(kv.value)) return false;
    }
    return true;
  }

  net::HttpResponse call(std::string method, std::string target, std::string_view body) {
    net::HttpRequest req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.headers.push_back({"host", "fuzz"});
    req.headers.push_back({"authorization", std::string("Bearer ") + kToken});
    req.body.reserve(body.size() + net::kBodyPadding);
    req.body.assign(body);
    std::optional<net::HttpResponse> out;
    engine.clear();
    api->handle(std::move(req),
                net::Responder::from_function([&](net::HttpResponse r) { out = std::move(r); }));
    FUZZ_CHECK(out.has_value());  // every route answers inline on the stub engine
    check_answer(*out);
    check_engine_input();
    return std::move(*out);
  }

  void check_answer(const net::HttpResponse& r) {
    const uint16_t s = r.status;
    FUZZ_CHECK(s == 200 || s == 201 || s == 202 || s == 400 || s == 404 || s == 405 || s == 409 ||
               s == 413 || s == 422);
    simdjson::dom::element el;
    FUZZ_CHECK(dom.parse(r.body).get(el) == simdjson::SUCCESS);
    if (s >= 400) {
      std::string_view code, message;
      FUZZ_CHECK(el["error"]["code"].get(code) == simdjson::SUCCESS && !code.empty());
      FUZZ_CHECK(el["error"]["message"].get(message) == simdjson::SUCCESS);
    }
  }

  void check_engine_input() {
    for (const EventInput& e : engine.submitted) {
      FUZZ_CHECK(!e.id.empty() && e.id.size() <= options.max_id_bytes);
      FUZZ_CHECK(!e.type.empty() && e.type.size() <= options.max_type_bytes);
      FUZZ_CHECK(!e.tenant.empty() && e.tenant.size() <= options.max_tenant_bytes);
      simdjson::dom::element el;
      FUZZ_CHECK(dom.parse(e.payload).get(el) == simdjson::SUCCESS);
      FUZZ_CHECK(unique_names(el));
    }
    for (const auto& [tenant, spec] : engine.created) {
      FUZZ_CHECK(spec.event_types.size() <= options.max_event_types);
      FUZZ_CHECK(spec.rate_limit.per_second >= 0);
      FUZZ_CHECK(!spec.policy.empty());
      FUZZ_CHECK(!spec.secret || !spec.secret->empty());
    }
    for (const EndpointPatch& p : engine.patched) {
      FUZZ_CHECK(!p.event_types || p.event_types->size() <= options.max_event_types);
      FUZZ_CHECK(!p.rate_limit || p.rate_limit->per_second >= 0);
    }
  }
};

}  // namespace ringcast::fuzz
