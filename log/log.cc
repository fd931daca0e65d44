#include "log/log.h"

#include <pthread.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringcast::log {

namespace {

spdlog::level::level_enum spd(Level l) {
  switch (l) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

constexpr const char* kAsyncName = "ringcast-async";

// stderr, one write(2) per line: nothing is buffered here (so there is nothing to flush: a line is
// out once written), and a line is never split between two writes of other threads' lines. It
// counts what the async logger's thread wrote, for flush().
class StderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  uint64_t async_written() const { return async_written_.load(std::memory_order_acquire); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    line_.assign(msg.payload.data(), msg.payload.size());
    line_ += '\n';
    const char* p = line_.data();
    size_t left = line_.size();
    while (left > 0) {
      const ssize_t n = ::write(2, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // stderr closed or full for good: the line is lost, not retried
      p += n;
      left -= static_cast<size_t>(n);
    }
    if (std::string_view(msg.logger_name.data(), msg.logger_name.size()) == kAsyncName)
      async_written_.fetch_add(1, std::memory_order_release);
  }
  void flush_() override {}

 private:
  std::string line_;  // under the sink's mutex
  std::atomic<uint64_t> async_written_{0};
};

// The rate limit (Options::rate_per_second, burst): a token bucket per event kind in a small
// fixed table (kinds are the code's own names: a few dozen), under one spin lock held for a
// lookup and a little arithmetic. A kind that finds the table full shares the last slot.
constexpr size_t kBuckets = 128;
constexpr size_t kKindMax = 47;

struct Bucket {
  char kind[kKindMax + 1] = {};
  size_t len = 0;
  bool used = false;
  double tokens = 0;
  int64_t refilled_ns = 0;
  uint64_t pending = 0;  // dropped since the last line of this kind that went out
  uint64_t total = 0;    // dropped since start (metrics)
};

struct Limiter {
  std::atomic_flag lock = ATOMIC_FLAG_INIT;
  double rate = 20;
  double burst = 100;
  Bucket buckets[kBuckets];

  void acquire() {
    while (lock.test_and_set(std::memory_order_acquire)) {
      while (lock.test(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void release() { lock.clear(std::memory_order_release); }

  Bucket& find(std::string_view kind) {
    if (kind.size() > kKindMax) kind = kind.substr(0, kKindMax);
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (char c : kind) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    for (size_t i = 0; i + 1 < kBuckets; ++i) {
      Bucket& b = buckets[(h + i) % (kBuckets - 1)];
      if (!b.used) {
        b.used = true;
        std::memcpy(b.kind, kind.data(), kind.size());
        b.kind[kind.size()] = '\0';
        b.len = kind.size();
        b.tokens = burst;
        return b;
      }
      if (std::string_view(b.kind, b.len) == kind) return b;
    }
    Bucket& other = buckets[kBuckets - 1];
    if (!other.used) {
      other.used = true;
      std::memcpy(other.kind, "other", 6);
      other.len = 5;
      other.tokens = burst;
    }
    return other;
  }
};

struct State {
  std::atomic<int> min{static_cast<int>(Level::kInfo)};
  std::atomic<int> format{static_cast<int>(Format::kText)};
  std::atomic<bool> limited{true};
  Limiter limiter;
  std::shared_ptr<StderrSink> sink = std::make_shared<StderrSink>();
  std::shared_ptr<spdlog::logger> sync;
  std::mutex setup_mu;  // configure(), shutdown(), and what the next lines guard
  std::shared_ptr<spdlog::details::thread_pool> pool;
  std::shared_ptr<spdlog::async_logger> async;
  size_t pool_lines = 0;
  // A queue of another size (tests) is a new pool; the old one, drained, is kept (its thread
  // idles): a thread that read the old logger's address may still be posting to it.
  std::vector<std::shared_ptr<spdlog::details::thread_pool>> retired_pools;
  std::vector<std::shared_ptr<spdlog::async_logger>> retired_loggers;
  uint64_t retired_overruns = 0;
  std::atomic<spdlog::async_logger*> async_now{nullptr};
  std::atomic<bool> use_async{false};
  std::atomic<uint64_t> posted{0};  // lines handed to the async logger
  bool atexit_registered = false;
  Options options;

  State() {
    sync = std::make_shared<spdlog::logger>("ringcast", sink);
    sync->set_level(spdlog::level::trace);  // the level is ours (min)
  }
};

// Made on first use, never destroyed, and so is the async logger's thread: a line logged while
// the process exits (static destructors included) still goes out — shutdown() runs at exit and
// leaves every later line to the thread that logs it.
State& state() {
  static State* const s = new State();
  return *s;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The text format keeps one line per event: control characters of a message (a peer's error
// text, say) are written escaped.
void append_text(std::string& out, std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
}

void append_time(std::string& out, int64_t time_us) {
  int64_t secs = time_us / 1'000'000;
  int64_t us = time_us % 1'000'000;
  if (us < 0) {
    us += 1'000'000;
    --secs;
  }
  const time_t t = static_cast<time_t>(secs);
  struct tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[96];  // room for any int the compiler cannot rule out
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(us));
  out += buf;
}

void append_field_value(std::string& out, const Field& f) {
  switch (f.type()) {
    case Field::Type::kString:
      out += '"';
      append_json_string(out, f.str());
      out += '"';
      return;
    case Field::Type::kInt:
      fmt::format_to(std::back_inserter(out), "{}", f.i64());
      return;
    case Field::Type::kUint:
      fmt::format_to(std::back_inserter(out), "{}", f.u64());
      return;
    case Field::Type::kUintText:
      fmt::format_to(std::back_inserter(out), "\"{}\"", f.u64());
      return;
    case Field::Type::kBool:
      out += f.boolean() ? "true" : "false";
      return;
    case Field::Type::kDouble:
      if (std::isfinite(f.dbl())) {
        fmt::format_to(std::back_inserter(out), "{}", f.dbl());
      } else {
        out += "null";  // JSON has no NaN or infinity
      }
      return;
  }
}

bool reserved_key(std::string_view k) {
  return k == "time" || k == "level" || k == "event" || k == "message" || k == "suppressed";
}

// Waits until the async thread wrote (or the full queue dropped) every line posted before.
void drain(State& s) {
  if (!s.pool) return;
  const uint64_t want = s.posted.load(std::memory_order_acquire);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (s.sink->async_written() + s.retired_overruns + s.pool->overrun_counter() < want &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void shutdown_at_exit() {
  shutdown();
}

}  // namespace

bool parse_level(std::string_view text, Level& out) {
  if (text == "debug") return out = Level::kDebug, true;
  if (text == "info") return out = Level::kInfo, true;
  if (text == "warn") return out = Level::kWarn, true;
  if (text == "error") return out = Level::kError, true;
  return false;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

bool parse_format(std::string_view text, Format& out) {
  if (text == "text") return out = Format::kText, true;
  if (text == "json") return out = Format::kJson, true;
  return false;
}

const char* format_name(Format format) {
  return format == Format::kJson ? "json" : "text";
}

void configure(const Options& options) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.setup_mu);
  s.options = options;
  s.min.store(static_cast<int>(options.level), std::memory_order_relaxed);
  s.format.store(static_cast<int>(options.format), std::memory_order_relaxed);
  s.limiter.acquire();
  s.limiter.rate = options.rate_per_second > 0 ? options.rate_per_second : 0;
  s.limiter.burst = std::max<double>(1, options.burst);
  s.limiter.release();
  s.limited.store(options.rate_per_second > 0, std::memory_order_relaxed);
  if (options.async) {
    const size_t lines = std::max<size_t>(options.queue_lines, 16);
    if (s.pool_lines != lines) {  // made once in the daemon: the thread is never stopped
      if (s.pool) {
        s.use_async.store(false, std::memory_order_release);
        drain(s);
        s.retired_overruns += s.pool->overrun_counter();
        s.retired_pools.push_back(std::move(s.pool));
        s.retired_loggers.push_back(std::move(s.async));
      }
      s.pool = std::make_shared<spdlog::details::thread_pool>(
          lines, 1, [] { ::pthread_setname_np(::pthread_self(), "rc-log"); });
      s.async = std::make_shared<spdlog::async_logger>(
          kAsyncName, s.sink, s.pool, spdlog::async_overflow_policy::overrun_oldest);
      s.async->set_level(spdlog::level::trace);
      s.pool_lines = lines;
      s.async_now.store(s.async.get(), std::memory_order_release);
    }
    if (!s.atexit_registered) {
      s.atexit_registered = true;
      std::atexit(shutdown_at_exit);
    }
    s.use_async.store(true, std::memory_order_release);
  } else if (s.use_async.load(std::memory_order_acquire)) {
    drain(s);
    s.use_async.store(false, std::memory_order_release);
    drain(s);
  }
}

Options options() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.setup_mu);
  return s.options;
}

Format format() {
  return static_cast<Format>(state().format.load(std::memory_order_relaxed));
}

void set_level(Level min) {
  State& s = state();
  s.min.store(static_cast<int>(min), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s.setup_mu);
  s.options.level = min;
}

bool enabled(Level level) {
  return static_cast<int>(level) >= state().min.load(std::memory_order_relaxed);
}

void flush() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.setup_mu);
  drain(s);
}

void shutdown() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.setup_mu);
  if (!s.use_async.load(std::memory_order_acquire)) return;
  drain(s);  // in order: what was queued, then the lines logged meanwhile, then the later ones
  s.use_async.store(false, std::memory_order_release);
  drain(s);
}

Admission admit(std::string_view event) {
  State& s = state();
  if (!s.limited.load(std::memory_order_relaxed)) return {};
  const int64_t now = steady_ns();
  Admission a;
  Limiter& l = s.limiter;
  l.acquire();
  if (l.rate > 0) {
    Bucket& b = l.find(event);
    if (b.refilled_ns != 0 && now > b.refilled_ns) {
      b.tokens =
          std::min(l.burst, b.tokens + l.rate * static_cast<double>(now - b.refilled_ns) / 1e9);
    }
    b.refilled_ns = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      a.suppressed = b.pending;
      b.pending = 0;
    } else {
      a.pass = false;
      ++b.pending;
      ++b.total;
    }
  }
  l.release();
  return a;
}

