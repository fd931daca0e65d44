// Lua scripts run by SHA1 with a transparent fallback: evalsha() sends EVALSHA and,
// only when the server answers NOSCRIPT (its script cache was flushed, or another node of a
// cluster has never seen it), sends EVAL with the source, which also caches it there.
// Invariants: the fallback is safe because NOSCRIPT means the script did not run; it happens at
// most once per call and within the call's deadline; any other reply (error or not) is the
// caller's. The SHA1 is computed locally with BoringSSL, so no SCRIPT LOAD round trip is needed.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "redis/client.h"

namespace ringcast::redis {

class Script {
 public:
  explicit Script(std::string source);
  const std::string& source() const { return source_; }
  const std::string& sha1() const { return sha1_; }  // 40 lowercase hex digits

 private:
  std::string source_;
  std::string sha1_;
};

// Keys route the command in a cluster (the first key's slot); with no keys it goes to any node.
// `options.key_index` is ignored. `script` and `client` must outlive the call's completion
// (scripts are meant to be long-lived constants).
void evalsha(Client& client, const Script& script, std::span<const std::string_view> keys,
             std::span<const std::string_view> args, Callback cb,
             const CommandOptions& options = {});

}  // namespace ringcast::redis
