// What a test needs from the machine (redis-server, nginx, chromium, FUSE, ...): without it the
// test skips itself on a developer's machine, and fails under CI=true, so that a missing
// install step cannot hide behind a green run (CONTRIBUTING.md "Tests"). Header only: the
// power-cut filesystem's own tests use it without the rest of the test support.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace ringcast::test {

// CI=true (or 1, yes) in the environment: .ci/run sets it.
inline bool under_ci() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string_view v(ci);
  return v == "true" || v == "1" || v == "yes";
}

}  // namespace ringcast::test

// `RINGCAST_SKIP_MISSING() << "redis-server is not installed";` in a test body or SetUp():
// GTEST_SKIP() there, a fatal failure naming the missing part under CI=true. Returns.
#define RINGCAST_SKIP_MISSING()                                                              \
  return ::testing::internal::AssertHelper(                                                  \
             ::ringcast::test::under_ci() ? ::testing::TestPartResult::kFatalFailure         \
                                          : ::testing::TestPartResult::kSkip,                \
             __FILE__, __LINE__,                                                             \
             ::ringcast::test::under_ci() ? "CI=true, and a part this test needs is missing" \
                                          : "") = ::testing::Message()