void append_json_string(std::string& out, std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most
    // U+10FFFF) is copied; any other byte becomes U+FFFD.
    size_t len = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned char cc = p[i + k];
      const unsigned char min = k == 1 ? lo : 0x80;
      const unsigned char max = k == 1 ? hi : 0xBF;
      ok = cc >= min && cc <= max;
    }
    if (ok) {
      out.append(reinterpret_cast<const char*>(p + i), len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
}

std::string render(Format format, Level level, std::string_view event, Fields fields,
                   std::string_view message, uint64_t suppressed, int64_t time_us) {
  while (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  std::string out;
  out.reserve(64 + message.size() + fields.size() * 24);
  if (format == Format::kText) {
    out += "ringcast: ";
    append_text(out, message);
    if (suppressed > 0) {
      fmt::format_to(std::back_inserter(out), " ({} earlier {} line(s) suppressed)", suppressed,
                     event);
    }
    return out;
  }
  out += "{\"time\":\"";
  append_time(out, time_us);
  out += "\",\"level\":\"";
  out += level_name(level);
  out += "\",\"event\":\"";
  append_json_string(out, event);
  out += "\",\"message\":\"";
  append_json_string(out, message);
  out += '"';
  for (const Field& f : fields) {
    if (f.key().empty() || reserved_key(f.key())) continue;  // the line's own keys stay its own
    out += ",\"";
    append_json_string(out, f.key());
    out += "\":";
    append_field_value(out, f);
  }
  if (suppressed > 0) fmt::format_to(std::back_inserter(out), ",\"suppressed\":{}", suppressed);
  out += '}';
  return out;
}

void emit(Level level, std::string_view event, Fields fields, std::string_view message,
          uint64_t suppressed) {
  State& s = state();
  const std::string line = render(static_cast<Format>(s.format.load(std::memory_order_relaxed)),
                                  level, event, fields, message, suppressed, wall_us());
  const spdlog::string_view_t text(line.data(), line.size());
  if (s.use_async.load(std::memory_order_acquire)) {
    s.posted.fetch_add(1, std::memory_order_acq_rel);
    // Never blocks: a full queue drops its oldest line.
    s.async_now.load(std::memory_order_acquire)->log(spd(level), text);
  } else {
    s.sync->log(spd(level), text);
  }
}

void write(Level level, std::string_view event, Fields fields, std::string_view message) {
  if (!enabled(level)) return;
  const Admission a = admit(event);
  if (a.pass) emit(level, event, fields, message, a.suppressed);
}

std::vector<SuppressedCount> suppressed_counts() {
  State& s = state();
  std::vector<SuppressedCount> out;
  s.limiter.acquire();
  for (const Bucket& b : s.limiter.buckets) {
    if (b.used && b.total > 0) out.push_back({std::string(b.kind, b.len), b.total});
  }
  s.limiter.release();
  return out;
}

uint64_t lines_dropped() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.setup_mu);
  return s.retired_overruns + (s.pool ? s.pool->overrun_counter() : 0);
}

void reset_rate_limits() {
  State& s = state();
  s.limiter.acquire();
  for (Bucket& b : s.limiter.buckets) b = Bucket{};
  s.limiter.release();
}

}  // namespace ringcast::log
