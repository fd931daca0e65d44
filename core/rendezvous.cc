#include "core/rendezvous.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ringcast {

namespace {
// Spreads the small partition numbers over the seed space (any odd constant would do; this is
// 2^64 / phi): seeds 0, 1, 2, ... would work too, this just keeps them far apart.
constexpr uint64_t kSeedMix = 0x9e3779b97f4a7c15ull;
}  // namespace

uint64_t rendezvous_weight(std::string_view member, Partition p) {
  return XXH3_64bits_withSeed(member.data(), member.size(), (uint64_t{p} + 1) * kSeedMix);
}

std::string_view owner_of(Partition p, std::span<const std::string> members) {
  std::string_view best;
  uint64_t best_w = 0;
  bool any = false;
  for (const std::string& m : members) {
    const uint64_t w = rendezvous_weight(m, p);
    if (!any || w > best_w || (w == best_w && std::string_view(m) < best)) {
      best = m;
      best_w = w;
      any = true;
    }
  }
  return best;
}

std::vector<Partition> owned_by(std::string_view member, std::span<const std::string> members) {
  std::vector<Partition> out;
  if (members.empty()) return out;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const auto part = static_cast<Partition>(p);
    if (owner_of(part, members) == member) out.push_back(part);
  }
  return out;
}

}  // namespace ringcast
