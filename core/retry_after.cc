#include "core/retry_after.h"

#include <algorithm>
#include <cstdint>

namespace ringcast {
namespace {

constexpr int64_t kCapSeconds = std::chrono::duration_cast<seconds>(kRetryAfterCap).count();

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// A tiny cursor over the value; every reader returns false on mismatch.
struct Cursor {
  std::string_view s;
  size_t i = 0;

  bool lit(std::string_view t) {
    if (!iequals(s.substr(i, t.size()), t)) return false;
    i += t.size();
    return true;
  }
  bool digits(int n, int* out) {
    int v = 0;
    for (int k = 0; k < n; ++k) {
      if (i >= s.size() || !is_digit(s[i])) return false;
      v = v * 10 + (s[i++] - '0');
    }
    *out = v;
    return true;
  }
  // One digit preceded by a space, or two digits (asctime's day).
  bool day_sp_or_2(int* out) {
    if (i < s.size() && s[i] == ' ') {
      ++i;
      return digits(1, out);
    }
    return digits(2, out);
  }
  bool name(const char* const* names, int count, int* out) {
    for (int k = 0; k < count; ++k) {
      if (lit(names[k])) {
        *out = k;
        return true;
      }
    }
    return false;
  }
  bool done() const { return i == s.size(); }
};

constexpr const char* kDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr const char* kDaysLong[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                     "Friday", "Saturday", "Sunday"};
constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

bool is_leap(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}
int days_in_month(int64_t y, int m) {
  static constexpr int kDaysIn[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : kDaysIn[m - 1];
}

// Inverse of days_from_civil, for the year of `now` only (RFC 850 two-digit years).
int64_t year_of_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  return yoe + era * 400 + (m <= 2);
}

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

struct Fields {
  int64_t year = 0;
  int month = 0, day = 0, hour = 0, minute = 0, second = 0;
};

bool time_of_day(Cursor& c, Fields* f) {
  return c.digits(2, &f->hour) && c.lit(":") && c.digits(2, &f->minute) && c.lit(":") &&
         c.digits(2, &f->second);
}

// Unix seconds of a valid HTTP-date, or false.
bool parse_date_seconds(std::string_view v, WallTime now, int64_t* out) {
  Fields f;
  int idx = 0;
  bool ok = false;
  {  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    Cursor c{v};
    int y = 0;
    if (c.name(kDays, 7, &idx) && c.lit(", ") && c.digits(2, &f.day) && c.lit(" ") &&
        c.name(kMonths, 12, &f.month) && c.lit(" ") && c.digits(4, &y) && c.lit(" ") &&
        time_of_day(c, &f) && c.lit(" GMT") && c.done()) {
      f.year = y;
      ok = true;
    }
  }
  if (!ok) {  // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
    Cursor c{v};
    int yy = 0;
    if (c.name(kDaysLong, 7, &idx) && c.lit(", ") && c.digits(2, &f.day) && c.lit("-") &&
        c.name(kMonths, 12, &f.month) && c.lit("-") && c.digits(2, &yy) && c.lit(" ") &&
        time_of_day(c, &f) && c.lit(" GMT") && c.done()) {
      // RFC 9110 5.6.7: a year more than 50 years in the future is the most recent past
      // year with those two digits; so the year lies in (now - 50, now + 50].
      const int64_t now_year = year_of_days(floor_div(now.ns(), int64_t{86'400'000'000'000}));
      int64_t y = floor_div(now_year, 100) * 100 + yy;
      if (y > now_year + 50) y -= 100;
      if (y <= now_year - 50) y += 100;
      f.year = y;
      ok = true;
    }
  }
  if (!ok) {  // asctime: "Sun Nov  6 08:49:37 1994"
    Cursor c{v};
    int y = 0;
    if (c.name(kDays, 7, &idx) && c.lit(" ") && c.name(kMonths, 12, &f.month) && c.lit(" ") &&
        c.day_sp_or_2(&f.day) && c.lit(" ") && time_of_day(c, &f) && c.lit(" ") &&
        c.digits(4, &y) && c.done()) {
      f.year = y;
      ok = true;
    }
  }
  if (!ok) return false;
  f.month += 1;  // names index from 0
  // Range checks; the weekday name is not cross-checked (many senders get it wrong).
  if (f.day < 1 || f.day > days_in_month(f.year, f.month)) return false;
  if (f.hour > 23 || f.minute > 59 || f.second > 60) return false;  // 60: leap second
  *out = days_from_civil(f.year, static_cast<unsigned>(f.month), static_cast<unsigned>(f.day)) *
             86400 +
         f.hour * 3600 + f.minute * 60 + f.second;
  return true;
}

}  // namespace

std::optional<WallTime> parse_http_date(std::string_view value, WallTime now) {
  int64_t s = 0;
  if (!parse_date_seconds(trim_ows(value), now, &s)) return std::nullopt;
  // WallTime holds nanoseconds in int64: years 1678..2262.
  constexpr int64_t kMaxS = INT64_MAX / 1'000'000'000 - 1;
  if (s > kMaxS || s < -kMaxS) return std::nullopt;
  return WallTime::from_ns(s * 1'000'000'000);
}

std::optional<Duration> parse_retry_after(std::string_view value, WallTime now) {
  std::string_view v = trim_ows(value);
  if (v.empty()) return std::nullopt;
  if (is_digit(v[0])) {
    // delay-seconds = 1*DIGIT. Anything else after the digits ("5.5", "5s", "-") is garbage.
    int64_t secs = 0;
    for (char c : v) {
      if (!is_digit(c)) return std::nullopt;
      if (secs > (INT64_MAX - 9) / 10) return std::nullopt;  // overflow: ignored
      secs = secs * 10 + (c - '0');
    }
    return secs >= kCapSeconds ? kRetryAfterCap : Duration(seconds(secs));
  }
  int64_t date_s = 0;
  if (!parse_date_seconds(v, now, &date_s)) return std::nullopt;
  // Compare in seconds first: a far-future date would overflow nanoseconds.
  const int64_t now_s = floor_div(now.ns(), 1'000'000'000);
  if (date_s <= now_s - 1) return Duration(0);
  if (date_s - now_s > kCapSeconds + 1) return kRetryAfterCap;
  Duration d = seconds(date_s) - now.since_origin();
  if (d < Duration(0)) return Duration(0);
  return std::min(d, kRetryAfterCap);
}

WallTime apply_retry_after(WallTime scheduled, std::optional<Duration> ra, WallTime now) {
  if (!ra) return scheduled;
  Duration d = std::clamp(*ra, Duration(0), kRetryAfterCap);
  WallTime earliest = now + d;
  return std::max(scheduled, earliest);
}

}  // namespace ringcast
