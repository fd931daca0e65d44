// Timer wheel: ordering across every level and far horizons, a randomized reference model
// (std::multimap) with a printed seed, cancel in every list, callback reentrancy, the max_fire
// and cascade bounds, large time jumps and next_expiry_ms as a sleep bound.
#include "core/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ringcast {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int kScale = 4;  // ASan+UBSan CI: fewer random steps
#else
constexpr int kScale = 1;
#endif

constexpr int64_t kStart = 1'767'225'600'000;  // 2026-01-01 in ms
constexpr int64_t kSec = 1000;
constexpr int64_t kMin = 60 * kSec;
constexpr int64_t kHour = 60 * kMin;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kYear = 365 * kDay;

struct Item {
  TimerEntry entry;  // first member: Item* and TimerEntry* convert
  int id = 0;
};
Item* item_of(TimerEntry* e) {
  return reinterpret_cast<Item*>(e);
}

std::vector<Item> make_items(int n) {
  std::vector<Item> items(n);
  for (int i = 0; i < n; ++i) items[i].id = i;
  return items;
}

// Offsets that straddle every level boundary (8-bit digits) plus the horizons that matter.
std::vector<int64_t> boundary_offsets() {
  std::vector<int64_t> v = {1,         2,         3,         255,        256,
                            257,       1000,      65'535,    65'536,     65'537,
                            kSec,      kMin,      kHour,     4 * kHour,  5 * kHour,
                            kDay,      7 * kDay,  30 * kDay, 31 * kDay,  32 * kDay,
                            49 * kDay, 50 * kDay, kYear,     10 * kYear, 100 * kYear};
  for (int shift = 8; shift <= 48; shift += 8) {
    const int64_t b = int64_t{1} << shift;
    for (int64_t d : {-1, 0, 1}) v.push_back(b + d);
    // Absolute boundaries relative to kStart: the next multiple of 2^shift.
    const int64_t abs_next = ((kStart >> shift) + 1) << shift;
    for (int64_t d : {-1, 0, 1}) v.push_back(abs_next + d - kStart);
  }
  return v;
}

TEST(TimerWheelTest, EmptyWheel) {
  TimerWheel w(kStart);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.next_expiry_ms(), TimerWheel::kNoExpiry);
  EXPECT_EQ(w.advance(kStart + kDay, 100, [](TimerEntry*) { FAIL(); }), 0u);
  EXPECT_EQ(w.now_ms(), kStart + kDay);
  // Time never goes backwards.
  EXPECT_EQ(w.advance(kStart, 100, [](TimerEntry*) { FAIL(); }), 0u);
  EXPECT_EQ(w.now_ms(), kStart + kDay);
}

TEST(TimerWheelTest, OrderingAcrossAllLevelsInOneJump) {
  const std::vector<int64_t> offsets = boundary_offsets();
  auto items = make_items(static_cast<int>(offsets.size()) * 3);
  TimerWheel w(kStart);
  std::mt19937_64 rng(7);
  std::vector<int> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> expected;
  for (int i : order) {
    const int64_t exp =
        kStart + offsets[i % offsets.size()] + static_cast<int64_t>(i / offsets.size());
    w.schedule(&items[i].entry, exp);
    expected.push_back(exp);
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(w.size(), items.size());
  std::vector<int64_t> got;
  const int64_t far = kStart + (int64_t{1} << 52);  // ~140,000 years
  const size_t n = w.advance(far, SIZE_MAX, [&](TimerEntry* e) {
    EXPECT_FALSE(e->linked());
    EXPECT_EQ(w.now_ms(), e->expiry_ms);  // the millisecond being fired
    got.push_back(e->expiry_ms);
  });
  EXPECT_EQ(n, items.size());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.now_ms(), far);
  // Amortised cascade bound: every re-placement lowers a level.
  EXPECT_LE(w.moves_total(), items.size() * (TimerWheel::kLevels - 1));
}

