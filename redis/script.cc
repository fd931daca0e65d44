#include "redis/script.h"

#include <openssl/sha.h>

#include <string>
#include <vector>

namespace ringcast::redis {

Script::Script(std::string source) : source_(std::move(source)) {
  uint8_t digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const uint8_t*>(source_.data()), source_.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  sha1_.reserve(2 * SHA_DIGEST_LENGTH);
  for (uint8_t b : digest) {
    sha1_.push_back(kHex[b >> 4]);
    sha1_.push_back(kHex[b & 0xf]);
  }
}

namespace {

// EVALSHA|EVAL <sha|source> <numkeys> keys... args...; args[2 + 1] is the first key.
std::vector<std::string_view> script_args(std::string_view verb, std::string_view body,
                                          const std::string& numkeys,
                                          const std::vector<std::string>& keys,
                                          const std::vector<std::string>& args) {
  std::vector<std::string_view> v;
  v.reserve(3 + keys.size() + args.size());
  v.push_back(verb);
  v.push_back(body);
  v.push_back(numkeys);
  for (const auto& k : keys) v.push_back(k);
  for (const auto& a : args) v.push_back(a);
  return v;
}

}  // namespace

void evalsha(Client& client, const Script& script, std::span<const std::string_view> keys,
             std::span<const std::string_view> args, Callback cb, const CommandOptions& options) {
  CommandOptions o = options;
  o.deadline = client.deadline_for(options);  // the fallback shares the caller's deadline
  o.key_index = keys.empty() ? kNoKey : 3;
  // The fallback needs the arguments after this call returns: keep copies in the callback.
  std::vector<std::string> k(keys.begin(), keys.end());
  std::vector<std::string> a(args.begin(), args.end());
  const std::string numkeys = std::to_string(keys.size());
  const auto first = script_args("EVALSHA", script.sha1(), numkeys, k, a);
  client.command(
      first,
      [&client, &script, numkeys, k = std::move(k), a = std::move(a), o,
       cb = std::move(cb)](Result<Reply> r) mutable {
        if (!r.ok() || !r->error_is("NOSCRIPT")) {
          cb(std::move(r));
          return;
        }
        const auto second = script_args("EVAL", script.source(), numkeys, k, a);
        client.command(second, std::move(cb), o);
      },
      o);
}

}  // namespace ringcast::redis
