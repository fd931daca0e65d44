#include "core/order_keys.h"

#include <utility>

namespace ringcast {

OrderKeys::Key* OrderKeys::find(uint64_t id) {
  if (slots_.empty()) return nullptr;
  for (size_t i = home(id);; i = next(i)) {
    Key& k = slots_[i];
    if (k.id == id) return &k;
    if (k.id == 0) return nullptr;
  }
}

OrderKeys::Key& OrderKeys::insert(uint64_t id) {
  if ((size_ + 1) * 4 > slots_.size() * 3) grow();
  for (size_t i = home(id);; i = next(i)) {
    Key& k = slots_[i];
    if (k.id == 0) {
      k = Key{id, nullptr, nullptr};
      ++size_;
      return k;
    }
  }
}

void OrderKeys::erase(uint64_t id) {
  if (slots_.empty()) return;
  size_t i = home(id);
  while (slots_[i].id != id) {
    if (slots_[i].id == 0) return;
    i = next(i);
  }
  // Backward shift (no tombstones): each later entry of the probe run moves into the hole when
  // its home position allows it.
  for (size_t j = next(i);; j = next(j)) {
    Key& k = slots_[j];
    if (k.id == 0) break;
    const size_t h = home(k.id);
    const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
    if (movable) {
      slots_[i] = k;
      i = j;
    }
  }
  slots_[i] = Key{};
  --size_;
}

void OrderKeys::grow() {
  std::vector<Key> old = std::move(slots_);
  slots_.assign(old.empty() ? 16 : old.size() * 2, Key{});
  for (const Key& k : old) {
    if (k.id == 0) continue;
    size_t i = home(k.id);
    while (slots_[i].id != 0) i = next(i);
    slots_[i] = k;
  }
}

void OrderKeys::push_back(Key& k, TimerEntry* e) {
  if (k.tail == nullptr) {
    e->next = e->prev = e;
  } else {
    TimerEntry* first = k.tail->next;
    e->prev = k.tail;
    e->next = first;
    k.tail->next = e;
    first->prev = e;
  }
  k.tail = e;
}

TimerEntry* OrderKeys::pop_front(Key& k) {
  TimerEntry* e = front(k);
  if (e != nullptr) unlink(k, e);
  return e;
}

void OrderKeys::unlink(Key& k, TimerEntry* e) {
  if (e->next == e) {
    k.tail = nullptr;
  } else {
    e->prev->next = e->next;
    e->next->prev = e->prev;
    if (k.tail == e) k.tail = e->prev;
  }
  e->next = e->prev = nullptr;
}

}  // namespace ringcast