TEST(TimerWheelTest, FiresAtTheRightMillisecondWhenSteppedByOne) {
  // Step 1 ms at a time over two level-1 blocks and a bit: nothing early, nothing late.
  auto items = make_items(600);
  TimerWheel w(kStart);
  for (auto& it : items) w.schedule(&it.entry, kStart + 1 + it.id);
  int next = 0;
  for (int64_t t = kStart + 1; t <= kStart + 700; ++t) {
    w.advance(t, SIZE_MAX, [&](TimerEntry* e) {
      EXPECT_EQ(e->expiry_ms, t);
      EXPECT_EQ(item_of(e)->id, next);
      ++next;
    });
  }
  EXPECT_EQ(next, 600);
}

TEST(TimerWheelTest, FarHorizonsFireExactly) {
  // Seconds, hours, 30 days, 31 days and beyond, each stepped to by the idle-loop pattern:
  // sleep until next_expiry_ms(), advance there. Each entry must fire in the advance whose
  // time equals its expiry (a lower bound never overshoots), and wake-ups stay bounded.
  const std::vector<int64_t> offsets = {5 * kSec,  90 * kMin, 23 * kHour, 30 * kDay,
                                        31 * kDay, 45 * kDay, 400 * kDay, 50 * kYear};
  auto items = make_items(static_cast<int>(offsets.size()));
  TimerWheel w(kStart);
  for (size_t i = 0; i < offsets.size(); ++i) w.schedule(&items[i].entry, kStart + offsets[i]);
  size_t fired = 0;
  size_t wakeups = 0;
  while (w.next_expiry_ms() != TimerWheel::kNoExpiry) {
    const int64_t t = w.next_expiry_ms();
    ASSERT_GE(t, w.now_ms());
    ++wakeups;
    w.advance(t, SIZE_MAX, [&](TimerEntry* e) {
      EXPECT_EQ(e->expiry_ms, t);
      EXPECT_EQ(e->expiry_ms, kStart + offsets[fired]);
      ++fired;
    });
    ASSERT_LE(wakeups, offsets.size() * TimerWheel::kLevels);
  }
  EXPECT_EQ(fired, offsets.size());
}

TEST(TimerWheelTest, ExtremeAndNegativeTimes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMinT = std::numeric_limits<int64_t>::min();
  TimerWheel w(-5);
  auto items = make_items(6);
  w.schedule(&items[0].entry, kMax);
  w.schedule(&items[1].entry, 3);
  w.schedule(&items[2].entry, -1);
  w.schedule(&items[3].entry, 0);
  w.schedule(&items[4].entry, kMax - 1);
  w.schedule(&items[5].entry, kMinT);  // past: next advance
  std::vector<int> got;
  w.advance(kMax, SIZE_MAX, [&](TimerEntry* e) { got.push_back(item_of(e)->id); });
  EXPECT_EQ(got, (std::vector<int>{5, 2, 3, 1, 4, 0}));
  EXPECT_EQ(w.now_ms(), kMax);
  // Nothing can be in the future of kMax: everything scheduled now is past-due.
  w.schedule(&items[0].entry, kMax);
  EXPECT_EQ(w.next_expiry_ms(), kMax);
  EXPECT_EQ(w.advance(kMax, 10, [](TimerEntry*) {}), 1u);
}

TEST(TimerWheelTest, PastDueFiresOnTheNextAdvanceFirst) {
  TimerWheel w(kStart);
  auto items = make_items(4);
  w.advance(kStart + 100, 10, [](TimerEntry*) {});
  w.schedule(&items[0].entry, kStart + 150);
  w.schedule(&items[1].entry, kStart + 50);   // past
  w.schedule(&items[2].entry, kStart + 100);  // == now: past-due as well
  EXPECT_EQ(w.size(), 3u);
  EXPECT_LE(w.next_expiry_ms(), w.now_ms());
  std::vector<int> got;
  w.advance(kStart + 100, 10, [&](TimerEntry* e) { got.push_back(item_of(e)->id); });
  EXPECT_EQ(got, (std::vector<int>{1, 2}));
  EXPECT_GT(w.next_expiry_ms(), kStart + 100);
  EXPECT_LE(w.next_expiry_ms(), kStart + 150);
  got.clear();
  w.advance(kStart + 150, 10, [&](TimerEntry* e) { got.push_back(item_of(e)->id); });
  EXPECT_EQ(got, (std::vector<int>{0}));
}

