// core/retry_after: SPEC R7 — both RFC 9110 forms, garbage ignored, the 1 h cap, past dates,
// and "postpone but never hasten".
#include "core/retry_after.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace ringcast {
namespace {

// 2026-01-01T00:00:00Z, a Thursday (ManualClock's default start).
constexpr int64_t kNowS = 1'767'225'600;
const WallTime kNow = WallTime::from_ns(kNowS * 1'000'000'000);

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(1969, 12, 31) == -1);
static_assert(days_from_civil(2000, 3, 1) == 11'017);
static_assert(days_from_civil(2026, 1, 1) * 86400 == kNowS);
static_assert(days_from_civil(1994, 11, 6) * 86400 + 8 * 3600 + 49 * 60 + 37 == 784'111'777);

struct Case {
  const char* value;
  std::optional<int64_t> seconds;  // nullopt: ignored
};

TEST(RetryAfter, DelaySeconds) {
  const Case kCases[] = {
      {"0", 0},
      {"1", 1},
      {"120", 120},
      {"007", 7},
      {" 5", 5},
      {"5 ", 5},
      {"\t30\t", 30},
      {"3599", 3599},
      {"3600", 3600},
      {"3601", 3600},  // capped at 1 h (R7.2)
      {"86400", 3600},
      {"922337203685477579", 3600},           // huge but representable: capped
      {"9223372036854775807", std::nullopt},  // overflow: ignored
      {"99999999999999999999999", std::nullopt},
      {"-1", std::nullopt},  // negative
      {"-0", std::nullopt},
      {"+5", std::nullopt},
      {"5.5", std::nullopt},
      {"5s", std::nullopt},
      {"1e3", std::nullopt},
      {"0x10", std::nullopt},
      {"5 5", std::nullopt},
      {"", std::nullopt},
      {"   ", std::nullopt},
      {"soon", std::nullopt},
      {"120, 60", std::nullopt},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(std::string("'") + c.value + "'");
    auto d = parse_retry_after(c.value, kNow);
    if (!c.seconds) {
      EXPECT_FALSE(d.has_value()) << d->count();
    } else {
      ASSERT_TRUE(d.has_value());
      EXPECT_EQ(*d, seconds(*c.seconds));
    }
  }
}

TEST(RetryAfter, HttpDateAllThreeForms) {
  const Case kCases[] = {
      // now + 120 s in each form.
      {"Thu, 01 Jan 2026 00:02:00 GMT", 120},     // IMF-fixdate
      {"Thursday, 01-Jan-26 00:02:00 GMT", 120},  // obsolete RFC 850
      {"Thu Jan  1 00:02:00 2026", 120},          // asctime, space-padded day
      {"Thu Jan 01 00:02:00 2026", 120},          // asctime, two-digit day
      {"  Thu, 01 Jan 2026 00:02:00 GMT ", 120},  // OWS around the value
      {"thu, 01 jan 2026 00:02:00 gmt", 120},     // names are matched case-insensitively
      {"Mon, 01 Jan 2026 00:02:00 GMT", 120},     // wrong weekday: not cross-checked
      {"Thu, 01 Jan 2026 00:59:59 GMT", 3599},
      {"Thu, 01 Jan 2026 01:00:00 GMT", 3600},
      {"Thu, 01 Jan 2026 01:00:01 GMT", 3600},  // capped
      {"Fri, 02 Jan 2026 00:00:00 GMT", 3600},
      {"Fri, 31 Dec 9999 23:59:59 GMT", 3600},  // far future: capped, no overflow
      {"Thu, 01 Jan 2026 00:00:00 GMT", 0},     // now
      {"Wed, 31 Dec 2025 23:59:59 GMT", 0},     // past → 0
      {"Sun, 06 Nov 1994 08:49:37 GMT", 0},
      {"Sunday, 06-Nov-94 08:49:37 GMT", 0},
      {"Sun Nov  6 08:49:37 1994", 0},
      {"Mon, 01 Jan 0001 00:00:00 GMT", 0},
      {"Wed, 31 Dec 2025 23:59:60 GMT", 0},  // leap second accepted
      // garbage
      {"Thu, 01 Jan 2026 00:02:00 UTC", std::nullopt},
      {"Thu, 01 Jan 2026 00:02:00", std::nullopt},
      {"Thu, 01 Jan 2026 00:02:00 GMT x", std::nullopt},
      {"Thu, 1 Jan 2026 00:02:00 GMT", std::nullopt},
      {"Thu 01 Jan 2026 00:02:00 GMT", std::nullopt},
      {"Thu, 01 Foo 2026 00:02:00 GMT", std::nullopt},
      {"Xyz, 01 Jan 2026 00:02:00 GMT", std::nullopt},
      {"Thu, 01 Jan 26 00:02:00 GMT", std::nullopt},
      {"Thu, 01-Jan-26 00:02:00 GMT", std::nullopt},  // RFC 850 needs the long day name
      {"Thursday, 01-Jan-2026 00:02:00 GMT", std::nullopt},
      {"Thu Jan 1 00:02:00 2026", std::nullopt},
      {"Thu, 30 Feb 2026 00:00:00 GMT", std::nullopt},
      {"Thu, 29 Feb 2027 00:00:00 GMT", std::nullopt},
      {"Thu, 00 Jan 2026 00:00:00 GMT", std::nullopt},
      {"Thu, 32 Jan 2026 00:00:00 GMT", std::nullopt},
      {"Thu, 31 Apr 2026 00:00:00 GMT", std::nullopt},
      {"Thu, 01 Jan 2026 24:00:00 GMT", std::nullopt},
      {"Thu, 01 Jan 2026 00:60:00 GMT", std::nullopt},
      {"Thu, 01 Jan 2026 00:00:61 GMT", std::nullopt},
      {"Thu, 01 Jan 2026 0:02:00 GMT", std::nullopt},
      {"Thu, 01 Jan 2026 00:02 GMT", std::nullopt},
      {"2026-01-01T00:02:00Z", std::nullopt},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(std::string("'") + c.value + "'");
    auto d = parse_retry_after(c.value, kNow);
    if (!c.seconds) {
      EXPECT_FALSE(d.has_value()) << d->count();
    } else {
      ASSERT_TRUE(d.has_value());
      EXPECT_EQ(*d, seconds(*c.seconds));
    }
  }
}

TEST(RetryAfter, HttpDateIsExactToTheSecond) {
  struct DateCase {
    const char* value;
    int64_t unix_s;
  };
  const DateCase kCases[] = {
      {"Sun, 06 Nov 1994 08:49:37 GMT", 784'111'777},
      {"Sunday, 06-Nov-94 08:49:37 GMT", 784'111'777},
      {"Sun Nov  6 08:49:37 1994", 784'111'777},
      {"Thu, 01 Jan 1970 00:00:00 GMT", 0},
      {"Wed, 31 Dec 1969 23:59:59 GMT", -1},
      {"Tue, 29 Feb 2000 12:00:00 GMT", 951'825'600},
      {"Tue, 29 Feb 2028 00:00:00 GMT", days_from_civil(2028, 2, 29) * 86400},
      {"Sat, 01 Mar 2100 00:00:00 GMT", days_from_civil(2100, 3, 1) * 86400},
      {"Fri, 13 Feb 2009 23:31:30 GMT", 1'234'567'890},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.value);
    auto t = parse_http_date(c.value, kNow);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->ns(), c.unix_s * 1'000'000'000);
  }
  EXPECT_FALSE(parse_http_date("Mon, 29 Feb 2100 00:00:00 GMT", kNow).has_value());
  // WallTime holds int64 nanoseconds: years past 2262 are not representable as a WallTime
  // (parse_retry_after still caps them).
  EXPECT_FALSE(parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT", kNow).has_value());
}

TEST(RetryAfter, Rfc850TwoDigitYearFollowsThe50YearRule) {
  // RFC 9110 5.6.7: more than 50 years in the future → the most recent past such year.
  struct YearCase {
    const char* yy;
    int64_t year;
  };
  const YearCase kCases[] = {{"26", 2026}, {"00", 2000}, {"76", 2076},
                             {"77", 1977}, {"94", 1994}, {"99", 1999}};
  for (const auto& c : kCases) {
    std::string v = std::string("Friday, 01-Jan-") + c.yy + " 00:00:00 GMT";
    SCOPED_TRACE(v);
    auto t = parse_http_date(v, kNow);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->ns(), days_from_civil(c.year, 1, 1) * 86400 * 1'000'000'000);
  }
  // The window moves with `now`: in 2090, "05" is 2105, not 2005.
  WallTime later = WallTime::from_ns(days_from_civil(2090, 6, 1) * 86400 * 1'000'000'000);
  auto t = parse_http_date("Monday, 01-Jan-05 00:00:00 GMT", later);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->ns(), days_from_civil(2105, 1, 1) * 86400 * 1'000'000'000);
}

TEST(RetryAfter, SubSecondNow) {
  WallTime now = kNow + milliseconds(500);
  auto d = parse_retry_after("Thu, 01 Jan 2026 00:00:10 GMT", now);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, milliseconds(9500));
  d = parse_retry_after("Thu, 01 Jan 2026 00:00:00 GMT", now);  // half a second ago
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, Duration(0));
}

TEST(RetryAfter, ApplyPostponesButNeverHastens) {
  const WallTime scheduled = kNow + minutes(5);
  // SPEC R7.3: "Retry-After: 0" (or any earlier time) does not bring the attempt forward.
  EXPECT_EQ(apply_retry_after(scheduled, parse_retry_after("0", kNow), kNow), scheduled);
  EXPECT_EQ(apply_retry_after(scheduled, seconds(2), kNow), scheduled);
  EXPECT_EQ(apply_retry_after(scheduled, minutes(5), kNow), scheduled);
  EXPECT_EQ(apply_retry_after(scheduled, std::nullopt, kNow), scheduled);
  EXPECT_EQ(apply_retry_after(scheduled, seconds(-30), kNow), scheduled);
  // It postpones.
  EXPECT_EQ(apply_retry_after(scheduled, minutes(20), kNow), kNow + minutes(20));
  // Capped at 1 h even when the caller passes an uncapped value (R7.2).
  EXPECT_EQ(apply_retry_after(scheduled, hours(5), kNow), kNow + hours(1));
  EXPECT_EQ(apply_retry_after(scheduled, parse_retry_after("100000", kNow), kNow), kNow + hours(1));
  // A schedule already beyond the cap stays.
  EXPECT_EQ(apply_retry_after(kNow + hours(10), hours(1), kNow), kNow + hours(10));
  // A schedule already due is max(schedule, now + ra): `now` for a zero Retry-After.
  EXPECT_EQ(apply_retry_after(kNow - seconds(1), Duration(0), kNow), kNow);
  EXPECT_EQ(apply_retry_after(kNow - seconds(1), std::nullopt, kNow), kNow - seconds(1));
  // The smengo "+5 s" step with a 30 s Retry-After waits 30 s.
  EXPECT_EQ(apply_retry_after(kNow + seconds(5), parse_retry_after("30", kNow), kNow),
            kNow + seconds(30));
}

}  // namespace
}  // namespace ringcast
