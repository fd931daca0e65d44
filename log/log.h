// The daemon's one logger: every module that tells the operator something (a store going
// degraded, a source down, a shard stopping) writes through it, never to stderr by hand. One
// line per event on stderr, written whole even when threads log at once. The one process-wide
// object the house allows besides the metrics registry (STYLE 9): a log is the process's, not a
// shard's. Backed by spdlog (Debian libspdlog-dev), kept out of this header: modules format with
// fmt (docs/operations.md §5 "Logs").
//
// Each line names its event kind (a short, stable snake_case name: `store_degraded`,
// `intake_source_down`) and carries typed fields (tenant, endpoint, delivery, error code…) besides
// the human message:
//
//   log::warn("shard_store_held", {{"shard", shard}, {"error", why.message}},
//             "shard {}: the store refused a batch ({})", shard, why.message);
//
// Format kText writes "ringcast: <message>" (the lines the docs quote and the tests look for);
// kJson writes one JSON object per line: time, level, event, message, then the fields. Nothing is
// formatted or allocated while the level is off. Each event kind has a token bucket
// (Options::rate_per_second, burst): lines over it are dropped and counted, and the next line of
// that kind that goes out says how many were (JSON "suppressed": N).
//
// SPEC R14: never a secret in a line — no token, key, signing secret, password or endpoint header
// value, in a field or in the message (docs/operations.md §5 "Logs": what is never logged).
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ringcast::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class Format : int { kText = 0, kJson = 1 };

// "debug", "info", "warn", "error" (and back); false for anything else.
bool parse_level(std::string_view text, Level& out);
const char* level_name(Level level);
// "text", "json" (and back); false for anything else.
bool parse_format(std::string_view text, Format& out);
const char* format_name(Format format);

struct Options {
  Level level = Level::kInfo;
  Format format = Format::kText;
  // Per event kind: lines per second and the burst above it (a token bucket); 0: no limit.
  double rate_per_second = 20;
  uint32_t burst = 100;
  // The daemon's: lines go through spdlog's async logger — a bounded queue and one writer
  // thread; a full queue drops its oldest line (counted, lines_dropped()) and never blocks the
  // thread that logs. false: each line is written by the thread that logs it.
  bool async = false;
  size_t queue_lines = 8192;
};

// Process-wide; the daemon calls it once at start (tools/ringcast/serve.cc), tests as they need.
// Turning async on also registers shutdown() to run at exit.
void configure(const Options& options);
Options options();
Format format();

// Lines below `min` are dropped (default: kInfo).
void set_level(Level min);
bool enabled(Level level);

// Waits (at most ~2 s) until every line logged so far is written.
void flush();
// flush(), then every later line is written by the thread that logs it, so a line logged while
// the process exits still goes out (the daemon's stop path; also run at exit).
void shutdown();

// One structured field. Strings are referenced, not copied: a Field lives for the full
// expression of the log call only.
class Field {
 public:
  enum class Type : uint8_t { kString, kInt, kUint, kUintText, kBool, kDouble };

  constexpr Field(std::string_view key, std::string_view v)
      : key_(key), type_(Type::kString), s_(v) {}
  Field(std::string_view key, const std::string& v) : Field(key, std::string_view(v)) {}
  // Without it a string literal would pick the bool overload (a pointer converts to bool).
  constexpr Field(std::string_view key, const char* v)
      : key_(key), type_(Type::kString), s_(v ? std::string_view(v) : std::string_view()) {}
  constexpr Field(std::string_view key, bool v) : key_(key), type_(Type::kBool), b_(v) {}
  template <class T>
  requires(std::integral<T> && !std::same_as<T, bool> &&
           !std::same_as<T, char>) constexpr Field(std::string_view key, T v)
      : key_(key) {
    if constexpr (std::is_signed_v<T>) {
      type_ = Type::kInt;
      i_ = static_cast<int64_t>(v);
    } else {
      type_ = Type::kUint;
      u_ = static_cast<uint64_t>(v);
    }
  }
  constexpr Field(std::string_view key, double v) : key_(key), type_(Type::kDouble), d_(v) {}

  // A 64-bit id (delivery, endpoint, event sequence) written as a decimal JSON string, as the
  // API writes ids: readers with 53-bit numbers keep it exact.
  static constexpr Field id(std::string_view key, uint64_t v) {
    Field f(key, v);
    f.type_ = Type::kUintText;
    return f;
  }

  std::string_view key() const { return key_; }
  Type type() const { return type_; }
  std::string_view str() const { return s_; }
  int64_t i64() const { return i_; }
  uint64_t u64() const { return u_; }
  bool boolean() const { return b_; }
  double dbl() const { return d_; }

 private:
  std::string_view key_;
  Type type_ = Type::kString;
  std::string_view s_{};
  int64_t i_ = 0;
  uint64_t u_ = 0;
  bool b_ = false;
  double d_ = 0;
};
using Fields = std::initializer_list<Field>;

// The rate limit's verdict for one line of `event` (see Options): whether it goes out, and how
// many lines of that kind were dropped since the last one that did.
struct Admission {
  bool pass = true;
  uint64_t suppressed = 0;
};
Admission admit(std::string_view event);
// One admitted line (the message without its trailing newline).
void emit(Level level, std::string_view event, Fields fields, std::string_view message,
          uint64_t suppressed);
// admit() + emit(): one line, rate-limited.
void write(Level level, std::string_view event, Fields fields, std::string_view message);

// One line at `level`, formatted only when the level is on and the rate limit lets it through.
template <class... Args>
void at(Level level, std::string_view event, Fields fields, fmt::format_string<Args...> f,
        Args&&... args) {
  if (!enabled(level)) return;
  const Admission a = admit(event);
  if (!a.pass) return;
  fmt::memory_buffer buf;  // inline storage: a short message allocates nothing
  fmt::format_to(std::back_inserter(buf), f, std::forward<Args>(args)...);
  emit(level, event, fields, std::string_view(buf.data(), buf.size()), a.suppressed);
}
template <class... Args>
void debug(std::string_view event, Fields fields, fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kDebug, event, fields, f, std::forward<Args>(args)...);
}
template <class... Args>
void info(std::string_view event, Fields fields, fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kInfo, event, fields, f, std::forward<Args>(args)...);
}
template <class... Args>
void warn(std::string_view event, Fields fields, fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kWarn, event, fields, f, std::forward<Args>(args)...);
}
template <class... Args>
void error(std::string_view event, Fields fields, fmt::format_string<Args...> f, Args&&... args) {
  at(Level::kError, event, fields, f, std::forward<Args>(args)...);
}

// --- counters, for the metrics scrape (engine/metrics.cc) without log/ depending on it ------

struct SuppressedCount {
  std::string event;
  uint64_t lines = 0;
};
// Every event kind that had a line dropped by the rate limit since start, with how many.
std::vector<SuppressedCount> suppressed_counts();
// Lines the async queue dropped because it was full (the oldest first).
uint64_t lines_dropped();

// --- pieces, exposed for the tests -------------------------------------------------------------

// `s` as the inside of a JSON string: quote, backslash and control characters escaped, invalid
// UTF-8 bytes replaced by U+FFFD.
void append_json_string(std::string& out, std::string_view s);
// The whole line (without its newline) as `format` writes it, with `time_us` as the time (Unix
// microseconds).
std::string render(Format format, Level level, std::string_view event, Fields fields,
                   std::string_view message, uint64_t suppressed, int64_t time_us);
// Clears every rate-limit bucket and counter (tests).
void reset_rate_limits();

}  // namespace ringcast::log
