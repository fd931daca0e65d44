// core/check.h: an invariant check stays on in every build (this runs in the Release build as
// well as the sanitizer one) and stops the process naming the expression and its place.
#include "core/check.h"

#include <gtest/gtest.h>

#include "core/result.h"

namespace ringcast {
namespace {

int checked(int x) {
  RC_CHECK(x > 0);
  return x;
}

TEST(CheckDeathTest, ABrokenInvariantStopsTheProcessInEveryBuild) {
  EXPECT_EQ(checked(3), 3);
  EXPECT_DEATH(checked(-1), "invariant broken at .*check_test.cc:[0-9]+: x > 0");
}

TEST(CheckDeathTest, AResultReadOnTheWrongSideStops) {
  Result<int> bad = make_error(Errc::kInternal, "no");
  EXPECT_DEATH((void)bad.value(), "invariant broken at .*result.h");
  Result<int> good = 4;
  EXPECT_DEATH((void)good.error(), "invariant broken at .*result.h");
}

}  // namespace
}  // namespace ringcast
