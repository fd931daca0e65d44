// log/log.h (docs/operations.md §5 "Logs"): the text format writes one whole line per event,
// "ringcast: <message>" on stderr (the lines the docs quote); the JSON format one object per line
// with time, level, event, message and typed fields, escaped so that any input parses; the level
// drops lines without formatting (or allocating) anything; a kind over its token bucket is
// dropped and counted, and its next line says how many; the async logger never blocks the thread
// that logs, flush() waits for what was logged, and a line logged while the process exits still
// goes out.
#include "log/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

// Counts this thread's allocations while t_counting is set (LogLevel.AnOffLevel...). The
// replacement pair is malloc/free on both sides; GCC 12 cannot see that through the inlining.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local bool t_counting = false;
thread_local size_t t_allocations = 0;
}  // namespace

void* operator new(std::size_t n) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
// Every other form too, so no library's allocation meets a delete of another allocator (a
// shared library's `new (std::nothrow)` freed here through `delete`: ASan's alloc-dealloc check).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (t_counting) ++t_allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace ringcast {
namespace {

constexpr const char* kChildEnv = "RINGCAST_LOG_TEST_CHILD";

// Text, info, no rate limit, synchronous: what a test starts from unless it says otherwise.
log::Options unlimited() {
  log::Options o;
  o.rate_per_second = 0;
  return o;
}

void reset(const log::Options& o = unlimited()) {
  log::configure(o);
  log::reset_rate_limits();
}

// The pieces appended (GCC 12's false -Wrestrict on "literal" + std::string at -O3).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

// What `fn` writes to stderr (fd 2), through a file; flush() first (the async writer's lines).
template <class F>
std::string stderr_of(F fn) {
  test::TempDir dir("log-test");
  const std::string path = dir.file("err.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  FILE* f = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(f), 2);
  fn();
  log::flush();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  return test::read_file(path);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from < text.size()) {
    size_t end = text.find('\n', from);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(from, end - from));
    from = end + 1;
  }
  return out;
}

// The string member `key` of the JSON object `line` ("<absent>" when it is not there or not a
// string; "<invalid JSON>" when the line does not parse).
std::string json_string(const std::string& line, const char* key) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(line).get(doc)) return "<invalid JSON>";
  std::string_view v;
  if (doc[key].get(v)) return "<absent>";
  return std::string(v);
}

TEST(LogLevel, NamesParseBothWays) {
  for (log::Level l :
       {log::Level::kDebug, log::Level::kInfo, log::Level::kWarn, log::Level::kError}) {
    log::Level back = log::Level::kError;
    EXPECT_TRUE(log::parse_level(log::level_name(l), back));
    EXPECT_EQ(back, l);
  }
  log::Level l;
  EXPECT_FALSE(log::parse_level("warning", l));
  EXPECT_FALSE(log::parse_level("INFO", l));
  log::Format f;
  EXPECT_TRUE(log::parse_format("json", f));
  EXPECT_EQ(f, log::Format::kJson);
  EXPECT_TRUE(log::parse_format("text", f));
  EXPECT_EQ(f, log::Format::kText);
  EXPECT_FALSE(log::parse_format("logfmt", f));
}

TEST(LogText, OneLinePerEventWithThePrefixAndTheLevelDecides) {
  reset();
  const std::string out = stderr_of([] {
    log::info("answers", {{"shard", 3}}, "shard {}: {} answer(s)", 3, 7);
    log::debug("hidden", {}, "not shown {}", 1);
    log::warn("newline", {}, "with a newline already\n");
    log::set_level(log::Level::kError);
    log::warn("dropped", {}, "dropped");
    log::error("kept", {{"seconds", 1.0}}, "kept {:.1f} s", 1.0);
    log::set_level(log::Level::kInfo);
  });
  EXPECT_EQ(out,
            "ringcast: shard 3: 7 answer(s)\n"
            "ringcast: with a newline already\n"
            "ringcast: kept 1.0 s\n");
}

TEST(LogText, ControlCharactersStayOnOneLine) {
  reset();
  const std::string out = stderr_of(
      [] { log::warn("peer_error", {}, "peer said: {}", std::string("a\nringcast: forged\x01")); });
  EXPECT_EQ(out, "ringcast: peer said: a\\nringcast: forged\\x01\n");
}

TEST(LogText, LinesFromManyThreadsStayWhole) {
  reset();
  const std::string out = stderr_of([] {
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([t] {
        for (int i = 0; i < 200; ++i) {
          log::info("thread_line", {{"thread", t}}, "thread {} line {} {}", t, i,
                    std::string(40, 'x'));
        }
      });
    }
    for (auto& t : ts) t.join();
  });
  const std::vector<std::string> lines = lines_of(out);
  ASSERT_EQ(lines.size(), 800u);
  for (const std::string& line : lines) {
    EXPECT_EQ(line.rfind("ringcast: thread ", 0), 0u) << line;
    EXPECT_EQ(line.substr(line.size() - 41), cat({" ", std::string(40, 'x')})) << line;
  }
}

