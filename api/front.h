// The API listener's one handler (docs/architecture.md "api/"): the REST adapter with the
// merchant portal's pages mounted beside it on a per-prefix router (net/http_router.h). The node
// serves it (node/node.cc), and the tests that reach /portal drive it, so both see one
// composition.
//
// Where a request goes, by its path as sent:
//   /portal, /portal/…        portal::PortalPages on the RestApi's own Portal (the same secret,
//                             key checks and cutoff as the sessions the adapter accepts,
//                             SPEC R14.1, R14.3), bodies held to the limit of a request without
//                             a valid credential (RestApiOptions::max_unauthenticated_body_bytes)
//   /portal/confirm-email     (exactly) the RestApi: the owner-address confirmation calls the
//                             engine (SPEC R14, docs/security.md "Owner e-mail")
//   anything else             the RestApi
// Invariants: the front adds nothing to a request or an answer; the RestApi is not owned and
// outlives the front; handle() and max_body_bytes() run on the server's loop thread.
#pragma once

#include <cstddef>

#include "api/http_names.h"
#include "api/rest_api.h"
#include "net/http_router.h"
#include "net/system_clock.h"
#include "portal/pages.h"

namespace ringcast::api {

class ApiFront final : public HttpHandler {
 public:
  explicit ApiFront(RestApi& rest);
  ApiFront(const ApiFront&) = delete;
  ApiFront& operator=(const ApiFront&) = delete;

  size_t max_body_bytes(const HttpRequest& head) override;
  void handle(HttpRequest&& request, Responder responder) override;

 private:
  net::SystemClock clock_;  // the portal pages' wall time, as the adapter reads its own
  portal::PortalPages pages_;
  net::PrefixRouter router_;
};

}  // namespace ringcast::api
