// Which cluster member owns a partition: highest-random-weight (rendezvous) hashing over the
// live member ids (research/scale-out.md design A). Pure: no syscalls, no clock.
// Invariants: for a non-empty member set every partition has exactly one owner, and every
// node computes the same one from the same set (the order of `members` does not matter);
// adding a member moves only the partitions it wins (each to it), removing one moves only
// its own partitions. Member ids are compared as bytes; duplicates count once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace ringcast {

// xxh3 of the member id seeded by the partition: the weight `member` has for `p`.
uint64_t rendezvous_weight(std::string_view member, Partition p);

// The member with the highest weight for `p` (ties, astronomically rare, go to the smaller
// id); "" when `members` is empty. The view points into `members`.
std::string_view owner_of(Partition p, std::span<const std::string> members);

// Every partition in [0, kPartitions) whose owner_of is `member`, ascending.
std::vector<Partition> owned_by(std::string_view member, std::span<const std::string> members);

}  // namespace ringcast
