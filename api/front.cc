#include "api/front.h"

#include <utility>

namespace ringcast::api {

ApiFront::ApiFront(RestApi& rest)
    : pages_(rest.portal(), rest.options().max_unauthenticated_body_bytes, clock_), router_(rest) {
  router_.mount("/portal", pages_);
  router_.mount_exact("/portal/confirm-email", rest);
}

size_t ApiFront::max_body_bytes(const HttpRequest& head) {
  return router_.max_body_bytes(head);
}

void ApiFront::handle(HttpRequest&& request, Responder responder) {
  router_.handle(std::move(request), std::move(responder));
}

}  // namespace ringcast::api
