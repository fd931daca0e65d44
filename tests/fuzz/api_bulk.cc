// Fuzz target: the REST API's bulk NDJSON reader (POST /v1/events/bulk, api/rest_events.cc
// submit_bulk): one event object per line, each line answered on its own. Besides the checks
// of api_harness.h: the per-line results add up to the line count, and every accepted line's
// event reached the engine.
#include "tests/fuzz/api_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ringcast::fuzz::Api api;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  ringcast::net::HttpResponse r = api.call("POST", "/v1/events/bulk", body);
  if (r.status != 200) return 0;
  simdjson::dom::element el;
  FUZZ_CHECK(api.dom.parse(r.body).get(el) == simdjson::SUCCESS);
  uint64_t lines = 0, accepted = 0, duplicates = 0, conflicts = 0, errors = 0;
  FUZZ_CHECK(el["lines"].get(lines) == simdjson::SUCCESS);
  FUZZ_CHECK(el["accepted"].get(accepted) == simdjson::SUCCESS);
  FUZZ_CHECK(el["duplicates"].get(duplicates) == simdjson::SUCCESS);
  FUZZ_CHECK(el["conflicts"].get(conflicts) == simdjson::SUCCESS);
  FUZZ_CHECK(el["errors"].get(errors) == simdjson::SUCCESS);
  FUZZ_CHECK(accepted + duplicates + conflicts + errors == lines);
  FUZZ_CHECK(lines <= api.options.max_bulk_events);
  simdjson::dom::array results;
  FUZZ_CHECK(el["results"].get(results) == simdjson::SUCCESS);
  FUZZ_CHECK(results.size() == lines);
  FUZZ_CHECK(accepted == api.engine.submitted.size());  // the stub accepts every event
  return 0;
}