TEST(TimerWheelTest, CancelLinkedAndUnlinked) {
  TimerWheel w(kStart);
  auto items = make_items(3);
  w.cancel(&items[0].entry);  // never linked: no-op
  EXPECT_EQ(w.size(), 0u);
  w.schedule(&items[0].entry, kStart + 30 * kDay);
  w.schedule(&items[1].entry, kStart + 30 * kDay + 1);
  w.schedule(&items[2].entry, kStart + 10);
  EXPECT_TRUE(items[0].entry.linked());
  EXPECT_EQ(w.size(), 3u);
  EXPECT_EQ(w.next_expiry_ms(), kStart + 10);
  w.cancel(&items[2].entry);
  EXPECT_FALSE(items[2].entry.linked());
  EXPECT_EQ(w.size(), 2u);
  w.cancel(&items[2].entry);  // twice: no-op
  EXPECT_EQ(w.size(), 2u);
  // The 10 ms slot is gone from the bitmaps: the bound now points at the 30-day slot.
  const int64_t bound = w.next_expiry_ms();
  EXPECT_GT(bound, kStart + 10);
  EXPECT_LE(bound, kStart + 30 * kDay);
  w.cancel(&items[0].entry);
  EXPECT_LE(w.next_expiry_ms(), kStart + 30 * kDay + 1);
  w.cancel(&items[1].entry);
  EXPECT_EQ(w.next_expiry_ms(), TimerWheel::kNoExpiry);
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.advance(kStart + 100 * kDay, 10, [](TimerEntry*) { ADD_FAILURE(); }), 0u);
}

TEST(TimerWheelTest, SlotStaysOccupiedUntilItsLastEntryIsCancelled) {
  // Nine entries in one level-3 slot spread over every lane; the slot's bit must survive
  // until the last one goes, whichever lane it is in.
  TimerWheel w(kStart);
  auto items = make_items(9);
  const int64_t base = ((kStart >> 24) + 3) << 24;
  for (auto& it : items) w.schedule(&it.entry, base + 1000 + it.id);
  EXPECT_EQ(w.next_expiry_ms(), base);  // the slot's start: a lower bound
  for (int i : {4, 0, 8, 2, 6, 1, 7, 3}) {
    w.cancel(&items[i].entry);
    EXPECT_EQ(w.next_expiry_ms(), base) << "after cancelling " << i;
  }
  EXPECT_EQ(w.size(), 1u);
  std::vector<int> got;
  w.advance(base + 2000, 10, [&](TimerEntry* e) { got.push_back(item_of(e)->id); });
  EXPECT_EQ(got, std::vector<int>{5});
  w.schedule(&items[0].entry, base + 1000);
  w.cancel(&items[0].entry);
  EXPECT_EQ(w.next_expiry_ms(), TimerWheel::kNoExpiry);
}

TEST(TimerWheelTest, RescheduleLinkedEntryMovesIt) {
  TimerWheel w(kStart);
  auto items = make_items(2);
  w.schedule(&items[0].entry, kStart + kHour);
  w.schedule(&items[1].entry, kStart + 2 * kHour);
  w.schedule(&items[0].entry, kStart + 3 * kHour);  // later
  w.schedule(&items[1].entry, kStart + 5);          // earlier, other level
  EXPECT_EQ(w.size(), 2u);
  std::vector<int64_t> got;
  w.advance(kStart + kDay, 10, [&](TimerEntry* e) { got.push_back(e->expiry_ms - kStart); });
  EXPECT_EQ(got, (std::vector<int64_t>{5, 3 * kHour}));
}