TEST(LogJson, TimeLevelEventMessageThenTheTypedFields) {
  // 2026-12-06T03:04:05.123456Z
  const int64_t t = 1796526245LL * 1'000'000 + 123456;
  const std::string line = log::render(log::Format::kJson, log::Level::kWarn, "store_degraded",
                                       {{"partition", 3u},
                                        {"offset", -2},
                                        {"tenant", std::string("acme")},
                                        {"name", "lit"},
                                        {"ok", true},
                                        {"ratio", 0.5},
                                        {"nan", std::nan("")},
                                        log::Field::id("delivery", 18446744073709551615ull),
                                        {"message", "ignored: the line's own key"}},
                                       "store degraded: {timeout}", 0, t);
  EXPECT_EQ(line,
            "{\"time\":\"2026-12-06T03:04:05.123456Z\",\"level\":\"warn\",\"event\":\"store_"
            "degraded\",\"message\":\"store degraded: {timeout}\",\"partition\":3,\"offset\":-2,"
            "\"tenant\":\"acme\",\"name\":\"lit\",\"ok\":true,\"ratio\":0.5,\"nan\":null,"
            "\"delivery\":\"18446744073709551615\"}");
  EXPECT_EQ(log::render(log::Format::kJson, log::Level::kInfo, "k", {}, "m", 7, 0),
            "{\"time\":\"1970-01-01T00:00:00.000000Z\",\"level\":\"info\",\"event\":\"k\","
            "\"message\":\"m\",\"suppressed\":7}");
  EXPECT_EQ(log::render(log::Format::kText, log::Level::kInfo, "k", {{"a", 1}}, "m", 0, t),
            "ringcast: m");
}

TEST(LogJson, EscapesSoThatAnyInputParses) {
  struct Case {
    std::string in;
    std::string decoded;  // what a JSON reader gets back
  };
  const std::vector<Case> cases = {
      {"quote \" backslash \\ slash /", "quote \" backslash \\ slash /"},
      {std::string("nl\n cr\r tab\t bs\b ff\f nul") + '\0' + "\x1f\x7f",
       std::string("nl\n cr\r tab\t bs\b ff\f nul") + '\0' + "\x1f\x7f"},
      {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
      {"bad \xFF end", "bad \xEF\xBF\xBD end"},                    // not UTF-8 at all
      {"cut \xE2\x82", "cut \xEF\xBF\xBD\xEF\xBF\xBD"},            // a sequence cut short
      {"overlong \xC0\xAF", "overlong \xEF\xBF\xBD\xEF\xBF\xBD"},  // '/' in two bytes
      {"surrogate \xED\xA0\x80", "surrogate \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"too big \xF4\x90\x80\x80",
       "too big \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // above U+10FFFF
  };
  for (const Case& c : cases) {
    const std::string line =
        log::render(log::Format::kJson, log::Level::kError, "k", {{"field", c.in}}, c.in, 0, 0);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_EQ(json_string(line, "message"), c.decoded) << line;
    EXPECT_EQ(json_string(line, "field"), c.decoded) << line;
  }
  std::string raw;
  log::append_json_string(raw, std::string("\x01\"", 2));
  EXPECT_EQ(raw, "\\u0001\\\"");
}

TEST(LogJson, EveryLineOnStderrIsAnObject) {
  reset({.format = log::Format::kJson, .rate_per_second = 0});
  const std::string out = stderr_of([] {
    log::info("listening", {{"port", 8080}}, "listening on {}", "127.0.0.1:8080");
    log::error("peer_error", {{"error", "x\"y"}}, "peer: {}", "line\nbreak");
  });
  reset();
  const std::vector<std::string> lines = lines_of(out);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(json_string(lines[0], "event"), "listening");
  EXPECT_EQ(json_string(lines[0], "level"), "info");
  EXPECT_EQ(json_string(lines[0], "message"), "listening on 127.0.0.1:8080");
  EXPECT_EQ(json_string(lines[1], "level"), "error");
  EXPECT_EQ(json_string(lines[1], "message"), "peer: line\nbreak");
  EXPECT_EQ(json_string(lines[1], "error"), "x\"y");
  const std::string time = json_string(lines[0], "time");
  ASSERT_EQ(time.size(), 27u) << time;  // 2026-12-06T03:04:05.123456Z
  EXPECT_EQ(time[10], 'T');
  EXPECT_EQ(time.back(), 'Z');
}

}  // namespace

// A type whose formatting is counted: the level decides before anything is formatted.
struct Counted {
  static inline int formatted = 0;
};

}  // namespace ringcast

