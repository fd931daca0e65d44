// The scheduler's table of ordering keys in play (SPEC R13, docs/operations.md "Ordered
// delivery"): for each (endpoint, order key) that has a pending delivery, its head — the one
// delivery of the key that may be due, scheduled or in flight — and the deliveries waiting
// behind it, oldest first. A key with no head is blocked (R13.2: its head ended in failure under
// on_head_failure = block). Memory is the point (a million keys waiting must stay under 64 bytes
// each): one 24-byte slot per key in an open-addressing table at most 3/4 full; the waiting
// deliveries are linked through their own TimerEntry (a waiting delivery is in no timer wheel
// and no ready queue), in a circular list whose tail the slot holds. Pointers to slots are
// invalidated by insert() and erase(): look a key up again after either. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/timer_wheel.h"

namespace ringcast {

class OrderKeys {
 public:
  struct Key {
    uint64_t id = 0;             // key_id(endpoint, order key); 0: an empty slot
    TimerEntry* head = nullptr;  // nullptr: blocked, or being released
    TimerEntry* tail = nullptr;  // the newest waiting one (tail->next: the oldest); nullptr: none
  };

  // Never 0. Two (endpoint, key) pairs with the same id share one queue: stricter order, never
  // a broken one (the order key is a 56-bit hash already, core/types.h).
  static uint64_t key_id(uint64_t endpoint, uint64_t order_key) {
    uint64_t x = endpoint * 0x9e3779b97f4a7c15ULL ^ order_key;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x == 0 ? 1 : x;
  }

  Key* find(uint64_t id);
  Key& insert(uint64_t id);  // id must be absent; the new key has no head and no waiting ones
  void erase(uint64_t id);
  size_t size() const { return size_; }
  size_t bytes() const { return slots_.capacity() * sizeof(Key); }
  template <typename F>
  void for_each(F&& f) {  // f(Key&); f must not insert or erase
    for (Key& k : slots_) {
      if (k.id != 0) f(k);
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Key& k : slots_) {
      if (k.id != 0) f(k);
    }
  }

  // The waiting list (circular, doubly linked through TimerEntry next/prev; prev != nullptr
  // while linked, so TimerEntry::linked() holds for a waiting delivery).
  static void push_back(Key& k, TimerEntry* e);
  static TimerEntry* pop_front(Key& k);  // nullptr when none waits
  static void unlink(Key& k, TimerEntry* e);
  static TimerEntry* front(const Key& k) { return k.tail ? k.tail->next : nullptr; }
  // Inserts e after the last waiting entry x with before(x, e) (at the front when none).
  template <typename Before>
  static void insert_sorted(Key& k, TimerEntry* e, Before&& before) {
    if (k.tail == nullptr || before(k.tail, e)) return push_back(k, e);
    TimerEntry* first = k.tail->next;
    TimerEntry* x = k.tail;
    while (x != first && !before(x->prev, e)) x = x->prev;
    // e goes before x (x == first and !before(first... ) handled: before x in either case).
    e->next = x;
    e->prev = x->prev;
    x->prev->next = e;
    x->prev = e;
  }

 private:
  size_t home(uint64_t id) const { return static_cast<size_t>(id) & (slots_.size() - 1); }
  size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }
  void grow();

  std::vector<Key> slots_;
  size_t size_ = 0;
};

}  // namespace ringcast
