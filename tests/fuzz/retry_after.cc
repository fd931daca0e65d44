// Fuzz target: core/retry_after (SPEC R7), which reads a receiver's Retry-After header. A
// parsed delay is in [0, cap]; a parsed HTTP-date prints back (IMF-fixdate) to the same
// instant; the delay of a date value is that date minus now, clamped; apply_retry_after never
// brings an attempt forward.
#include <cstdio>
#include <string>

#include "core/retry_after.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ringcast;

// Howard Hinnant's civil_from_days.
void civil(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

std::string imf_fixdate(WallTime t) {
  static constexpr const char* kDays[] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  int64_t s = t.ns() / 1'000'000'000;
  int64_t days = s / 86400 - (s % 86400 < 0);
  int64_t sod = s - days * 86400;
  int64_t y;
  unsigned m, d;
  civil(days, &y, &m, &d);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s, %02u %s %04lld %02lld:%02lld:%02lld GMT",
                kDays[((days % 7) + 7) % 7], d, kMonths[m - 1], static_cast<long long>(y),
                static_cast<long long>(sod / 3600), static_cast<long long>(sod / 60 % 60),
                static_cast<long long>(sod % 60));
  return buf;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringcast::fuzz::Input in(data, size);
  // A wall clock anywhere in 1970..2255 (what a clock can say), at nanosecond resolution.
  const WallTime now =
      WallTime::from_ns(static_cast<int64_t>(in.u64() % 9'000'000'000'000'000'000ull));
  const WallTime scheduled =
      WallTime::from_ns(static_cast<int64_t>(in.u64() % 9'000'000'000'000'000'000ull));
  const std::string_view value = in.rest();

  const std::optional<Duration> ra = parse_retry_after(value, now);
  if (ra) FUZZ_CHECK(*ra >= Duration(0) && *ra <= kRetryAfterCap);

  const std::optional<WallTime> date = parse_http_date(value, now);
  if (date) {
    FUZZ_CHECK(date->ns() % 1'000'000'000 == 0);
    // A date value is a delay too (parse_retry_after reads both forms) ...
    FUZZ_CHECK(ra.has_value());
    // In 128 bits: a date centuries before `now` is more nanoseconds than int64 holds.
    __int128 want = static_cast<__int128>(date->ns()) - now.ns();
    if (want < 0) want = 0;
    if (want > kRetryAfterCap.count()) want = kRetryAfterCap.count();
    FUZZ_CHECK(ra->count() == static_cast<int64_t>(want));
    // ... and prints back to the same instant (four-digit years only).
    const int64_t year_0000 = -62'167'219'200;  // 0000-01-01 in Unix seconds
    const int64_t year_10000 = 253'402'300'800;
    const int64_t s = date->ns() / 1'000'000'000;
    if (s >= year_0000 && s < year_10000) {
      const std::string printed = imf_fixdate(*date);
      const std::optional<WallTime> again = parse_http_date(printed, now);
      FUZZ_CHECK(again && *again == *date);
    }
  }

  // SPEC R7.2/R7.3: never earlier than scheduled, never later than now + cap.
  const WallTime next = apply_retry_after(scheduled, ra, now);
  FUZZ_CHECK(next >= scheduled);
  if (ra) FUZZ_CHECK(next == std::max(scheduled, now + *ra));
  return 0;
}
