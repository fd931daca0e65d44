#include "core/timer_wheel.h"

#include <bit>
#include <cstdint>

#include "core/check.h"

namespace ringcast {

TimerWheel::TimerWheel(int64_t now_ms, size_t max_moves_per_advance)
    : now_(key(now_ms)), max_moves_(max_moves_per_advance == 0 ? 1 : max_moves_per_advance) {
  init_head(&ready_);
  init_head(&due_);
  for (TimerEntry& h : cascade_) init_head(&h);
  init_head(&past_);
  for (TimerEntry& h : heads_) init_head(&h);
}

void TimerWheel::schedule(TimerEntry* e, int64_t expiry_ms) {
  if (e->linked()) {
    unlink(e);
  } else {
    ++size_;
  }
  e->expiry_ms = expiry_ms;
  const uint64_t k = key(expiry_ms);
  if (k <= now_) {
    link_tail(&past_, e);
  } else {
    place(e, k);
  }
}

void TimerWheel::place(TimerEntry* e, uint64_t k) {
  RC_CHECK(k > now_);
  const int level = (63 - std::countl_zero(k ^ now_)) / kLevelBits;
  const int slot = static_cast<int>((k >> (level * kLevelBits)) & (kSlotsPerLevel - 1));
  const int index = level * kSlotsPerLevel + slot;
  // Round-robin over the slot's lanes: a cascade then chases kLanes independent chains, so
  // kLanes cache misses are in flight instead of one.
  TimerEntry* h = &heads_[index * kLanes + (next_lane_++ & (kLanes - 1))];
  if (list_empty(h)) set_bit(index);
  link_tail(h, e);
}

void TimerWheel::set_bit(int index) {
  const int level = index / kSlotsPerLevel;
  const int slot = index % kSlotsPerLevel;
  occupied_[level][slot / 64] |= uint64_t{1} << (slot % 64);
  word_mask_[level] |= uint64_t{1} << (slot / 64);
  level_mask_ |= uint32_t{1} << level;
}

void TimerWheel::clear_bit(int index) {
  const int level = index / kSlotsPerLevel;
  const int slot = index % kSlotsPerLevel;
  uint64_t& word = occupied_[level][slot / 64];
  word &= ~(uint64_t{1} << (slot % 64));
  if (word != 0) return;
  word_mask_[level] &= ~(uint64_t{1} << (slot / 64));
  if (word_mask_[level] != 0) return;
  level_mask_ &= ~(uint32_t{1} << level);
}

void TimerWheel::on_list_emptied(TimerEntry* head) {
  // Address arithmetic on integers: `head` may be one of the lone lists (due_, ...).
  const auto base = reinterpret_cast<uintptr_t>(&heads_[0]);
  const auto addr = reinterpret_cast<uintptr_t>(head);
  if (addr - base >= sizeof(heads_)) return;
  const int index = static_cast<int>(head - &heads_[0]) / kLanes;
  for (int j = 0; j < kLanes; ++j) {
    if (!list_empty(&heads_[index * kLanes + j])) return;
  }
  clear_bit(index);
}

bool TimerWheel::find_first(int* level, int* slot) const {
  if (level_mask_ == 0) return false;
  const int l = std::countr_zero(level_mask_);
  const int w = std::countr_zero(word_mask_[l]);
  *level = l;
  *slot = w * 64 + std::countr_zero(occupied_[l][w]);
  return true;
}

uint64_t TimerWheel::slot_start(int level, int slot) const {
  const int shift = level * kLevelBits;
  const int above = shift + kLevelBits;  // bits above this level are now_'s (invariant I)
  const uint64_t high = above >= 64 ? 0 : (now_ >> above) << above;
  return high | (static_cast<uint64_t>(slot) << shift);
}

bool TimerWheel::cascading() const {
  for (const TimerEntry& h : cascade_) {
    if (!list_empty(&h)) return true;
  }
  return false;
}

void TimerWheel::splice_tail(TimerEntry* to, TimerEntry* from) {
  TimerEntry* first = from->next;
  TimerEntry* last = from->prev;
  TimerEntry* tail = to->prev;
  tail->next = first;
  first->prev = tail;
  last->next = to;
  to->prev = last;
  init_head(from);
}

void TimerWheel::cascade(size_t* moves_left) {
  // One entry per lane per round: the lanes' loads are independent.
  bool any = true;
  while (any && *moves_left > 0) {
    any = false;
    for (int j = 0; j < kLanes; ++j) {
      if (*moves_left == 0) break;
      TimerEntry* c = &cascade_[j];
      TimerEntry* e = c->next;
      if (e == c) continue;
      any = true;
      TimerEntry* n = e->next;
      c->next = n;
      n->prev = c;
      const uint64_t k = key(e->expiry_ms);
      if (k == now_) {
        link_tail(&due_, e);
      } else {
        place(e, k);
      }
      --*moves_left;
      ++moves_total_;
    }
  }
}

void TimerWheel::begin_advance() {
  // Past-due entries join the tail of ready_. Order stays exact: entries left in ready_ by
  // a max_fire stop were scheduled earlier (effective expiry <= theirs), and everything in
  // due_ has expiry now_ >= theirs.
  if (!list_empty(&past_)) splice_tail(&ready_, &past_);
}

TimerEntry* TimerWheel::next_due_slow(uint64_t target, size_t* moves_left) {
  for (;;) {
    if (!list_empty(&ready_)) return pop_front(&ready_);
    if (!list_empty(&due_)) return pop_front(&due_);
    if (cascading()) {
      if (*moves_left == 0) return nullptr;
      cascade(moves_left);
      continue;
    }
    int level = 0;
    int slot = 0;
    if (!find_first(&level, &slot)) {
      if (target > now_) now_ = target;
      return nullptr;
    }
    const uint64_t start = slot_start(level, slot);
    RC_CHECK(start > now_);
    if (start > target) {
      if (target > now_) now_ = target;
      return nullptr;
    }
    // Every entry before `start` has fired: move time there and take the slot's list whole.
    now_ = start;
    const int index = level * kSlotsPerLevel + slot;
    for (int j = 0; j < kLanes; ++j) {
      TimerEntry* h = &heads_[index * kLanes + j];
      if (!list_empty(h)) splice_tail(level == 0 ? &due_ : &cascade_[j], h);
    }
    clear_bit(index);
  }
}

int64_t TimerWheel::next_expiry_ms() const {
  if (!list_empty(&ready_) || !list_empty(&due_) || !list_empty(&past_) || cascading()) {
    return now_ms();
  }
  int level = 0;
  int slot = 0;
  if (!find_first(&level, &slot)) return kNoExpiry;
  return from_key(slot_start(level, slot));
}

}  // namespace ringcast