TEST(TimerWheelTest, CancelWhileInDuePastAndCascadeLists) {
  auto items = make_items(40);
  // Due list: ten at the same ms, fire 3, cancel the rest but one.
  {
    TimerWheel w(kStart);
    for (int i = 0; i < 10; ++i) w.schedule(&items[i].entry, kStart + 7);
    EXPECT_EQ(w.advance(kStart + 7, 3, [](TimerEntry*) {}), 3u);
    EXPECT_EQ(w.size(), 7u);
    EXPECT_LE(w.next_expiry_ms(), kStart + 7);
    int linked = 0;
    for (int i = 0; i < 10; ++i) {
      if (!items[i].entry.linked()) continue;
      if (++linked == 1) continue;  // keep one
      w.cancel(&items[i].entry);
    }
    EXPECT_EQ(w.size(), 1u);
    EXPECT_EQ(w.advance(kStart + 7, 10, [](TimerEntry*) {}), 1u);
    EXPECT_EQ(w.next_expiry_ms(), TimerWheel::kNoExpiry);
  }
  // Past list.
  {
    TimerWheel w(kStart);
    w.schedule(&items[10].entry, kStart - 1);
    w.schedule(&items[11].entry, kStart - 2);
    w.cancel(&items[10].entry);
    std::vector<int> got;
    w.advance(kStart, 10, [&](TimerEntry* e) { got.push_back(item_of(e)->id); });
    EXPECT_EQ(got, std::vector<int>{11});
  }
  // Cascade list: one move per advance leaves entries waiting to be re-placed.
  {
    TimerWheel w(kStart, /*max_moves_per_advance=*/1);
    for (int i = 20; i < 30; ++i) w.schedule(&items[i].entry, kStart + kDay + i);
    EXPECT_EQ(w.advance(kStart + kDay + 100, 10, [](TimerEntry*) { ADD_FAILURE(); }), 0u);
    EXPECT_EQ(w.moves_total(), 1u);
    EXPECT_LE(w.next_expiry_ms(), w.now_ms());  // unfinished cascade: call again now
    for (int i = 21; i < 30; i += 2) w.cancel(&items[i].entry);
    EXPECT_EQ(w.size(), 5u);
    std::vector<int> got;
    for (int guard = 0; guard < 100 && got.size() < 5; ++guard) {
      w.advance(kStart + kDay + 100, 10, [&](TimerEntry* e) { got.push_back(item_of(e)->id); });
    }
    EXPECT_EQ(got, (std::vector<int>{20, 22, 24, 26, 28}));
    EXPECT_EQ(w.size(), 0u);
  }
}

TEST(TimerWheelTest, MaxFireBound) {
  TimerWheel w(kStart);
  auto items = make_items(100);
  for (auto& it : items) w.schedule(&it.entry, kStart + 1 + it.id % 5);
  int64_t last = 0;
  size_t total = 0;
  for (int round = 0; round < 10; ++round) {
    const size_t n = w.advance(kStart + 1000, 10, [&](TimerEntry* e) {
      EXPECT_GE(e->expiry_ms, last);
      last = e->expiry_ms;
    });
    EXPECT_EQ(n, 10u);
    total += n;
    EXPECT_EQ(w.size(), 100 - total);
    if (w.size() > 0) {
      EXPECT_LE(w.next_expiry_ms(), kStart + 1000);
    }
  }
  EXPECT_EQ(w.advance(kStart + 1000, 10, [](TimerEntry*) {}), 0u);
  EXPECT_EQ(w.advance(kStart + 1000, 0, [](TimerEntry*) {}), 0u);
}

