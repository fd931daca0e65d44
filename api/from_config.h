// From Config to the REST API's options (limits, tokens, the portal's settings): the API sits
// above the engine, so its options are built here rather than in engine/build.h.
#pragma once

#include "api/rest_api.h"
#include "engine/config.h"

namespace ringcast::api {

RestApiOptions rest_api_options(const Config& cfg);

}  // namespace ringcast::api