template <>
struct fmt::formatter<ringcast::Counted> : fmt::formatter<std::string_view> {
  auto format(const ringcast::Counted&, fmt::format_context& ctx) const {
    ++ringcast::Counted::formatted;
    return fmt::formatter<std::string_view>::format("counted", ctx);
  }
};

namespace ringcast {
namespace {

TEST(LogLevel, AnOffLevelFormatsAndAllocatesNothing) {
  reset({.level = log::Level::kWarn, .rate_per_second = 20, .burst = 100});
  const std::string tenant = "acme-tenant-with-a-long-name-beyond-small-string";
  Counted c;
  Counted::formatted = 0;
  t_allocations = 0;
  t_counting = true;
  for (int i = 0; i < 100; ++i) {
    log::debug("off_kind", {{"tenant", tenant}, {"i", i}, log::Field::id("delivery", 42u)},
               "tenant {}: {} {}", tenant, i, c);
    log::info("off_kind", {{"tenant", tenant}}, "tenant {}: {}", tenant, c);
  }
  t_counting = false;
  EXPECT_EQ(t_allocations, 0u);
  EXPECT_EQ(Counted::formatted, 0);
  EXPECT_TRUE(log::suppressed_counts().empty());  // an off level spends no tokens either
  const std::string out = stderr_of([&] { log::warn("on_kind", {}, "{}", c); });
  EXPECT_EQ(out, "ringcast: counted\n");
  EXPECT_EQ(Counted::formatted, 1);
  reset();
}

uint64_t suppressed_of(const std::string& kind) {
  for (const log::SuppressedCount& s : log::suppressed_counts()) {
    if (s.event == kind) return s.lines;
  }
  return 0;
}

TEST(LogRate, AKindOverItsBurstIsDroppedAndCountedOthersGoOn) {
  // 0.001 lines per second: no token comes back while the test runs.
  reset({.rate_per_second = 0.001, .burst = 3});
  const std::string out = stderr_of([] {
    for (int i = 0; i < 10; ++i) log::warn("noisy_kind", {}, "noisy {}", i);
    log::warn("quiet_kind", {}, "quiet");
    log::debug("noisy_kind", {}, "below the level: neither sent nor counted");
  });
  EXPECT_EQ(out, "ringcast: noisy 0\nringcast: noisy 1\nringcast: noisy 2\nringcast: quiet\n");
  EXPECT_EQ(suppressed_of("noisy_kind"), 7u);
  EXPECT_EQ(suppressed_of("quiet_kind"), 0u);
  ASSERT_EQ(log::suppressed_counts().size(), 1u);
  reset();
}

TEST(LogRate, TheLineThatResumesSaysHowManyWereSuppressed) {
  // 2 lines per second, a burst of 2: the quick lines after the first two are dropped; 700 ms
  // later a token is back (and the next needs 300 ms more).
  for (log::Format format : {log::Format::kJson, log::Format::kText}) {
    reset({.format = format, .rate_per_second = 2, .burst = 2});
    const std::string out = stderr_of([] {
      for (int i = 0; i < 6; ++i) log::info("bursty", {{"i", i}}, "line {}", i);
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      log::info("bursty", {{"i", 6}}, "line {}", 6);
      log::info("bursty", {{"i", 7}}, "line {}", 7);  // the bucket is empty again
    });
    const std::vector<std::string> lines = lines_of(out);
    ASSERT_EQ(lines.size(), 3u) << out;
    if (format == log::Format::kJson) {
      EXPECT_EQ(json_string(lines[0], "message"), "line 0");
      EXPECT_EQ(lines[0].find("suppressed"), std::string::npos) << lines[0];
      EXPECT_EQ(json_string(lines[2], "message"), "line 6");
      EXPECT_NE(lines[2].find(",\"suppressed\":4}"), std::string::npos) << lines[2];
    } else {
      EXPECT_EQ(lines[1], "ringcast: line 1");
      EXPECT_EQ(lines[2], "ringcast: line 6 (4 earlier bursty line(s) suppressed)");
    }
    EXPECT_EQ(suppressed_of("bursty"), 5u);  // 4 before line 6, then line 7
  }
  reset();
}

TEST(LogRate, ZeroMeansNoLimit) {
  log::Options o;
  o.rate_per_second = 0;
  o.burst = 1;
  log::configure(o);
  log::reset_rate_limits();
  const std::string out = stderr_of([] {
    for (int i = 0; i < 500; ++i) log::info("unlimited", {}, "line {}", i);
  });
  EXPECT_EQ(lines_of(out).size(), 500u);
  EXPECT_EQ(suppressed_of("unlimited"), 0u);
}

TEST(LogAsync, LinesGoOutWholeAndInOrderAndFlushWaitsForThem) {
  reset({.rate_per_second = 0, .async = true});
  const std::string out = stderr_of([] {
    for (int i = 0; i < 2000; ++i) log::info("async_line", {{"i", i}}, "async line {}", i);
  });  // stderr_of flush()es before it restores fd 2
  reset();
  const std::vector<std::string> lines = lines_of(out);
  ASSERT_EQ(lines.size(), 2000u);
  for (int i = 0; i < 2000; ++i)
    EXPECT_EQ(lines[i], cat({"ringcast: async line ", std::to_string(i)}));
}

TEST(LogAsync, AFullQueueDropsTheOldestAndNeverBlocksTheThreadThatLogs) {
  // stderr is a pipe nobody reads (4 KiB): the writer thread blocks on it, the queue of 16
  // fills, and logging goes on at memory speed, counting what it drops.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  (void)::fcntl(p[1], F_SETPIPE_SZ, 4096);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(p[1], 2);
  ::close(p[1]);
  const uint64_t dropped_before = log::lines_dropped();
  reset({.rate_per_second = 0, .async = true, .queue_lines = 16});
  constexpr int kLines = 5000;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kLines; ++i) {
    log::info("flood", {}, "flood line {} {}", i, std::string(80, 'y'));
  }
  const auto took = std::chrono::steady_clock::now() - started;
  const uint64_t dropped = log::lines_dropped() - dropped_before;
  // Read the pipe now: the writer finishes what it kept.
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  log::flush();
  reset();
  ::dup2(saved, 2);  // the pipe's last write end goes: the reader sees its end
  ::close(saved);
  reader.join();
  ::close(p[0]);
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_GT(dropped, 0u);
  const std::vector<std::string> lines = lines_of(got);
  EXPECT_EQ(lines.size() + dropped, static_cast<uint64_t>(kLines));
  for (const std::string& line : lines) {
    EXPECT_EQ(line.rfind("ringcast: flood line ", 0), 0u) << line;
    EXPECT_EQ(line.substr(line.size() - 80), std::string(80, 'y')) << line;
  }
  // The newest lines are kept: the last one logged went out.
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind(cat({"ringcast: flood line ", std::to_string(kLines - 1), " "}), 0),
            0u)
      << lines.back();
}