TEST(TimerWheelTest, CallbackReentrancy) {
  TimerWheel w(kStart);
  auto items = make_items(8);
  for (int i = 0; i < 4; ++i) w.schedule(&items[i].entry, kStart + 10);
  w.schedule(&items[4].entry, kStart + 20);
  std::vector<std::pair<int, int64_t>> got;
  bool first = true;
  w.advance(kStart + 1000, 100, [&](TimerEntry* e) {
    Item* it = item_of(e);
    got.push_back({it->id, w.now_ms()});
    if (first) {
      first = false;
      w.cancel(e);  // already unlinked: no-op
      // Cancel every other entry due at this same millisecond: none of them may fire.
      for (int i = 0; i < 4; ++i) w.cancel(&items[i].entry);
      w.schedule(&items[5].entry, kStart + 15);  // inside this advance's range: fires at 15
      w.schedule(&items[6].entry, kStart + 5);   // past-due: waits for the next advance
      w.schedule(&items[4].entry, kStart + 12);  // move a linked one earlier
      w.schedule(e, kStart + 500);               // re-arm the fired one
    }
  });
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].second, kStart + 10);
  EXPECT_EQ(got[1], (std::pair<int, int64_t>{4, kStart + 12}));
  EXPECT_EQ(got[2], (std::pair<int, int64_t>{5, kStart + 15}));
  EXPECT_EQ(got[3], (std::pair<int, int64_t>{got[0].first, kStart + 500}));
  EXPECT_EQ(w.size(), 1u);  // items[6], past-due
  got.clear();
  w.advance(kStart + 1000, 100, [&](TimerEntry* e) { got.push_back({item_of(e)->id, 0}); });
  EXPECT_EQ(got, (std::vector<std::pair<int, int64_t>>{{6, 0}}));
}

TEST(TimerWheelTest, SelfRearmingInThePastCannotLivelockAnAdvance) {
  TimerWheel w(kStart);
  Item it;
  w.schedule(&it.entry, kStart + 1);
  size_t calls = 0;
  for (int turn = 0; turn < 5; ++turn) {
    const size_t n = w.advance(kStart + 10, 1000, [&](TimerEntry* e) {
      ++calls;
      w.schedule(e, w.now_ms());  // "again, right now"
    });
    EXPECT_EQ(n, 1u);
  }
  EXPECT_EQ(calls, 5u);
}

TEST(TimerWheelTest, LargeTimeJumpsAreCheap) {
  // Jumps of decades over a sparse wheel: the number of slot visits is bounded by the entry
  // count times the level count, never by elapsed milliseconds (2^60 ms would never end).
  TimerWheel w(kStart);
  auto items = make_items(64);
  for (auto& it : items) w.schedule(&it.entry, kStart + (int64_t{1} << (it.id % 60)) + it.id);
  int64_t last = std::numeric_limits<int64_t>::min();
  size_t fired = 0;
  for (int64_t t = kStart; fired < items.size(); t += int64_t{1} << 58) {
    fired += w.advance(t, SIZE_MAX, [&](TimerEntry* e) {
      EXPECT_GE(e->expiry_ms, last);
      EXPECT_LE(e->expiry_ms, t);
      last = e->expiry_ms;
    });
  }
  EXPECT_LE(w.moves_total(), items.size() * (TimerWheel::kLevels - 1));
  // After a jump on an empty wheel, short timers still fire on time.
  TimerWheel w2(kStart);
  const int64_t later = kStart + 300 * kYear + 77;
  w2.advance(later, 1, [](TimerEntry*) {});
  EXPECT_EQ(w2.now_ms(), later);
  w2.schedule(&items[0].entry, later + 3);
  EXPECT_GT(w2.next_expiry_ms(), later);
  EXPECT_LE(w2.next_expiry_ms(), later + 3);
  EXPECT_EQ(w2.advance(later + 2, 1, [](TimerEntry*) {}), 0u);
  EXPECT_EQ(w2.advance(later + 3, 1, [](TimerEntry*) {}), 1u);
}

