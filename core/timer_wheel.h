// Hierarchical timer wheel for pending deliveries: O(1) schedule and cancel through an intrusive
// entry embedded in the owner, millisecond resolution, a horizon past 31 days, and bounded work per
// advance(). Time is an argument: `now_ms` is passed in.
//
// API contract (the implementation may add to it, not change it):
//   TimerWheel wheel(now_ms);
//   wheel.schedule(&entry, expiry_ms);   // O(1); an expiry in the past fires on the next advance
//   wheel.cancel(&entry);                // O(1); a no-op when not linked
//   size_t n = wheel.advance(now_ms, max_fire, [](TimerEntry* e) { ... });
//                                        // fires due entries in expiry order (ms resolution),
//                                        // at most max_fire; entries are unlinked before the
//                                        // callback, which may schedule/cancel freely.
//   wheel.size(); wheel.next_expiry_ms(); // the latter: a lower bound, for the loop's sleep
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace ringcast {

struct TimerEntry {
  TimerEntry* next = nullptr;
  TimerEntry* prev = nullptr;
  int64_t expiry_ms = 0;
  bool linked() const { return prev != nullptr; }
};

// ---------------------------------------------------------------------------------------------
// TimerWheel — layout and invariants.
//
// Time is kept as an unsigned 64-bit key: key(ms) = uint64(ms) ^ 2^63, which preserves order
// over the whole int64 range (negative times work). The key is cut into kLevels digits of
// kLevelBits bits (8 bits: 8 levels x 256 slots; level L covers key bits [8L, 8L+8), so a
// level-L slot spans 2^(8L) ms: 1 ms, 256 ms, 65.5 s, 4.66 h, 49.7 days, ...). Eight levels
// cover all 64 bits, so the horizon is the whole int64 range: there is no overflow list and no
// clamping. A 31-day timer sits at level 3 (or 4 when it crosses a 49.7-day boundary).
//
// `now_` is the wheel's time: every entry with expiry <= now_ has left the wheel proper.
// Invariant (I): an entry with key e > now_ is in level L = msb(e ^ now_) / kLevelBits, slot
// S = digit_L(e). Then e and now_ agree on every digit above L and digit_L(e) > digit_L(now_),
// so slots never wrap: within a level the first occupied slot is the earliest, and the lowest
// non-empty level holds the earliest entries. Finding the next due slot is therefore a few
// count-trailing-zeros on the occupancy bitmaps (a summary bit per level, a summary bit per
// 64-slot word, a bit per slot): a jump of days costs O(levels), never O(elapsed ms).
//
// Each slot is kLanes (4) circular doubly-linked lists with sentinel heads; schedule appends
// to the lanes round-robin. Why: a cascade is a pointer chase through entries scattered over
// the owners' memory (one cache miss per entry at 10 M timers); walking 4 independent chains
// keeps 4 misses in flight (measured ~40 % less expire cost at 10 M than one list per slot).
//
// When now_ reaches the start of an occupied level-L slot (L > 0) the slot's lanes are spliced
// onto the cascade lanes and each entry is re-placed relative to the new now_: it lands in a
// strictly lower level (its digits at and above L equal now_'s), or on the due list when its
// expiry equals now_. Level-0 slots hold a single millisecond and are spliced straight onto
// the due list. Lists besides the slots: `due_` (expiry == now_, firing), `cascade_` (waiting
// to be re-placed), `past_` (scheduled with expiry <= now_: fires at the start of the NEXT
// advance, so a callback that re-arms itself in the past cannot livelock a turn) and `ready_`
// (past_ appended at the start of an advance; fires before due_). The cursor moves only when
// ready_, due_ and cascade_ are empty.
//
// Order: entries fire in non-decreasing effective expiry, eff = expiry if expiry > now_ms()
// at schedule time, else now_ms() at schedule time (past-due entries first, on the next
// advance). Entries with the same effective millisecond fire in an unspecified order.
//
// Work bounds. schedule/cancel: O(1) (cancel clears a bitmap bit when a slot's last lane
// empties; the slot is found from the sentinel's address). advance(): at most `max_fire`
// callbacks, at most `max_moves_per_advance` (constructor) cascade re-placements, and at most
// max_fire + max_moves + 1 slot look-ups of O(1) each; splicing a whole slot is O(kLanes).
// Amortised: each re-placement lowers an entry's level, so an entry moves at most
// kLevels - 1 times in its life (a 31-day timer: at most 3). When a bound stops an advance
// early, next_expiry_ms() returns <= now_ms(), telling the loop to call again without sleeping.
//
// Memory: sizeof(TimerWheel) is ~193 KiB (2048 slots x 4 lanes x 24-byte sentinels, plus
// bitmaps), plus the caller's 24-byte TimerEntry per timer; nothing is allocated, ever. At
// 1 M timers that is 24.2 bytes per timer. The wheel holds pointers into itself (the
// sentinels), so it is neither copyable nor movable: allocate it once per shard.
// ---------------------------------------------------------------------------------------------
class TimerWheel {
 public:
  static constexpr int kLevelBits = 8;
  static constexpr int kSlotsPerLevel = 1 << kLevelBits;
  static constexpr int kLevels = (64 + kLevelBits - 1) / kLevelBits;
  static constexpr int kWordsPerLevel = (kSlotsPerLevel + 63) / 64;
  static constexpr int kLanes = 4;  // lists per slot, walked together when cascading
  static constexpr int64_t kNoExpiry = std::numeric_limits<int64_t>::max();
  static constexpr size_t kDefaultMaxMovesPerAdvance = 16384;
  static_assert(kLevels <= 32 && kWordsPerLevel <= 64);
  static_assert((kLanes & (kLanes - 1)) == 0);

  explicit TimerWheel(int64_t now_ms, size_t max_moves_per_advance = kDefaultMaxMovesPerAdvance);
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // Links `e` to fire at `expiry_ms`. When `e` is already linked (to this wheel) it is moved.
  // expiry_ms <= now_ms(): fires at the start of the next advance().
  void schedule(TimerEntry* e, int64_t expiry_ms);

  // Unlinks `e`; a no-op when it is not linked. It will not fire.
  void cancel(TimerEntry* e) {
    if (!e->linked()) return;
    unlink(e);
    --size_;
  }

  // Moves the wheel's time to `now_ms` (never backwards) and fires every entry due by then,
  // in order, calling `on_fire(TimerEntry*)` at most `max_fire` times. Each entry is unlinked
  // before its callback, which may schedule and cancel any entry (this one included). Returns
  // the number fired. When a bound stops it early, the rest fires on the next call.
  template <class F>
  size_t advance(int64_t now_ms, size_t max_fire, F&& on_fire) {
    begin_advance();
    const uint64_t target = key(now_ms);
    size_t moves_left = max_moves_;
    size_t fired = 0;
    while (fired < max_fire) {
      TimerEntry* e = !list_empty(&ready_) ? pop_front(&ready_)
                      : !list_empty(&due_) ? pop_front(&due_)
                                           : next_due_slow(target, &moves_left);
      if (e == nullptr) break;
      ++fired;
      on_fire(e);
    }
    return fired;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // A lower bound on the next effective expiry: exact when the earliest entry is within the
  // current 256 ms block, else the start of the slot holding it (the loop may wake early;
  // the advance then re-places entries and the bound tightens, at most kLevels times).
  // <= now_ms() when work is pending now (due, past-due or an unfinished cascade);
  // kNoExpiry when the wheel is empty.
  int64_t next_expiry_ms() const;

  // The wheel's time: entries with expiry <= now_ms() are due (or fired). Inside a callback
  // it is the fired entry's expiry (or later, for an entry scheduled past-due).
  int64_t now_ms() const { return from_key(now_); }

  // Counters for metrics and tests.
  uint64_t moves_total() const { return moves_total_; }
  size_t max_moves_per_advance() const { return max_moves_; }

 private:
  static constexpr uint64_t kSignBit = uint64_t{1} << 63;
  static constexpr int kSlots = kLevels * kSlotsPerLevel;
  static uint64_t key(int64_t ms) { return static_cast<uint64_t>(ms) ^ kSignBit; }
  static int64_t from_key(uint64_t k) { return static_cast<int64_t>(k ^ kSignBit); }

  static void init_head(TimerEntry* h) { h->next = h->prev = h; }
  static bool list_empty(const TimerEntry* h) { return h->next == h; }
  static void link_tail(TimerEntry* h, TimerEntry* e) {
    TimerEntry* tail = h->prev;
    e->prev = tail;
    e->next = h;
    tail->next = e;
    h->prev = e;
  }
  void unlink(TimerEntry* e) {
    TimerEntry* p = e->prev;
    TimerEntry* n = e->next;
    p->next = n;
    n->prev = p;
    e->next = e->prev = nullptr;
    if (p == n) on_list_emptied(p);  // only a sentinel can be its own neighbour
  }
  TimerEntry* pop_front(TimerEntry* h) {
    TimerEntry* e = h->next;
    TimerEntry* n = e->next;
    h->next = n;
    n->prev = h;
    e->next = e->prev = nullptr;
    --size_;
    return e;
  }

  void on_list_emptied(TimerEntry* head);
  bool cascading() const;
  void cascade(size_t* moves_left);
  static void splice_tail(TimerEntry* to, TimerEntry* from);  // `from` non-empty
  void begin_advance();
  TimerEntry* next_due_slow(uint64_t target, size_t* moves_left);
  void place(TimerEntry* e, uint64_t k);  // k > now_
  void set_bit(int index);
  void clear_bit(int index);
  bool find_first(int* level, int* slot) const;
  uint64_t slot_start(int level, int slot) const;

  uint64_t now_;
  size_t size_ = 0;
  size_t max_moves_;
  uint64_t moves_total_ = 0;
  uint32_t next_lane_ = 0;
  uint32_t level_mask_ = 0;                          // bit L: level L has an occupied slot
  uint64_t word_mask_[kLevels] = {};                 // bit w: occupied_[L][w] != 0
  uint64_t occupied_[kLevels][kWordsPerLevel] = {};  // bit per slot
  TimerEntry ready_;            // past-due entries of this advance, in order of scheduling
  TimerEntry due_;              // entries whose expiry is now_, from a level-0 slot or a cascade
  TimerEntry cascade_[kLanes];  // entries of a level > 0 slot waiting to be re-placed
  TimerEntry past_;             // scheduled with expiry <= now_: join ready_ at the next advance
  TimerEntry heads_[kSlots * kLanes];  // slot s, lane j: heads_[s * kLanes + j]
};

}  // namespace ringcast
