#!/usr/bin/env bash
# Installs what is needed (the runtime set and the test and benchmark peers), builds, and runs
# every test: once in Release (-O3, where GCC warns differently; -Werror holds there too; the
# benchmarks are built as well), once under AddressSanitizer + UndefinedBehaviorSanitizer
# (Debug, assertions on), then every fuzz target for 20 s (tools/fuzz.sh). A RelWithDebInfo
# stage used to run first as well; it ran the same optimized code as Release (NDEBUG in both)
# and cost a quarter of CI's 35 minutes, so it went.
# Usage: tools/test.sh [--no-asan] [--no-fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh test
JOBS=${JOBS:-2}
ASAN=1
FUZZ=1
for arg in "$@"; do
  case "$arg" in
    --no-asan) ASAN=0 ;;
    --no-fuzz) FUZZ=0 ;;
    *) echo "usage: $0 [--no-asan] [--no-fuzz]" >&2; exit 2 ;;
  esac
done

configure_and_build() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DRINGCAST_BUILD_TESTS=ON "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS"
}
build_and_test() {  # dir, extra cmake args...
  configure_and_build "$@"
  bash tests/portal/setup.sh "$1/portal-node"  # playwright-core for E2ePortal (npm ci, cached)
  bash tests/openapi/setup.sh "$1/openapi-node"  # the OpenAPI checks for E2eOpenApi (npm ci, cached)
  (cd "$1" && ctest --output-on-failure -j"$JOBS" --timeout 600)
}

build_and_test build-release -DCMAKE_BUILD_TYPE=Release -DRINGCAST_BUILD_BENCH=ON
# The Debian packages of that build: made, installed, run as the unit says, purged
# (docs/packaging.md). It installs packages, so only as root (CI is).
if [ "$(id -u)" = 0 ]; then
  bash tools/package-test.sh build-release
else
  echo "test.sh: tools/package-test.sh skipped: it needs root (dpkg -i)"
fi
if [ "$ASAN" = 1 ]; then
  # Benchmarks are not built under sanitizers: they measure, the Release build has them.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build_and_test build-asan -DCMAKE_BUILD_TYPE=Debug -DRINGCAST_SANITIZE=ON -DRINGCAST_BUILD_BENCH=OFF
fi
if [ "$FUZZ" = 1 ]; then
  # The parsers that face the network, each fuzzed for a bounded time over its corpus (the
  # findings so far included): a crash, leak, hang or out-of-memory fails the run.
  JOBS=$JOBS bash tools/fuzz.sh --seconds "${RINGCAST_FUZZ_SECONDS:-20}"
fi
