// A per-prefix HTTP handler: one listener, several handlers, each mounted at a path (the API
// listener serves the REST adapter with the portal's pages mounted beside it: api/front.h,
// docs/architecture.md "api/").
//
// Invariants: a request goes to exactly one handler, chosen from its path alone
// (HttpRequest::path(): the target up to '?', as sent: no percent-decoding, no dot-segment
// removal, no folding of "//"), and max_body_bytes() and handle() choose the same one for the
// same path. The choice: an exact mount equal to the path; else the longest prefix mount that
// covers the path (a prefix covers itself and what continues it past a '/' — "/portal" covers
// "/portal" and "/portal/x", never "/portals"; a prefix that ends in '/' covers what starts
// with it); else the default handler. The router adds nothing to an answer and changes nothing
// in a request. Mounts are made before the server starts and only read afterwards, so routing
// takes no lock; the handlers are not owned and must outlive the router.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "net/http_server.h"

namespace ringcast::net {

class PrefixRouter final : public HttpHandler {
 public:
  // `fallback` answers every path no mount takes.
  explicit PrefixRouter(HttpHandler& fallback) : fallback_(fallback) {}
  PrefixRouter(const PrefixRouter&) = delete;
  PrefixRouter& operator=(const PrefixRouter&) = delete;

  // `handler` takes the paths `prefix` covers (see above), unless a longer prefix or an exact
  // mount takes them. Mounting a prefix again replaces its handler.
  void mount(std::string prefix, HttpHandler& handler);
  // `handler` takes exactly `path` (not what continues it: "/portal/confirm-email" does not
  // take "/portal/confirm-email/x"); it wins over every prefix. Mounting a path again replaces
  // its handler.
  void mount_exact(std::string path, HttpHandler& handler);

  // The handler a request for `path` goes to.
  HttpHandler& route(std::string_view path) const;
  // Whether the prefix `prefix` covers `path`.
  static bool covers(std::string_view prefix, std::string_view path);

  size_t max_body_bytes(const HttpRequest& head) override;
  void handle(HttpRequest&& request, Responder responder) override;

 private:
  struct Mount {
    std::string path;
    bool exact = false;
    HttpHandler* handler = nullptr;
  };
  void add(std::string path, bool exact, HttpHandler& handler);

  HttpHandler& fallback_;
  std::vector<Mount> mounts_;
};

}  // namespace ringcast::net
