// The HTTP server's types (net/http_server.h) by their short names in the api module.
#pragma once

#include "net/http_server.h"

namespace ringcast::api {

using net::HttpHandler;
using net::HttpHeader;
using net::HttpRequest;
using net::HttpResponse;
using net::Responder;

}  // namespace ringcast::api
