// Who a /v1 request acts as (SPEC R14, docs/security.md): the admin token (the platform), a
// tenant-scoped key, or a portal session. Every principal but the admin reaches one tenant
// only; a forwarded call (cluster mode) carries its principal signed, never a credential.
#pragma once

#include <cstdint>
#include <string>

namespace ringcast::api {

struct Principal {
  enum class Kind : uint8_t { kAdmin, kKey, kSession };
  Kind kind = Kind::kAdmin;
  std::string tenant;  // kKey, kSession
  bool read_only = false;
  // kKey: the key's id. kSession: the id of the key that minted the session's link (empty: the
  // admin minted it). Revoking or expiring that key ends what it minted (SPEC R14).
  std::string key_id;
  bool admin() const { return kind == Kind::kAdmin; }
};

}  // namespace ringcast::api
