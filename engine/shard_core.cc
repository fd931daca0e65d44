// What the shard's parts share (engine/shard_core.h): the not-owner answer, entropy and the
// events' message ids.
#include "engine/shard_core.h"

#include <openssl/rand.h>

namespace ringcast::engine {

Error not_owner_error() {
  return make_error(Errc::kUnavailable,
                    "this node does not own the tenant's partition now: retry on another node, "
                    "or here in a moment",
                    nullptr, "not_owner");
}

void ShardCore::random_bytes(uint8_t* out, size_t n) {
  if (options.entropy) {
    options.entropy(out, n);
  } else {
    RAND_bytes(out, n);
  }
}

// xoshiro128+-style generator seeded from the system CSPRNG at thread start: 80 random bits per
// id, no syscall per event. Unpredictability is not needed (the id is not a secret), only
// uniqueness across processes and restarts, which the seed and the millisecond prefix give.
std::string ShardCore::new_message_id(WallTime now) {
  return message_id_of(new_message_bits(now));
}

MessageIdBits ShardCore::new_message_bits(WallTime now) {
  auto next = [this] {
    uint64_t s1 = msg_rng[0];
    const uint64_t s0 = msg_rng[1];
    const uint64_t out = s0 + s1;
    msg_rng[0] = s0;
    s1 ^= s1 << 23;
    msg_rng[1] = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
    return out;
  };
  const uint64_t ms = static_cast<uint64_t>(std::max<int64_t>(0, now.ms()));
  const uint64_t hi = next();
  return {(ms << 16) | (hi & 0xffff), next()};  // make_message_id's layout
}

}  // namespace ringcast::engine
