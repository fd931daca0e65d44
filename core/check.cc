#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace ringcast {

void check_failed(const char* expression, const char* file, int line) {
  std::fprintf(stderr, "ringcast: invariant broken at %s:%d: %s\n", file, line, expression);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ringcast
