// storage/id_map.h against std::unordered_map: the same answers through random inserts,
// overwrites and erases (backward-shift deletion must keep every probe run reachable), id 0
// included, and partition-shaped ids (the high bits set, the low ones dense).
#include "storage/id_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace ringcast::storage {
namespace {

TEST(IdMap, AgreesWithUnorderedMapThroughRandomInsertsAndErases) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    IdMap<uint64_t> map;
    std::unordered_map<uint64_t, uint64_t> ref;
    // A small key space: many collisions, long probe runs, keys erased and inserted again.
    const uint64_t space = 64 + seed * 37;
    auto key_of = [&](uint64_t k) {
      return k == 0 ? 0 : make_id(static_cast<Partition>(k % 5), k);
    };
    for (int step = 0; step < 20000; ++step) {
      const uint64_t id = key_of(rng() % space);
      switch (rng() % 4) {
        case 0:
        case 1: {
          const uint64_t value = rng();
          auto [at, fresh] = map.try_emplace(id, value);
          auto [rit, rfresh] = ref.try_emplace(id, value);
          ASSERT_EQ(fresh, rfresh) << "seed " << seed << " step " << step;
          ASSERT_EQ(*at, rit->second);
          if (rng() % 2 == 0) *at = rit->second = rng();  // an overwrite through the pointer
          break;
        }
        case 2:
          ASSERT_EQ(map.erase(id), ref.erase(id) == 1) << "seed " << seed << " step " << step;
          break;
        default: {
          const uint64_t* at = map.find(id);
          auto rit = ref.find(id);
          ASSERT_EQ(at != nullptr, rit != ref.end()) << "seed " << seed << " step " << step;
          if (at) {
            ASSERT_EQ(*at, rit->second);
          }
        }
      }
      ASSERT_EQ(map.size(), ref.size());
    }
    size_t seen = 0;
    map.for_each([&](uint64_t id, const uint64_t& v) {
      ++seen;
      auto rit = ref.find(id);
      ASSERT_NE(rit, ref.end());
      EXPECT_EQ(v, rit->second);
    });
    EXPECT_EQ(seen, ref.size());
  }
}

TEST(IdMap, GrowsAndEmptiesWithoutLosingAnEntry) {
  IdMap<int> map;
  std::vector<uint64_t> ids;
  for (uint64_t s = 1; s <= 100000; ++s) ids.push_back(make_id(static_cast<Partition>(s % 256), s));
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_TRUE(map.try_emplace(ids[i], static_cast<int>(i)).second);
  EXPECT_EQ(map.size(), ids.size());
  for (size_t i = 0; i < ids.size(); i += 2) EXPECT_TRUE(map.erase(ids[i]));
  for (size_t i = 0; i < ids.size(); ++i) {
    const int* v = map.find(ids[i]);
    if (i % 2 == 0) {
      EXPECT_EQ(v, nullptr);
    } else {
      ASSERT_NE(v, nullptr);
      EXPECT_EQ(*v, static_cast<int>(i));
    }
  }
  for (size_t i = 1; i < ids.size(); i += 2) EXPECT_TRUE(map.erase(ids[i]));
  EXPECT_TRUE(map.empty());
  EXPECT_FALSE(map.erase(ids[0]));
}

}  // namespace
}  // namespace ringcast::storage
