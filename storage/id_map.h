// A hash map from 64-bit ids to small values that allocates only when it grows: open
// addressing with linear probing and backward-shift deletion, power-of-two capacity, at most
// half full. For per-delivery tables on the write path (the lease log's live leases), where a
// node-based std::unordered_map allocates on every insert (docs/benchmarks.md "What persisting
// costs": heap allocations per delivery). Not thread-safe; V must be default-constructible and
// cheap to move.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ringcast::storage {

template <typename V>
class IdMap {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  V* find(uint64_t id) {
    if (id == kEmpty) return has_empty_key_ ? &empty_key_value_ : nullptr;
    if (slots_.empty()) return nullptr;
    for (size_t i = home(id);; i = next(i)) {
      Slot& s = slots_[i];
      if (s.key == id) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }
  const V* find(uint64_t id) const { return const_cast<IdMap*>(this)->find(id); }

  // The value of id, inserted as `value` when absent; second: whether it was inserted.
  std::pair<V*, bool> try_emplace(uint64_t id, const V& value) {
    if (id == kEmpty) {
      const bool fresh = !has_empty_key_;
      if (fresh) {
        has_empty_key_ = true;
        empty_key_value_ = value;
        ++size_;
      }
      return {&empty_key_value_, fresh};
    }
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (size_t i = home(id);; i = next(i)) {
      Slot& s = slots_[i];
      if (s.key == id) return {&s.value, false};
      if (s.key == kEmpty) {
        s.key = id;
        s.value = value;
        ++size_;
        return {&s.value, true};
      }
    }
  }

  bool erase(uint64_t id) {
    if (id == kEmpty) {
      if (!has_empty_key_) return false;
      has_empty_key_ = false;
      --size_;
      return true;
    }
    if (slots_.empty()) return false;
    size_t i = home(id);
    while (slots_[i].key != id) {
      if (slots_[i].key == kEmpty) return false;
      i = next(i);
    }
    // Backward shift: move each later entry of the probe run into the hole when its home
    // position allows it, so that no tombstones are needed.
    for (size_t j = next(i);; j = next(j)) {
      Slot& s = slots_[j];
      if (s.key == kEmpty) break;
      const size_t h = home(s.key);
      // s may move to i when i lies cyclically in [h, j).
      const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = std::move(s);
        i = j;
      }
    }
    slots_[i].key = kEmpty;
    slots_[i].value = V();
    --size_;
    return true;
  }

  template <typename F>
  void for_each(F&& f) const {
    if (has_empty_key_) f(kEmpty, empty_key_value_);
    for (const Slot& s : slots_) {
      if (s.key != kEmpty) f(s.key, s.value);
    }
  }

 private:
  static constexpr uint64_t kEmpty = 0;
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  size_t home(uint64_t id) const {
    return static_cast<size_t>((id * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }
  void grow() {
    const size_t cap = slots_.empty() ? 16 : slots_.size() * 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(cap));
    for (Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = home(s.key);
      while (slots_[i].key != kEmpty) i = next(i);
      slots_[i] = std::move(s);
    }
  }

  std::vector<Slot> slots_;
  unsigned shift_ = 64;
  size_t size_ = 0;
  bool has_empty_key_ = false;
  V empty_key_value_{};
};

}  // namespace ringcast::storage
