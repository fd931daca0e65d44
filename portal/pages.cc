#include "portal/pages.h"

namespace ringcast::portal {

PortalPages::PortalPages(const Portal& portal, size_t body_limit, Clock& clock)
    : portal_(portal), body_limit_(body_limit), clock_(clock) {}

size_t PortalPages::max_body_bytes(const net::HttpRequest&) {
  return body_limit_;
}

void PortalPages::handle(net::HttpRequest&& request, net::Responder responder) {
  responder.send(portal_.handle(request, clock_.wall_now()));
}

}  // namespace ringcast::portal
