// The OpenAPI 3.1 document of the HTTP API (docs/openapi.yaml) as JSON, compiled into the binary
// at build time (api/openapi.cmake: tools/yaml2json.py converts it, api/embed_openapi.cmake writes
// the bytes as a C++ source), so that the daemon describes exactly the API it serves: what
// GET /v1/openapi.json answers (RouteClass::kPublic, docs/security.md "Route classes").
#pragma once

#include <string_view>

namespace ringcast::api {

// The document's JSON text: static storage, valid for the life of the process.
std::string_view openapi_document();

}  // namespace ringcast::api
