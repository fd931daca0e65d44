// Retry-After (SPEC R7): parses both RFC 9110 forms into a delay relative to `now`, and the
// scheduler's "postpone but never hasten" rule. Invariant: a parsed delay is in
// [0, kRetryAfterCap].
#pragma once

#include <optional>
#include <string_view>

#include "core/time.h"

namespace ringcast {

inline constexpr Duration kRetryAfterCap = hours(1);  // SPEC R7.2

// delay-seconds ("120") or HTTP-date in any of the three RFC 9110 §5.6.7 forms:
//   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"
//   RFC 850      "Sunday, 06-Nov-94 08:49:37 GMT"  (two-digit year: RFC 9110 50-year rule)
//   asctime      "Sun Nov  6 08:49:37 1994"
// Surrounding spaces/tabs are ignored. Garbage, a sign ("-5", "+5"), a fraction, an empty
// value, an out-of-range field, or delay-seconds that overflow int64 → nullopt (the header is
// ignored). Large delays and far-future dates → kRetryAfterCap. A past date → 0.
std::optional<Duration> parse_retry_after(std::string_view value, WallTime now);

// Parses only the HTTP-date forms (`now` resolves RFC 850 two-digit years). nullopt on
// garbage, an impossible date (Feb 30, 24:00:00), or a date WallTime cannot hold.
// Day and month names match case-insensitively; the weekday is not cross-checked.
std::optional<WallTime> parse_http_date(std::string_view value, WallTime now);

// SPEC R7.2/R7.3: the next attempt is max(scheduled, now + capped ra). Retry-After never
// brings an attempt forward ("Retry-After: 0" does not make a hot loop).
WallTime apply_retry_after(WallTime scheduled, std::optional<Duration> ra, WallTime now);

// Proleptic Gregorian days since 1970-01-01 (Howard Hinnant's days_from_civil).
constexpr int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

}  // namespace ringcast
