// Which partitions a shard serves and sends for (engine/ownership.h; docs/cluster.md "Fencing").
#include "engine/ownership.h"

#include <algorithm>

namespace ringcast::engine {

bool LeasedOwnership::serves(Partition p) const {
  auto it = held_.find(p);
  return it != held_.end() && !it->second.releasing;
}

bool LeasedOwnership::sendable(Partition p, MonoTime now, std::optional<uint64_t> epoch) const {
  auto it = held_.find(p);
  if (it == held_.end() || it->second.releasing) return false;
  if (epoch && it->second.epoch != *epoch) return false;
  return leases_.valid(p, it->second.epoch, now);
}

uint64_t LeasedOwnership::intake_epoch(Partition p) const {
  auto it = held_.find(p);
  return it == held_.end() ? 0 : it->second.epoch;
}

uint64_t LeasedOwnership::sent(Partition p) {
  auto it = held_.find(p);
  if (it == held_.end()) return 0;
  ++it->second.in_flight;
  return it->second.epoch;
}

bool LeasedOwnership::completed(Partition p, uint64_t epoch) {
  auto it = held_.find(p);
  if (it == held_.end() || it->second.epoch != epoch) return false;
  --it->second.in_flight;
  return true;
}

HeldPartition* LeasedOwnership::find(Partition p) {
  auto it = held_.find(p);
  return it == held_.end() ? nullptr : &it->second;
}

void LeasedOwnership::hold(Partition p, uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  HeldPartition& h = held_[p];
  if (h.releasing) --releasing_;
  h = HeldPartition{};
  h.epoch = epoch;
}

void LeasedOwnership::start_release(HeldPartition& h) {
  if (!h.releasing) ++releasing_;
  h.releasing = true;
}

void LeasedOwnership::forget(const std::vector<Partition>& ps) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Partition p : ps) {
    if (auto it = held_.find(p); it != held_.end() && it->second.releasing) --releasing_;
    held_.erase(p);
  }
}

std::vector<std::pair<Partition, uint64_t>> LeasedOwnership::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<Partition, uint64_t>> out;
  for (const auto& [p, h] : held_) out.emplace_back(p, h.epoch);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ringcast::engine
