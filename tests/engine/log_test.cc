// log/log.h: the daemon's one logger writes one whole line per event, "ringcast: <message>" on
// stderr (the lines docs/operations.md quotes), and drops lines below its level.
#include "log/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ringcast {
namespace {

// What `fn` writes to stderr (fd 2), through a file.
template <class F>
std::string stderr_of(F fn) {
  test::TempDir dir("log-test");
  const std::string path = dir.file("err.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  FILE* f = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(f), 2);
  fn();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  return test::read_file(path);
}

TEST(Log, OneLinePerEventWithThePrefixAndTheLevelDecides) {
  const std::string out = stderr_of([] {
    log::set_level(log::Level::kInfo);
    log::info("shard {}: {} answer(s)", 3, 7);
    log::debug("not shown {}", 1);
    log::warn("with a newline already\n");
    log::set_level(log::Level::kError);
    log::warn("dropped");
    log::error("kept {:.1f} s", 1.0);
    log::set_level(log::Level::kInfo);
  });
  EXPECT_EQ(out,
            "ringcast: shard 3: 7 answer(s)\n"
            "ringcast: with a newline already\n"
            "ringcast: kept 1.0 s\n");
}

TEST(Log, LinesFromManyThreadsStayWhole) {
  const std::string out = stderr_of([] {
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([t] {
        for (int i = 0; i < 200; ++i) log::info("thread {} line {} {}", t, i, std::string(40, 'x'));
      });
    }
    for (auto& t : ts) t.join();
  });
  size_t lines = 0;
  size_t from = 0;
  while (from < out.size()) {
    const size_t end = out.find('\n', from);
    ASSERT_NE(end, std::string::npos);
    const std::string line = out.substr(from, end - from);
    EXPECT_EQ(line.rfind("ringcast: thread ", 0), 0u) << line;
    EXPECT_EQ(line.substr(line.size() - 41), " " + std::string(40, 'x')) << line;
    ++lines;
    from = end + 1;
  }
  EXPECT_EQ(lines, 800u);
}

}  // namespace
}  // namespace ringcast
