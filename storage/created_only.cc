// See created_only.h (docs/storage-schema.md "Created records").
#include "storage/created_only.h"

#include <bit>

namespace ringcast::storage {

uint64_t CreatedOnly::Window::floor() const {
  // add() and take() keep the front word non-zero while anything is set.
  if (count == 0) return high;
  return base + static_cast<uint64_t>(std::countr_zero(words.front()));
}

bool CreatedOnly::add(DeliveryId id) {
  const uint64_t seq = id_sequence(id);
  std::lock_guard lk(mu_);
  Window& w = parts_[id_partition(id)];
  if (w.words.empty()) w.base = seq & ~uint64_t{63};
  while (seq < w.base) {
    w.words.push_front(0);
    w.base -= 64;
  }
  const uint64_t at = (seq - w.base) / 64;
  if (at >= w.words.size()) w.words.resize(at + 1, 0);
  const uint64_t bit = uint64_t{1} << ((seq - w.base) % 64);
  if (seq + 1 > w.high) w.high = seq + 1;
  if ((w.words[at] & bit) != 0) return false;
  w.words[at] |= bit;
  ++w.count;
  ++size_;
  return true;
}

bool CreatedOnly::take(DeliveryId id) {
  const uint64_t seq = id_sequence(id);
  std::lock_guard lk(mu_);
  auto it = parts_.find(id_partition(id));
  if (it == parts_.end()) return false;
  Window& w = it->second;
  if (w.words.empty() || seq < w.base) return false;
  const uint64_t at = (seq - w.base) / 64;
  if (at >= w.words.size()) return false;
  const uint64_t bit = uint64_t{1} << ((seq - w.base) % 64);
  if ((w.words[at] & bit) == 0) return false;
  w.words[at] &= ~bit;
  --w.count;
  --size_;
  while (!w.words.empty() && w.words.front() == 0) {
    w.words.pop_front();
    w.base += 64;
  }
  while (!w.words.empty() && w.words.back() == 0) w.words.pop_back();
  return true;
}

bool CreatedOnly::contains(DeliveryId id) const {
  const uint64_t seq = id_sequence(id);
  std::lock_guard lk(mu_);
  auto it = parts_.find(id_partition(id));
  if (it == parts_.end()) return false;
  const Window& w = it->second;
  if (w.words.empty() || seq < w.base) return false;
  const uint64_t at = (seq - w.base) / 64;
  return at < w.words.size() && (w.words[at] >> ((seq - w.base) % 64) & 1) != 0;
}

void CreatedOnly::begin_batch(Partition p) {
  std::lock_guard lk(mu_);
  ++parts_[p].batches;
}

void CreatedOnly::end_batch(Partition p) {
  std::lock_guard lk(mu_);
  auto it = parts_.find(p);
  if (it != parts_.end() && it->second.batches > 0) --it->second.batches;
}

uint64_t CreatedOnly::floor_due(Partition p, uint64_t step) const {
  std::lock_guard lk(mu_);
  auto it = parts_.find(p);
  if (it == parts_.end()) return 0;
  const Window& w = it->second;
  if (!w.authoritative || w.batches != 1) return 0;
  const uint64_t f = w.floor();
  return f >= w.stored_floor + step ? f : 0;
}

void CreatedOnly::floor_written(Partition p, uint64_t floor) {
  std::lock_guard lk(mu_);
  Window& w = parts_[p];
  if (floor > w.stored_floor) w.stored_floor = floor;
}

void CreatedOnly::recovered(Partition p, uint64_t stored_floor) {
  std::lock_guard lk(mu_);
  Window& w = parts_[p];
  w.authoritative = true;
  w.stored_floor = stored_floor;
  if (w.high < stored_floor) w.high = stored_floor;
}

std::vector<DeliveryId> CreatedOnly::oldest_beyond(Partition p, uint64_t span, size_t n) const {
  std::vector<DeliveryId> out;
  std::lock_guard lk(mu_);
  auto it = parts_.find(p);
  if (it == parts_.end()) return out;
  const Window& w = it->second;
  if (w.count == 0 || w.high - w.floor() <= span) return out;
  for (size_t i = 0; i < w.words.size() && out.size() < n; ++i) {
    uint64_t bits = w.words[i];
    while (bits != 0 && out.size() < n) {
      const int b = std::countr_zero(bits);
      bits &= bits - 1;
      out.push_back(make_id(p, w.base + 64 * i + static_cast<uint64_t>(b)));
    }
  }
  return out;
}

size_t CreatedOnly::size() const {
  std::lock_guard lk(mu_);
  return size_;
}

}  // namespace ringcast::storage
