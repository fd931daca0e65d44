// Message ids (SPEC R11.3): the webhook id receivers deduplicate by, assigned at acceptance.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/types.h"

namespace ringcast {
namespace {

const WallTime kT0 = WallTime::from_ms(1'767'225'600'000);

TEST(MessageId, FormIsMsgAnd26CrockfordDigits) {
  const std::string id = make_message_id(kT0, 0xabcd, 0x0123456789abcdefULL);
  ASSERT_EQ(id.size(), kMessageIdChars);
  EXPECT_EQ(id.rfind("msg_", 0), 0u);
  for (char c : id.substr(4)) {
    EXPECT_NE(std::string("0123456789ABCDEFGHJKMNPQRSTVWXYZ").find(c), std::string::npos) << c;
  }
  // Safe in a header and in a URL path: no space, no separator, printable ASCII only.
  for (char c : id) EXPECT_TRUE(c > 0x20 && c < 0x7f);
}

TEST(MessageId, BitsRoundTripAndMalformedIdsHaveNone) {
  // The idempotency record keeps the 128 bits; the id made from them is the same id.
  for (uint64_t lo : {uint64_t{0}, uint64_t{1}, uint64_t{0x0123456789abcdefULL}, ~uint64_t{0}}) {
    for (uint64_t hi : {uint64_t{0}, uint64_t{0xffff}, uint64_t{0x1234}}) {
      const std::string id = make_message_id(kT0, hi, lo);
      const MessageIdBits b = message_id_bits(id);
      EXPECT_FALSE(b.empty()) << id;
      EXPECT_EQ(message_id_of(b), id);
      char buf[kMessageIdChars];
      EXPECT_EQ(std::string(buf, format_message_id(b, buf)), id);
    }
  }
  EXPECT_EQ(message_id_of({}), "");
  const std::string good = make_message_id(kT0, 7, 9);
  std::string lower = good;
  lower[10] = 'a';
  std::string skipped = good;
  skipped[10] = 'U';  // not in Crockford's alphabet
  std::string top = good;
  top[4] = '8';  // the first digit holds 3 bits
  for (const std::string& bad : {std::string(""), std::string("msg_"), good.substr(1),
                                 "evt_" + good.substr(4), good + "0", lower, skipped, top}) {
    EXPECT_TRUE(message_id_bits(bad).empty()) << bad;
  }
}

TEST(MessageId, EveryBitCountsAndIdsSortByTime) {
  // Any difference in the 128 bits is a different id (no bit is dropped by the encoding).
  std::set<std::string> seen;
  for (int bit = 0; bit < 64; ++bit) {
    seen.insert(make_message_id(kT0, 0, uint64_t{1} << bit));
  }
  for (int bit = 0; bit < 16; ++bit) seen.insert(make_message_id(kT0, uint64_t{1} << bit, 0));
  seen.insert(make_message_id(kT0, 0, 0));
  EXPECT_EQ(seen.size(), 64u + 16u + 1u);
  // The millisecond prefix leads: a later acceptance sorts after, whatever the random part.
  EXPECT_LT(make_message_id(kT0, 0xffff, ~uint64_t{0}),
            make_message_id(kT0 + milliseconds(1), 0, 0));
  // Only the low 16 bits of random_hi are used: the time is never overwritten.
  EXPECT_EQ(make_message_id(kT0, 0x10000, 5), make_message_id(kT0, 0, 5));
}

TEST(MessageId, LegacyIdsAreStableAndDistinctPerSequence) {
  EXPECT_EQ(legacy_message_id(kT0, 42), legacy_message_id(kT0, 42));
  EXPECT_NE(legacy_message_id(kT0, 42), legacy_message_id(kT0, 43));
  EXPECT_EQ(legacy_message_id(kT0, 42).size(), kMessageIdChars);
}

}  // namespace
}  // namespace ringcast