TEST(TimerWheelTest, CascadeWorkPerAdvanceIsBounded) {
  // 5,000 entries in one level-3 slot; 64 moves per advance. Each call moves <= 64 entries
  // or fires something, and the whole set still fires in order.
  constexpr size_t kMoves = 64;
  TimerWheel w(kStart, kMoves);
  auto items = make_items(5000);
  std::mt19937_64 rng(11);
  const int64_t base = ((kStart >> 24) + 2) << 24;  // start of a level-3 slot, ~5-9 h ahead
  for (auto& it : items) {
    w.schedule(&it.entry, base + static_cast<int64_t>(rng() % (int64_t{1} << 24)));
  }
  const int64_t target = base + (int64_t{1} << 24);
  int64_t last = 0;
  size_t fired = 0;
  size_t calls = 0;
  while (fired < items.size()) {
    const uint64_t moves_before = w.moves_total();
    const size_t n = w.advance(target, 16, [&](TimerEntry* e) {
      EXPECT_GE(e->expiry_ms, last);
      last = e->expiry_ms;
    });
    const uint64_t moved = w.moves_total() - moves_before;
    EXPECT_LE(moved, kMoves);
    ASSERT_TRUE(n > 0 || moved > 0) << "no progress";
    fired += n;
    ASSERT_LT(++calls, 100'000u);
  }
  EXPECT_EQ(w.size(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Reference model. Every entry has an effective expiry: its expiry when it was in the future
// of now_ms() at schedule time, else now_ms() then (past-due: fires at the start of the next
// advance, never in the advance that scheduled it). The wheel must fire in non-decreasing
// effective expiry, fire everything due unless a bound stopped it, never fire early, and keep
// size() and next_expiry_ms() consistent.
class ModelRun {
 public:
  ModelRun(uint64_t seed, int items, size_t max_moves)
      : seed_(seed),
        rng_(seed),
        wheel_(kStart + static_cast<int64_t>(seed % 100'000), max_moves),
        items_(make_items(items)),
        model_(items),
        unlimited_moves_(max_moves == SIZE_MAX) {}

  std::string failure() const { return failure_; }

  void run(int steps) {
    for (int step = 0; step < steps && failure_.empty(); ++step) {
      const uint64_t r = rng_() % 100;
      if (r < 45) {
        const int id = random_id();
        schedule(id, random_expiry());
      } else if (r < 60) {
        cancel(random_id());
      } else {
        const int64_t target = random_target();
        advance(target, pick_max_fire());
      }
      check_consistency();
    }
    // Drain: everything fires, in order, in a bounded number of calls.
    for (int guard = 0; guard < 100'000 && failure_.empty() && wheel_.size() > 0; ++guard) {
      reentrant_ = false;
      const int64_t t = wheel_.next_expiry_ms();
      advance(std::max(t, wheel_.now_ms()), SIZE_MAX);
      check_consistency();
    }
    if (failure_.empty() && wheel_.size() != 0) fail("drain did not finish");
    if (failure_.empty() && wheel_.moves_total() > schedules_ * (TimerWheel::kLevels - 1)) {
      fail("cascade moves exceed (levels - 1) per schedule");
    }
  }

 private:
  struct Model {
    bool linked = false;
    bool new_carry = false;  // past-due, scheduled during the current advance
    int64_t eff = 0;
    std::multimap<int64_t, int>::iterator it;
  };

  void fail(const std::string& what) {
    if (!failure_.empty()) return;
    std::ostringstream os;
    os << "seed=" << seed_ << " now_ms=" << wheel_.now_ms() << ": " << what;
    failure_ = os.str();
  }

  int random_id() { return static_cast<int>(rng_() % items_.size()); }

  int64_t random_span() {
    static constexpr int64_t kSpans[] = {4,    300,       70'000,    5 * kHour,
                                         kDay, 32 * kDay, 60 * kDay, 3 * kYear};
    return kSpans[rng_() % std::size(kSpans)];
  }

  int64_t random_expiry() {
    const int64_t now = wheel_.now_ms();
    if (rng_() % 10 == 0) return now - static_cast<int64_t>(rng_() % 1000);  // past-due
    const int64_t span = random_span();
    return now + static_cast<int64_t>(rng_() % static_cast<uint64_t>(span));
  }

  int64_t random_target() {
    const int64_t now = wheel_.now_ms();
    const uint64_t r = rng_() % 100;
    if (r < 5) return now - 10;  // backwards: a no-op for time
    if (r < 60) return now + static_cast<int64_t>(rng_() % 600);
    const int64_t span = random_span();
    return now + static_cast<int64_t>(rng_() % static_cast<uint64_t>(span));
  }

  size_t pick_max_fire() {
    const uint64_t r = rng_() % 4;
    return r == 0 ? 1 : r == 1 ? 7 : SIZE_MAX;
  }

  void model_unlink(int id) {
    Model& m = model_[id];
    if (!m.linked) return;
    (m.new_carry ? new_carry_ : pending_).erase(m.it);
    m.linked = false;
    m.new_carry = false;
  }

  void schedule(int id, int64_t exp) {
    ++schedules_;
    model_unlink(id);
    Model& m = model_[id];
    const int64_t now = wheel_.now_ms();
    m.linked = true;
    if (exp > now) {
      m.eff = exp;
      m.it = pending_.emplace(exp, id);
    } else {
      m.eff = now;
      m.new_carry = in_advance_;
      m.it = (in_advance_ ? new_carry_ : pending_).emplace(now, id);
    }
    wheel_.schedule(&items_[id].entry, exp);
  }

  void cancel(int id) {
    model_unlink(id);
    wheel_.cancel(&items_[id].entry);
  }

  void advance(int64_t target, size_t max_fire) {
    // Carries of the previous advance become ordinary pending entries.
    for (auto& [eff, id] : new_carry_) {
      model_[id].new_carry = false;
      model_[id].it = pending_.emplace(eff, id);
    }
    new_carry_.clear();
    const int64_t before = wheel_.now_ms();
    advance_start_ms_ = before;
    in_advance_ = true;
    const uint64_t moves_before = wheel_.moves_total();
    const size_t fired =
        wheel_.advance(target, max_fire, [&](TimerEntry* e) { on_fire(e, target); });
    in_advance_ = false;
    if (!failure_.empty()) return;
    if (fired > max_fire) fail("fired more than max_fire");
    if (wheel_.moves_total() - moves_before > wheel_.max_moves_per_advance()) {
      fail("more cascade moves than the per-advance bound");
    }
    if (wheel_.now_ms() < before) fail("time went backwards");
    if (wheel_.now_ms() > std::max(before, target)) fail("time moved past the target");
    // Complete unless a bound stopped it: nothing with eff <= target may remain pending.
    if (unlimited_moves_ && fired < max_fire) {
      if (!pending_.empty() && pending_.begin()->first <= target) {
        std::ostringstream os;
        os << "entry id=" << pending_.begin()->second << " eff=" << pending_.begin()->first
           << " not fired by advance(" << target << ")";
        fail(os.str());
      }
      if (wheel_.now_ms() != std::max(before, target)) fail("complete advance left time behind");
    }
  }

  void on_fire(TimerEntry* e, int64_t target) {
    if (!failure_.empty()) return;
    const int id = item_of(e)->id;
    Model& m = model_[id];
    std::ostringstream os;
    os << "fired id=" << id << " exp=" << e->expiry_ms << " eff=" << m.eff << " target=" << target;
    if (e->linked()) return fail(os.str() + ": still linked in the callback");
    if (!m.linked) return fail(os.str() + ": not scheduled");
    if (m.new_carry)
      return fail(os.str() + ": past-due entry fired in the advance that scheduled it");
    // Entries already due (left over by max_fire) fire even when the target went backwards.
    if (e->expiry_ms > std::max(target, advance_start_ms_)) return fail(os.str() + ": early");
    if (pending_.begin()->first != m.eff) {
      os << ": out of order, id=" << pending_.begin()->second
         << " with eff=" << pending_.begin()->first << " is pending";
      return fail(os.str());
    }
    if (m.eff > wheel_.now_ms()) return fail(os.str() + ": eff after the wheel's time");
    model_unlink(id);
    // Reentrancy: the callback re-arms itself, cancels or schedules others.
    if (!reentrant_) return;
    const uint64_t r = rng_() % 10;
    if (r < 3) {
      schedule(id, random_expiry());
    } else if (r < 5) {
      cancel(random_id());
    } else if (r < 7) {
      const int other = random_id();
      schedule(other, random_expiry());
    }
  }

  void check_consistency() {
    if (!failure_.empty()) return;
    const size_t linked = pending_.size() + new_carry_.size();
    if (wheel_.size() != linked) {
      std::ostringstream os;
      os << "size " << wheel_.size() << " != model " << linked;
      return fail(os.str());
    }
    int64_t min_eff = TimerWheel::kNoExpiry;
    if (!pending_.empty()) min_eff = pending_.begin()->first;
    if (!new_carry_.empty()) min_eff = std::min(min_eff, new_carry_.begin()->first);
    const int64_t bound = wheel_.next_expiry_ms();
    if (linked == 0 && bound != TimerWheel::kNoExpiry) return fail("empty wheel has an expiry");
    // Something already due (past-due, or left by a bound): the bound is "now" at the latest.
    if (min_eff <= wheel_.now_ms() && bound > wheel_.now_ms()) {
      return fail("an entry is due but next_expiry_ms is in the future");
    }
    if (min_eff > wheel_.now_ms() && bound > min_eff) {
      std::ostringstream os;
      os << "next_expiry_ms " << bound << " later than the earliest entry " << min_eff;
      return fail(os.str());
    }
    for (size_t i = 0; i < items_.size(); i += 1 + rng_() % 8) {
      if (items_[i].entry.linked() != model_[i].linked) return fail("linked() disagrees");
    }
  }

  uint64_t seed_;
  std::mt19937_64 rng_;
  TimerWheel wheel_;
  std::vector<Item> items_;
  std::vector<Model> model_;
  std::multimap<int64_t, int> pending_;    // eff -> id
  std::multimap<int64_t, int> new_carry_;  // past-due entries scheduled in this advance
  bool in_advance_ = false;
  bool reentrant_ = true;
  bool unlimited_moves_;
  uint64_t schedules_ = 0;
  int64_t advance_start_ms_ = 0;
  std::string failure_;
};

TEST(TimerWheelModelTest, RandomOpsAgainstMultimap) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    auto run = std::make_unique<ModelRun>(seed * 0x9E3779B97F4A7C15ull, 300, SIZE_MAX);
    run->run(40'000 / kScale);
    ASSERT_EQ(run->failure(), "") << "reproduce with this seed";
  }
}

TEST(TimerWheelModelTest, RandomOpsWithTinyCascadeBudget) {
  for (uint64_t seed = 100; seed < 106; ++seed) {
    auto run = std::make_unique<ModelRun>(seed, 200, 1 + seed % 5);
    run->run(20'000 / kScale);
    ASSERT_EQ(run->failure(), "") << "reproduce with this seed";
  }
}

TEST(TimerWheelModelTest, ManyEntriesFewIds) {
  // Dense collisions: 20 ids rescheduled constantly, short spans.
  for (uint64_t seed = 500; seed < 508; ++seed) {
    auto run = std::make_unique<ModelRun>(seed, 20, SIZE_MAX);
    run->run(20'000 / kScale);
    ASSERT_EQ(run->failure(), "") << "reproduce with this seed";
  }
}

}  // namespace
}  // namespace ringcast
