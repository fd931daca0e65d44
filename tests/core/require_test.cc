// tests/support/require.h: a test that lacks a part of the machine skips on a developer's
// machine and fails under CI=true (a missing install step must not pass as a green run).
#include "tests/support/require.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace ringcast::test {
namespace {

void needs_a_missing_part() {
  RINGCAST_SKIP_MISSING() << "frobnicator is not installed";
}

// What needs_a_missing_part() reports with CI set to `ci` (unset: nullopt), into `results`.
void run_with_ci(const std::optional<std::string>& ci, ::testing::TestPartResultArray* results) {
  const char* before = std::getenv("CI");
  const std::optional<std::string> saved =
      before ? std::optional<std::string>(before) : std::nullopt;
  if (ci) {
    ::setenv("CI", ci->c_str(), 1);
  } else {
    ::unsetenv("CI");
  }
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, results);
    needs_a_missing_part();
  }
  if (saved) {
    ::setenv("CI", saved->c_str(), 1);
  } else {
    ::unsetenv("CI");
  }
}

TEST(Require, AMissingPartSkipsOutsideCi) {
  for (const std::optional<std::string>& ci :
       {std::optional<std::string>(), std::optional<std::string>("false"),
        std::optional<std::string>("")}) {
    ::testing::TestPartResultArray r;
    run_with_ci(ci, &r);
    ASSERT_EQ(r.size(), 1);
    EXPECT_EQ(r.GetTestPartResult(0).type(), ::testing::TestPartResult::kSkip);
  }
}

TEST(Require, AMissingPartFailsUnderCi) {
  for (const char* ci : {"true", "1", "yes"}) {
    ::testing::TestPartResultArray r;
    run_with_ci(std::string(ci), &r);
    ASSERT_EQ(r.size(), 1) << ci;
    EXPECT_EQ(r.GetTestPartResult(0).type(), ::testing::TestPartResult::kFatalFailure) << ci;
    EXPECT_NE(std::string(r.GetTestPartResult(0).message()).find("frobnicator"), std::string::npos);
    EXPECT_NE(std::string(r.GetTestPartResult(0).message()).find("CI=true"), std::string::npos);
  }
}

}  // namespace
}  // namespace ringcast::test
