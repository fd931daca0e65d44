#include "core/timer_wheel.h"

#include <bit>
#include <cassert>
#include <cstdint>

namespace ringcast {

TimerWheel::TimerWheel(int64_t now_ms, size_t max_moves_per_advance)
    : now_(key(now_ms)), max_moves_(max_moves_per_advance == 0 ? 1 : max_moves_per_advance) {
  init_head(&ready_);
  init_head(&due_);
  init_head(&cascade_);
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
  assert(k > now_);
  const int level = (63 - std::countl_zero(k ^ now_)) / kLevelBits;
  const int slot = static_cast<int>((k >> (level * kLevelBits)) & (kSlotsPerLevel - 1));
  const int index = level * kSlotsPerLevel + slot;
  TimerEntry* h = &heads_[index];
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
  if (addr - base < sizeof(heads_)) clear_bit(static_cast<int>(head - &heads_[0]));
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

void TimerWheel::begin_advance() {
  // Past-due entries join the tail of ready_. Order stays exact: entries left in ready_ by
  // a max_fire stop were scheduled earlier (effective expiry <= theirs), and everything in
  // due_ has expiry now_ >= theirs.
  if (list_empty(&past_)) return;
  TimerEntry* first = past_.next;
  TimerEntry* last = past_.prev;
  TimerEntry* tail = ready_.prev;
  tail->next = first;
  first->prev = tail;
  last->next = &ready_;
  ready_.prev = last;
  init_head(&past_);
}

TimerEntry* TimerWheel::next_due_slow(uint64_t target, size_t* moves_left) {
  for (;;) {
    if (!list_empty(&ready_)) return pop_front(&ready_);
    if (!list_empty(&due_)) return pop_front(&due_);
    if (!list_empty(&cascade_)) {
      if (*moves_left == 0) return nullptr;
      while (*moves_left > 0 && !list_empty(&cascade_)) {
        TimerEntry* e = cascade_.next;
        TimerEntry* n = e->next;
        cascade_.next = n;
        n->prev = &cascade_;
        const uint64_t k = key(e->expiry_ms);
        if (k == now_) {
          link_tail(&due_, e);
        } else {
          place(e, k);
        }
        --*moves_left;
        ++moves_total_;
      }
      continue;
    }
    int level = 0;
    int slot = 0;
    if (!find_first(&level, &slot)) {
      if (target > now_) now_ = target;
      return nullptr;
    }
    const uint64_t start = slot_start(level, slot);
    assert(start > now_);
    if (start > target) {
      if (target > now_) now_ = target;
      return nullptr;
    }
    // Every entry before `start` has fired: move time there and take the slot's list whole.
    now_ = start;
    const int index = level * kSlotsPerLevel + slot;
    TimerEntry* h = &heads_[index];
    TimerEntry* to = level == 0 ? &due_ : &cascade_;
    to->next = h->next;
    to->prev = h->prev;
    to->next->prev = to;
    to->prev->next = to;
    init_head(h);
    clear_bit(index);
  }
}

int64_t TimerWheel::next_expiry_ms() const {
  if (!list_empty(&ready_) || !list_empty(&due_) || !list_empty(&past_) || !list_empty(&cascade_)) {
    return now_ms();
  }
  int level = 0;
  int slot = 0;
  if (!find_first(&level, &slot)) return kNoExpiry;
  return from_key(slot_start(level, slot));
}

}  // namespace ringcast
