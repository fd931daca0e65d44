#include "net/http_router.h"

#include <utility>

namespace ringcast::net {

void PrefixRouter::mount(std::string prefix, HttpHandler& handler) {
  add(std::move(prefix), false, handler);
}

void PrefixRouter::mount_exact(std::string path, HttpHandler& handler) {
  add(std::move(path), true, handler);
}

void PrefixRouter::add(std::string path, bool exact, HttpHandler& handler) {
  for (Mount& m : mounts_) {
    if (m.exact == exact && m.path == path) {
      m.handler = &handler;
      return;
    }
  }
  mounts_.push_back(Mount{std::move(path), exact, &handler});
}

bool PrefixRouter::covers(std::string_view prefix, std::string_view path) {
  if (!path.starts_with(prefix)) return false;
  if (path.size() == prefix.size()) return true;
  return prefix.ends_with('/') || path[prefix.size()] == '/';
}

HttpHandler& PrefixRouter::route(std::string_view path) const {
  const Mount* best = nullptr;
  for (const Mount& m : mounts_) {
    if (m.exact) {
      if (m.path == path) return *m.handler;
      continue;
    }
    if (covers(m.path, path) && (best == nullptr || m.path.size() > best->path.size())) best = &m;
  }
  return best != nullptr ? *best->handler : fallback_;
}

size_t PrefixRouter::max_body_bytes(const HttpRequest& head) {
  return route(head.path()).max_body_bytes(head);
}

void PrefixRouter::handle(HttpRequest&& request, Responder responder) {
  HttpHandler& to = route(request.path());
  to.handle(std::move(request), std::move(responder));
}

}  // namespace ringcast::net