// The child of LogExit below (its own process: the exit is the test).
struct LogsWhenDestroyed {
  const char* what;
  ~LogsWhenDestroyed() {
    if (std::getenv(kChildEnv) != nullptr) log::info("exit_line", {}, "{}", what);
  }
};
// Made before main(): destroyed after the exit handler shutdown() that configure() registered.
LogsWhenDestroyed g_global{"from a global destructor, after the exit handler"};

TEST(LogExitChild, LogsAndReturns) {
  if (std::getenv(kChildEnv) == nullptr) GTEST_SKIP() << "runs as LogExit's child process";
  log::Options o;
  o.rate_per_second = 0;
  o.async = true;
  log::configure(o);
  // Made after configure(): destroyed before its exit handler runs, logged through the queue.
  static LogsWhenDestroyed local{"from a function-local static, before the exit handler"};
  for (int i = 0; i < 3000; ++i) log::info("exit_line", {}, "queued line {}", i);
}

TEST(LogExit, ALineLoggedWhileTheProcessExitsStillGoesOut) {
  test::TempDir dir("log-exit");
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  test::ProcessOptions po;
  po.stdout_path = dir.file("out.txt");
  po.stderr_path = dir.file("err.txt");
  po.env = {cat({kChildEnv, "=1"})};
  test::Process child =
      test::Process::start({self, "--gtest_filter=LogExitChild.LogsAndReturns"}, std::move(po));
  const auto st = child.wait(std::chrono::seconds(20));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->ok()) << st->str() << "\n" << test::read_file(dir.file("out.txt"));
  const std::vector<std::string> lines = lines_of(test::read_file(dir.file("err.txt")));
  ASSERT_EQ(lines.size(), 3002u);
  for (int i = 0; i < 3000; ++i)
    EXPECT_EQ(lines[i], cat({"ringcast: queued line ", std::to_string(i)}));
  EXPECT_EQ(lines[3000], "ringcast: from a function-local static, before the exit handler");
  EXPECT_EQ(lines[3001], "ringcast: from a global destructor, after the exit handler");
}

}  // namespace
}  // namespace ringcast
