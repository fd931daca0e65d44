#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: once in a normal build, once under
# AddressSanitizer + UndefinedBehaviorSanitizer, then every fuzz target for 20 s
# (tools/fuzz.sh). Usage: tools/test.sh [--no-asan] [--no-fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."
ASAN=1
FUZZ=1
for arg in "$@"; do
  case "$arg" in
    --no-asan) ASAN=0 ;;
    --no-fuzz) FUZZ=0 ;;
    *) echo "test.sh: unknown argument $arg (--no-asan, --no-fuzz)" >&2; exit 2 ;;
  esac
done
bash tools/install-deps.sh
JOBS=${JOBS:-2}

build_and_test() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j"$JOBS"
  (cd "$dir" && ctest --output-on-failure -j"$JOBS" --timeout 600)
}

build_and_test build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "$ASAN" = 1 ]; then
  # Benchmarks are not built under sanitizers: they measure, the plain build runs them.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build_and_test build-asan -DCMAKE_BUILD_TYPE=Debug -DRINGCAST_SANITIZE=ON -DRINGCAST_BUILD_BENCH=OFF
fi
if [ "$FUZZ" = 1 ]; then
  # The parsers that face the network, each fuzzed for a bounded time over its corpus (the
  # findings so far included): a crash, leak, hang or out-of-memory fails the run.
  JOBS=$JOBS bash tools/fuzz.sh --seconds "${RINGCAST_FUZZ_SECONDS:-20}"
fi
