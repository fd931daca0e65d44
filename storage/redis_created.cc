// See redis_created.h (docs/cluster.md "Created deliveries").
#include "storage/redis_created.h"

#include <algorithm>

#include "storage/codec.h"

namespace ringcast::storage {

std::string CreatedGroups::member_of(const std::vector<DeliveryId>& ids) {
  std::string m;
  m.reserve(8 * ids.size());
  for (DeliveryId id : ids) put_be64(m, id);
  return m;
}

void CreatedGroups::insert(Partition p, Group g) {
  std::deque<Group>& gs = parts_[p];
  // Ids grow per partition, so a new group goes last; keep the order anyway.
  auto at = std::upper_bound(gs.begin(), gs.end(), g.ids.front(),
                             [](DeliveryId id, const Group& x) { return id < x.ids.front(); });
  gs.insert(at, std::move(g));
}

void CreatedGroups::add_group(Partition p, std::vector<DeliveryId> ids) {
  if (ids.empty()) return;
  Group g;
  g.live.assign(ids.size(), true);
  g.remaining = ids.size();
  g.ids = std::move(ids);
  std::lock_guard lk(mu_);
  insert(p, std::move(g));
}

bool CreatedGroups::take(DeliveryId id, std::vector<std::string>& emptied) {
  std::lock_guard lk(mu_);
  auto it = parts_.find(id_partition(id));
  if (it == parts_.end()) return false;
  std::deque<Group>& gs = it->second;
  auto g = std::upper_bound(gs.begin(), gs.end(), id,
                            [](DeliveryId x, const Group& y) { return x < y.ids.front(); });
  if (g == gs.begin()) return false;
  --g;
  auto i = std::lower_bound(g->ids.begin(), g->ids.end(), id);
  if (i == g->ids.end() || *i != id) return false;
  const size_t at = static_cast<size_t>(i - g->ids.begin());
  if (!g->live[at]) return false;
  g->live[at] = false;
  --g->remaining;
  if (g->remaining == 0) {
    emptied.push_back(member_of(g->ids));
    gs.erase(g);
  }
  return true;
}

void CreatedGroups::reset_partition(Partition p) {
  std::lock_guard lk(mu_);
  parts_.erase(p);
}

void CreatedGroups::recovered_group(Partition p, std::vector<DeliveryId> ids,
                                    const std::vector<DeliveryId>& live) {
  if (ids.empty() || live.empty()) return;
  std::lock_guard lk(mu_);
  Group g;
  g.live.assign(ids.size(), false);
  for (DeliveryId id : live) {
    auto i = std::lower_bound(ids.begin(), ids.end(), id);
    if (i == ids.end() || *i != id) continue;
    const size_t at = static_cast<size_t>(i - ids.begin());
    if (!g.live[at]) {
      g.live[at] = true;
      ++g.remaining;
    }
  }
  if (g.remaining == 0) return;
  g.ids = std::move(ids);
  insert(p, std::move(g));
}

}  // namespace ringcast::storage
