// The merchant portal's pages as an HTTP handler of their own (docs/operations.md §9 "The
// portal"): what the API listener serves at /portal and /portal/… — the assets compiled into the
// binary and /portal/session — mounted beside the REST adapter (api/front.h). Each request is
// answered by Portal::handle on the clock's wall time, at once, on the server's loop thread.
//
// Invariants: no page needs a credential, so every request here has the one body limit it is
// given (the API's limit for a request without a valid credential, SPEC R14; docs/security.md);
// the handler adds nothing to the Portal's answer; the Portal and the clock are not owned and
// outlive the handler. api::ApiFront mounts it on the REST adapter's own Portal, not a copy, so
// the pages and the adapter agree on every link and session (SPEC R14.1, R14.3).
#pragma once

#include <cstddef>

#include "core/time.h"
#include "net/http_server.h"
#include "portal/portal.h"

namespace ringcast::portal {

class PortalPages final : public net::HttpHandler {
 public:
  PortalPages(const Portal& portal, size_t body_limit, Clock& clock);
  PortalPages(const PortalPages&) = delete;
  PortalPages& operator=(const PortalPages&) = delete;

  size_t max_body_bytes(const net::HttpRequest& head) override;
  void handle(net::HttpRequest&& request, net::Responder responder) override;

 private:
  const Portal& portal_;
  size_t body_limit_;
  Clock& clock_;
};

}  // namespace ringcast::portal
