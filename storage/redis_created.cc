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

void CreatedGroups::add_group(Partition p, std::vector<DeliveryId> ids) {
  if (ids.empty()) return;
  std::lock_guard lk(mu_);
  std::deque<Group>& gs = parts_[p];
  Group g;
  g.live.assign(ids.size(), true);
  g.remaining = ids.size();
  size_ += ids.size();
  g.ids = std::move(ids);
  // Ids grow per partition, so a new group goes last; keep the order anyway.
  auto at = std::upper_bound(gs.begin(), gs.end(), g.ids.front(),
                             [](DeliveryId id, const Group& x) { return id < x.ids.front(); });
  gs.insert(at, std::move(g));
}

const CreatedGroups::Group* CreatedGroups::find(Partition p, DeliveryId id, size_t* at) const {
  auto it = parts_.find(p);
  if (it == parts_.end() || it->second.empty()) return nullptr;
  const std::deque<Group>& gs = it->second;
  auto g = std::upper_bound(gs.begin(), gs.end(), id,
                            [](DeliveryId x, const Group& y) { return x < y.ids.front(); });
  if (g == gs.begin()) return nullptr;
  --g;
  auto i = std::lower_bound(g->ids.begin(), g->ids.end(), id);
  if (i == g->ids.end() || *i != id) return nullptr;
  *at = static_cast<size_t>(i - g->ids.begin());
  return &*g;
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
  --size_;
  if (g->remaining == 0) {
    emptied.push_back(member_of(g->ids));
    gs.erase(g);
  }
  return true;
}

bool CreatedGroups::contains(DeliveryId id) const {
  std::lock_guard lk(mu_);
  size_t at = 0;
  const Group* g = find(id_partition(id), id, &at);
  return g != nullptr && g->live[at];
}

void CreatedGroups::reset_partition(Partition p) {
  std::lock_guard lk(mu_);
  auto it = parts_.find(p);
  if (it == parts_.end()) return;
  for (const Group& g : it->second) size_ -= g.remaining;
  parts_.erase(it);
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
  size_ += g.remaining;
  g.ids = std::move(ids);
  std::deque<Group>& gs = parts_[p];
  auto at = std::upper_bound(gs.begin(), gs.end(), g.ids.front(),
                             [](DeliveryId id, const Group& x) { return id < x.ids.front(); });
  gs.insert(at, std::move(g));
}

size_t CreatedGroups::size() const {
  std::lock_guard lk(mu_);
  return size_;
}

}  // namespace ringcast::storage
