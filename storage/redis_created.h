// The Redis store's deliveries that are only created (docs/cluster.md "Created deliveries"): a
// batch's new deliveries of a partition are one `T cr` member (their ids, be64 each, ascending)
// and are not in `T act`; a delivery joins `T act` only when it reaches a later state that is
// not a lease (a retry's wait), and its end removes nothing from `T act` while it was only
// created. This writer's record of those members, per partition: which of their ids are still
// only created, and which members have none left (the writer removes them from `T cr`).
// Thread-safe (several shards write at once). Only the partition's owner writes it; recovery
// rebuilds a partition's groups from `T cr` (reset_partition, recovered_group).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace ringcast::storage {

class CreatedGroups {
 public:
  // The member for `ids` (ascending, of one partition): be64 of each.
  static std::string member_of(const std::vector<DeliveryId>& ids);
  // A batch's new deliveries of p, written as one member (ids ascending, above every id of p
  // added before).
  void add_group(Partition p, std::vector<DeliveryId> ids);
  // id left the created-only state (it ended, or a later state of it goes to T act): true when it
  // was created-only. A member that has no created-only id left is appended to `emptied`.
  bool take(DeliveryId id, std::vector<std::string>& emptied);

  // Recovery of p: forget what this writer knew of it, then add each member found in T cr with
  // the ids that are still only created (`live`, a subset of `ids`).
  void reset_partition(Partition p);
  void recovered_group(Partition p, std::vector<DeliveryId> ids,
                       const std::vector<DeliveryId>& live);

 private:
  struct Group {
    std::vector<DeliveryId> ids;  // the member's ids, ascending
    std::vector<bool> live;       // per id: still only created
    size_t remaining = 0;
  };
  // Adds g to p's groups in id order; with mu_ held.
  void insert(Partition p, Group g);

  mutable std::mutex mu_;
  std::unordered_map<Partition, std::deque<Group>> parts_;
};

}  // namespace ringcast::storage
