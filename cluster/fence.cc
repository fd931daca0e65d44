#include "cluster/fence.h"

#include "cluster/keys.h"
#include "cluster/lua_scripts.h"

namespace ringcast::cluster {

// HMGET on a missing (expired, released) lease gives false, false: fenced as well. Redis 7
// freezes time for the length of a script, so a lease that expires "during" the body cannot
// be seen alive by the check and dead by the write.
const std::string_view kFencePrelude = lua::fence_prelude;

std::string fenced_source(std::string_view body) {
  std::string s(kFencePrelude);
  s.append(body);
  return s;
}

FencedCall fenced_call(std::string_view ns, Partition p, std::string_view node, uint64_t epoch,
                       std::span<const std::string> keys, std::span<const std::string> args) {
  FencedCall c;
  c.keys.reserve(1 + keys.size());
  c.keys.push_back(own_key(ns, p));
  c.keys.insert(c.keys.end(), keys.begin(), keys.end());
  c.args.reserve(2 + args.size());
  c.args.emplace_back(node);
  c.args.push_back(std::to_string(epoch));
  c.args.insert(c.args.end(), args.begin(), args.end());
  return c;
}

void evalsha_fenced(redis::Client& client, const redis::Script& script, std::string_view ns,
                    Partition p, std::string_view node, uint64_t epoch,
                    std::span<const std::string> keys, std::span<const std::string> args,
                    redis::Callback cb, const redis::CommandOptions& options) {
  const FencedCall c = fenced_call(ns, p, node, epoch, keys, args);
  std::vector<std::string_view> k(c.keys.begin(), c.keys.end());
  std::vector<std::string_view> a(c.args.begin(), c.args.end());
  redis::evalsha(client, script, k, a, std::move(cb), options);  // evalsha copies them
}

bool is_fenced(const redis::Reply& r) {
  return r.error_is("FENCED");
}

}  // namespace ringcast::cluster
